"""What the proxy records per request: Prometheus collectors in a registry of its own (no process
globals) and one structured access line (logger ``history_proxy.access``, never content or keys).

Label values stay bounded: ``role`` is one of the roles the config names, its default role,
``other`` for any other header value, or ``none`` before the caller is known; ``upstream`` is an
upstream name from the config or ``none``; ``filter`` is a registered filter type; agent names,
request ids and models never become labels.

:class:`Metrics` composes one object per collector family, each in its own module and fed from
:meth:`Metrics.finish`: requests (:mod:`~history_proxy.observability.request_metrics`), shaping
(:mod:`~history_proxy.observability.shaping_metrics`), upstreams (:mod:`~history_proxy.observability.upstream_metrics`),
summaries (:mod:`~history_proxy.observability.summary_metrics`) and role hints
(:mod:`~history_proxy.observability.role_hints`).

Each process has its own registry. Under ``serve --workers N`` the command points
``PROMETHEUS_MULTIPROC_DIR`` at a fresh directory before the workers start; prometheus-client then
keeps every worker's values in files there and :meth:`Metrics.render` sums them, so any worker's
``/metrics`` shows the whole server.
"""

from __future__ import annotations

import logging
import os
import time
import uuid

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from history_proxy.config.models import Config
from history_proxy.core.calibration import Calibration
from history_proxy.core.identity import Identity
from history_proxy.observability import calibration_metrics
from history_proxy.observability.access import Exchange, access_log, request_id_for, write_access_line
from history_proxy.observability.collectors import NO_LABEL
from history_proxy.observability.request_metrics import RequestCollectors
from history_proxy.observability.role_hints import RoleHints
from history_proxy.observability.shaping_metrics import ShapingCollectors
from history_proxy.observability.summary_metrics import SummaryCollectors
from history_proxy.observability.tracing import Telemetry
from history_proxy.observability.upstream_metrics import UpstreamCollectors

__all__ = [
    "Exchange",
    "Metrics",
    "request_id_for",
]  # Exchange and request_id_for live in history_proxy.observability.access

OTHER_ROLE = "other"
SUMMARIZER_ROLE = "summarizer"
"""The role the proxy's own summary calls are counted and logged under."""
MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"


class Metrics:
    """The collector families of one app, the labels they take, and the access line."""

    def __init__(self, config: Config) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.reconfigure(config)
        self.requests = RequestCollectors(self.registry)
        self.shaping = ShapingCollectors(self.registry)
        self.upstreams = UpstreamCollectors(self.registry)
        self.summaries = SummaryCollectors(self.registry)
        self.role_hints = RoleHints(self.registry)
        self.telemetry = Telemetry(config.telemetry, self.registry)  # spans, ended by finish
        self._calibration: Calibration | None = None

    def watch_calibration(self, calibration: Calibration) -> None:
        """Learn token ratios from every finished request, and expose them (``history_proxy_token_ratio``)."""
        self._calibration = calibration
        calibration_metrics.register(self.registry, calibration)

    def reconfigure(self, config: Config) -> None:
        """Take a (reloaded) config's roles, upstreams and secrets (collectors and their counts are kept)."""
        self._roles = frozenset(config.policies.roles) | {config.identity.default_role, SUMMARIZER_ROLE}
        self._upstreams = frozenset(config.upstreams)
        self._secrets = [u.key for u in config.upstreams.values() if u.key] + [
            k.key.get_secret_value() for k in config.auth.keys
        ]

    def role_label(self, role: str | None) -> str:
        """``role`` if the config names it, else ``other`` (``none`` when unknown)."""
        if role is None:
            return NO_LABEL
        return role if role in self._roles else OTHER_ROLE

    def upstream_label(self, upstream: str | None) -> str:
        return upstream if upstream in self._upstreams else NO_LABEL

    def stream_opened(self, exchange: Exchange) -> None:
        """Count a streamed answer as in flight until :meth:`finish`."""
        self.upstreams.stream_opened(exchange)

    def observe_filter_failure(self, filter_type: str) -> None:
        self.shaping.observe_filter_failure(filter_type)

    def observe_overflow(self, upstream: str, outcome: str) -> None:
        """Count a refusal for length and what the proxy did about it."""
        self.upstreams.observe_overflow(self.upstream_label(upstream), outcome)

    def observe_memo(self, surface: str, reused: int, converted: int, held: int) -> None:
        """Count a surface request's natives by whether the view memo had their view; the memo's size."""
        self.shaping.observe_memo(surface, reused, converted, held)

    def finish(self, exchange: Exchange, status: int | None = None) -> None:
        """Count the request and write its access line, once, however it ended."""
        if not exchange.ended(status):
            return
        role = self.role_label(exchange.identity.role if exchange.identity else None)
        upstream = self.upstream_label(exchange.upstream)
        result = exchange.result
        traffic = result is not None and exchange.upstream is not None  # previews are not traffic
        self.requests.observe(exchange, role, upstream, traffic)
        self.role_hints.observe(exchange.identity)
        if traffic and result is not None:
            self.shaping.observe(result, role)
        self.upstreams.observe(exchange, role, upstream)
        if traffic and self._calibration is not None:
            calibration_metrics.observe(self._calibration, exchange)
        if exchange.trace is not None:
            exchange.trace.end(exchange)
        if access_log.isEnabledFor(logging.INFO):  # no fields (or redacted body) for a line nobody sees
            write_access_line(exchange.fields(self._secrets))

    # --- summaries (``summarize``): the recorder history_proxy.summaries.cache reports to ---------------------

    def summary_cache_hit(self, source: str) -> None:
        self.summaries.hit(source)

    def summary_cache_miss(self) -> None:
        self.summaries.miss()

    def summary_cache_error(self, backend: str) -> None:
        self.summaries.error(backend)

    def summary_call(
        self, *, upstream: str | None, model: str, outcome: str, status: int, seconds: float
    ) -> None:
        """Count one summary call, and log and count it as a request of role ``summarizer``."""
        self.summaries.call(self.upstream_label(upstream), outcome)
        self.telemetry.summary_call(upstream, model, outcome, status, seconds)
        exchange = Exchange(
            uuid.uuid4().hex,
            "POST",
            "/v1/chat/completions",
            time.perf_counter() - seconds,
            identity=Identity(role=SUMMARIZER_ROLE),
            model=model or None,
            upstream=upstream,
        )
        self.finish(exchange, status)

    def render(self) -> tuple[bytes, str]:
        """The Prometheus text exposition and its content type (every worker's, in multiprocess mode)."""
        directory = os.environ.get(MULTIPROCESS_ENV)
        if directory:
            merged = CollectorRegistry()
            MultiProcessCollector(merged, path=directory)  # type: ignore[no-untyped-call]
            return generate_latest(merged), CONTENT_TYPE_LATEST
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
