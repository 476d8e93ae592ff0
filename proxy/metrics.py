"""What the proxy records per request: Prometheus collectors in a registry of its own (no process
globals) and one structured access line (logger ``history_proxy.access``, never content or keys).

Label values stay bounded: ``role`` is one of the roles the config names, its default role,
``other`` for any other header value, or ``none`` before the caller is known; ``upstream`` is an
upstream name from the config or ``none``; agent names never become labels.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

from proxy.config import Config
from proxy.identity import Identity
from proxy.pipeline import PipelineResult

access_log = logging.getLogger("history_proxy.access")

_SANE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def request_id_for(headers: Mapping[str, str]) -> str:
    """The client's ``x-request-id`` when it is short and plain, else a fresh uuid4 hex."""
    given = headers.get("x-request-id", "")
    return given if _SANE_REQUEST_ID.match(given) else uuid.uuid4().hex


NO_LABEL = "none"
OTHER_ROLE = "other"
TOKEN_BUCKETS = (100, 500, 1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 64_000, 128_000, 256_000, 1_000_000)
OVERHEAD_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


@dataclass
class Exchange:
    """One proxied request as the access log and the metrics see it (never content or keys)."""

    request_id: str
    method: str
    path: str
    started: float
    identity: Identity | None = None
    model: str | None = None
    upstream: str | None = None
    stream: bool = False
    result: PipelineResult | None = None
    status: int = 0
    attempts: int = 0
    overhead_ms: float | None = None
    broken: bool = False
    finished: bool = False

    def elapsed_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000

    def fields(self) -> dict[str, Any]:
        who = self.identity
        result = self.result
        return {
            "request_id": self.request_id,
            "method": self.method,
            "path": self.path,
            "role": who.role if who else None,
            "agent": who.agent if who else None,
            "tenant": who.tenant if who else None,
            "model": self.model,
            "upstream": self.upstream,
            "status": self.status,
            "stream": self.stream,
            "attempts": self.attempts,
            "messages_before": result.messages_before if result else None,
            "messages_after": result.messages_after if result else None,
            "tokens_before": result.tokens_before if result else None,
            "tokens_after": result.tokens_after if result else None,
            "filters": result.applied if result else None,
            "failed_filter": result.failed_filter if result else None,
            "broken": self.broken,
            "overhead_ms": None if self.overhead_ms is None else round(self.overhead_ms, 2),
            "total_ms": round(self.elapsed_ms(), 2),
        }


class Metrics:
    """Request, token, filter-failure and overhead collectors for one app."""

    def __init__(self, config: Config) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._roles = frozenset(config.policies.roles) | {config.identity.default_role}
        self._upstreams = frozenset(config.upstreams)
        self.requests = Counter(
            "history_proxy_requests",
            "Requests answered, by caller role, upstream and HTTP status.",
            ["role", "upstream", "status"],
            registry=self.registry,
        )
        self.tokens_before = Histogram(
            "history_proxy_tokens_before",
            "Prompt tokens of chat completions as the client sent them.",
            ["role"],
            buckets=TOKEN_BUCKETS,
            registry=self.registry,
        )
        self.tokens_after = Histogram(
            "history_proxy_tokens_after",
            "Prompt tokens of chat completions after the role's filter chain.",
            ["role"],
            buckets=TOKEN_BUCKETS,
            registry=self.registry,
        )
        self.filter_failures = Counter(
            "history_proxy_filter_failures",
            "Filters that raised or broke an invariant, by filter type.",
            ["filter"],
            registry=self.registry,
        )
        self.overhead = Histogram(
            "history_proxy_overhead_seconds",
            "Time spent in the proxy per request, excluding the wait for the upstream.",
            buckets=OVERHEAD_BUCKETS,
            registry=self.registry,
        )

    def role_label(self, role: str | None) -> str:
        """``role`` if the config names it, else ``other`` (``none`` when unknown)."""
        if role is None:
            return NO_LABEL
        return role if role in self._roles else OTHER_ROLE

    def upstream_label(self, upstream: str | None) -> str:
        return upstream if upstream in self._upstreams else NO_LABEL

    def observe_request(self, *, role: str | None, upstream: str | None, status: int) -> None:
        """Count one answered request."""
        self.requests.labels(self.role_label(role), self.upstream_label(upstream), str(status)).inc()

    def observe_tokens(self, *, role: str | None, before: int, after: int) -> None:
        """Record one chat completion's prompt tokens before and after its chain."""
        label = self.role_label(role)
        self.tokens_before.labels(label).observe(before)
        self.tokens_after.labels(label).observe(after)

    def observe_filter_failure(self, filter_type: str) -> None:
        self.filter_failures.labels(filter_type).inc()

    def observe_overhead(self, seconds: float) -> None:
        self.overhead.observe(max(0.0, seconds))

    def finish(self, exchange: Exchange, status: int | None = None) -> None:
        """Count the request and write its access line, once, however it ended."""
        if exchange.finished:
            return
        exchange.finished = True
        if status is not None:
            exchange.status = status
        role = exchange.identity.role if exchange.identity else None
        self.observe_request(role=role, upstream=exchange.upstream, status=exchange.status)
        if exchange.result is not None:
            self.observe_tokens(
                role=role, before=exchange.result.tokens_before, after=exchange.result.tokens_after
            )
            if exchange.result.failed_filter:
                self.observe_filter_failure(exchange.result.failed_filter.partition("@")[0])
        if exchange.overhead_ms is not None:
            self.observe_overhead(exchange.overhead_ms / 1000)
        fields = exchange.fields()
        access_log.info(json.dumps(fields, separators=(",", ":")), extra={"access": fields})

    def render(self) -> tuple[bytes, str]:
        """The Prometheus text exposition and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
