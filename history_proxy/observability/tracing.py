"""Telemetry for one app: whether model calls get spans, and the hooks the server calls.

Off (``telemetry.enabled: false``, the default, or ``OTEL_SDK_DISABLED=true``): the tracing modules are
not imported and no span object is made; each hook is an attribute test. On: :meth:`Telemetry.begin` gives each
model call (chat completions, Responses, Messages) a :class:`~history_proxy.observability.spans.RequestTrace`
on ``exchange.trace``, which the upstream client tells of every attempt and
:meth:`~history_proxy.observability.metrics.Metrics.finish` ends. The tracer is made when the process starts
and a reload keeps it (``capture_content`` is read per request). See ``docs/telemetry.md``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry

from history_proxy.config.models import Config
from history_proxy.config.telemetry import TelemetryConfig
from history_proxy.observability.access import Exchange
from history_proxy.observability.genai import OPT_IN_ENV, latest_only, surface_of

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Tracer

    from history_proxy.observability.spans import RequestTrace


class Telemetry:
    """The tracer of one app, or none when telemetry is off."""

    def __init__(self, config: TelemetryConfig, registry: CollectorRegistry) -> None:
        self.tracer: Tracer | None = None
        self.provider: TracerProvider | None = None
        self._trace: type[RequestTrace] | None = None
        self._latest = latest_only(os.environ.get(OPT_IN_ENV))
        if config.enabled:
            from history_proxy.observability.otel import (
                sdk_disabled,
                start_tracer,
            )  # the SDK loads only when on

            if not sdk_disabled():
                from history_proxy.observability.spans import RequestTrace

                self.tracer, self.provider = start_tracer(config, registry)
                self._trace = RequestTrace

    def begin(self, exchange: Exchange, headers: Mapping[str, str], config: Config) -> Exchange:
        """Start the span of ``exchange`` when it is a model call and telemetry is on."""
        if self.tracer is not None and self._trace is not None and surface_of(exchange.path) is not None:
            exchange.traced(self._trace(self.tracer, exchange, headers, config, latest=self._latest))
        return exchange

    @staticmethod
    def requested(exchange: Exchange, body: Mapping[str, Any]) -> str | None:
        """The model the request names (``None`` unless a non-empty string), told to its span if traced."""
        model = body.get("model")
        model = model if isinstance(model, str) and model else None
        if exchange.trace is not None:
            exchange.trace.request(model, body)
        return model

    def summary_call(
        self, upstream: str | None, model: str, outcome: str, status: int, seconds: float
    ) -> None:
        """A summary call ended: a span under the request that made it, when that request is traced."""
        if self.tracer is None:
            return
        from history_proxy.observability.spans import CURRENT

        trace = CURRENT.get()
        if trace is not None and not trace.ended:
            trace.summary(upstream=upstream, model=model, outcome=outcome, status=status, seconds=seconds)
