"""The access line: one record per request (:class:`Exchange`) and its fields, never content or keys.

:meth:`proxy.metrics.Metrics.finish` counts an exchange and writes its line on the logger
``history_proxy.access`` at INFO: the message is the fields as compact JSON, and the same fields
ride on the record as ``record.access`` for the formatters of :mod:`proxy.logs`.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from proxy.identity import Identity
from proxy.logs import redact
from proxy.pipeline import PipelineResult

access_log = logging.getLogger("history_proxy.access")

_SANE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def request_id_for(headers: Mapping[str, str]) -> str:
    """The client's ``x-request-id`` when it is short and plain, else a fresh uuid4 hex."""
    given = headers.get("x-request-id", "")
    return given if _SANE_REQUEST_ID.match(given) else uuid.uuid4().hex


_FILTER_FIELDS = ("type", "at", "tokens_removed", "messages_removed", "ms")


def _rounded(ms: float | None) -> float | None:
    return None if ms is None else round(ms, 2)


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
    upstream_started: float | None = None
    """When the first upstream attempt was sent (``perf_counter``)."""
    first_byte_at: float | None = None
    """When the first byte of the upstream's body arrived."""
    streaming: bool = False
    """Counted in the streams-in-flight gauge until finished."""
    body: Any = None
    """The request body, kept only with ``log_bodies: true`` (logged redacted)."""

    def elapsed_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000

    def upstream_ms(self) -> float | None:
        """Time from the first upstream send until now (the answer relayed), if one was sent."""
        return None if self.upstream_started is None else (time.perf_counter() - self.upstream_started) * 1000

    def first_byte_ms(self) -> float | None:
        """Time from the first upstream send until the first byte of its body."""
        if self.upstream_started is None or self.first_byte_at is None:
            return None
        return (self.first_byte_at - self.upstream_started) * 1000

    def fields(self, secrets: Iterable[str] = ()) -> dict[str, Any]:
        """The access line: who, where, what the chain did, timings; the body only if kept, redacted."""
        who = self.identity
        result = self.result
        report = result.report if result else {}
        forwarded = report.get("forwarded")
        fields: dict[str, Any] = {
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
            "mode": result.mode if result else None,
            "attempts": self.attempts,
            "messages_before": result.messages_before if result else None,
            "messages_after": result.messages_after if result else None,
            "tokens_before": result.tokens_before if result else None,
            "tokens_after": result.tokens_after if result else None,
        }
        if forwarded is not None:  # shadow mode: "after" is what the chain would have sent
            fields["messages_forwarded"] = forwarded["messages"]
            fields["tokens_forwarded"] = forwarded["tokens"]
        fields.update(
            tokens_by_role_before=report.get("before", {}).get("tokens_by_role"),
            tokens_by_role_after=report.get("after", {}).get("tokens_by_role"),
            filters=[{k: f[k] for k in _FILTER_FIELDS} for f in report.get("filters", [])]
            if result
            else None,
            limit=report.get("limit"),
            failed_filter=result.failed_filter if result else None,
            notes=report.get("notes"),
            broken=self.broken,
            overhead_ms=_rounded(self.overhead_ms),
            first_byte_ms=_rounded(self.first_byte_ms()),
            upstream_ms=_rounded(self.upstream_ms()),
            total_ms=_rounded(self.elapsed_ms()),
        )
        if self.body is not None:
            fields["body"] = redact(self.body, secrets)
        return fields
