"""The access line: one record per request (:class:`Exchange`) and its fields, never content or keys.

:meth:`history_proxy.observability.metrics.Metrics.finish` counts an exchange and writes its line on the logger
``history_proxy.access`` at INFO: the message is the fields as compact JSON, and the same fields
ride on the record as ``record.access`` for the formatters of :mod:`history_proxy.observability.logs`
(:func:`write_access_line`). The handlers fill an :class:`Exchange` phase by phase, one method per
phase (``identified``, ``routed``, ``read``, ``shaped``, ``attempt_sent``, ``answer_started``,
``relayed``, ``ended``, ...); only this module assigns its fields (tests/test_architecture.py).
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from history_proxy.core.identity import Identity
from history_proxy.core.refetch import refetch_count
from history_proxy.core.usage import CacheUsage
from history_proxy.observability.logs import JsonMessage, redact
from history_proxy.pipeline.run import PipelineResult

access_log = logging.getLogger("history_proxy.access")

_SANE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


_IDS_PER_DRAW = 256
_fresh_ids: list[str] = []
os.register_at_fork(after_in_child=_fresh_ids.clear)  # a forked worker must never reuse its parent's ids


def write_access_line(fields: dict[str, Any]) -> None:
    """``access_log.info(JsonMessage(fields), extra={"access": fields})`` from the caller's line.

    The same record as ``info`` makes, without ``findCaller``'s walk up the stack: the caller is
    known (:meth:`history_proxy.observability.metrics.Metrics.finish`), and ``logging._srcfile = None`` still
    turns the lookup off. The one use of the private ``logging._srcfile`` (tests/test_private_apis.py).
    """
    if not logging._srcfile:  # as Logger._log tests it
        where: tuple[str, int, str] = ("(unknown file)", 0, "(unknown function)")
    else:
        caller = sys._getframe(1)
        where = (caller.f_code.co_filename, caller.f_lineno, caller.f_code.co_name)
    filename, line, function = where
    message, extra = JsonMessage(fields), {"access": fields}
    record = access_log.makeRecord(
        access_log.name, logging.INFO, filename, line, message, (), None, function, extra
    )
    access_log.handle(record)


def fresh_request_id() -> str:
    """A random uuid4 in hex (32 characters), as ``uuid.uuid4().hex`` makes it.

    The random bytes are drawn from ``os.urandom`` for 256 ids at a time: one system call and no
    ``UUID`` object per request. ``list.pop`` is atomic, so no two callers ever get the same id.
    """
    while True:
        try:
            return _fresh_ids.pop()
        except IndexError:
            _fresh_ids.extend(_draw_ids())


def _draw_ids() -> list[str]:
    raw = bytearray(os.urandom(16 * _IDS_PER_DRAW))
    raw[6::16] = bytes(0x40 | (byte & 0x0F) for byte in raw[6::16])  # version 4
    raw[8::16] = bytes(0x80 | (byte & 0x3F) for byte in raw[8::16])  # RFC 4122 variant
    text = raw.hex()
    return [text[start : start + 32] for start in range(0, len(text), 32)]


def request_id_for(headers: Mapping[str, str]) -> str:
    """The client's ``x-request-id`` when it is short and plain, else a fresh uuid4 hex."""
    given = headers.get("x-request-id", "")
    return given if _SANE_REQUEST_ID.match(given) else fresh_request_id()


_EMPTY: dict[str, Any] = {}
ERROR_CHARS = 200
"""How much of a refusal's message the access line keeps."""
_NO_RESULT: dict[str, Any] = dict.fromkeys(
    (
        "mode",
        "attempts",
        "messages_before",
        "messages_after",
        "tokens_before",
        "tokens_after",
        "tokens_by_role_before",
        "tokens_by_role_after",
        "filters",
        "limit",
        "failed_filter",
        "notes",
        "refetches",
        "broken",
    )
)
"""The access fields of an exchange without a chain result, in line order (attempts and broken set after)."""


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
    usage: CacheUsage | None = None
    """The input and prompt-cache tokens the upstream reported, when it did."""
    overflow_retry: int | None = None
    """The token budget a request refused as too long was fitted to and sent again with."""
    error: str | None = None
    """Why the proxy refused the request itself (``invalid_json: the request body is not valid JSON ...``)."""
    trace: Any = None
    """The model call's spans (:class:`history_proxy.observability.spans.RequestTrace`) when telemetry is on."""

    # --- the request's phases, each recording its facts in one call (nothing else writes a field) ---

    def traced(self, trace: Any) -> None:
        """Telemetry is on and this is a model call: ``trace`` holds its spans."""
        self.trace = trace

    def identified(self, identity: Identity) -> Identity:
        """The caller is known (role, agent, tenant); ``identity`` is handed back."""
        self.identity = identity
        return identity

    def routed(self, model: str | None, upstream: str | None) -> None:
        """The model the body names and the first upstream it goes to (``None``: nothing is forwarded)."""
        self.model = model
        self.upstream = upstream

    def read(self, body: dict[str, Any], *, keep: bool, stream: bool = False) -> None:
        """The body is parsed: whether the client asked for a stream (``stream``: its route says so,
        Gemini's ``streamGenerateContent``); the body itself kept when ``keep`` (``log_bodies: true``)."""
        self.stream = stream or body.get("stream") is True
        if keep:
            self.body = body

    def shaped(self, result: PipelineResult) -> PipelineResult:
        """The chain ran: what it did (handed back)."""
        self.result = result
        return result

    def attempt_sent(self) -> None:
        """A request went upstream now (the first send, or the fitted one after a refusal for length)."""
        self.upstream_started = time.perf_counter()

    def refitted(self, budget: int) -> None:
        """The upstream refused the request as too long; it was fitted to ``budget`` tokens and sent again."""
        self.overflow_retry = budget

    def refused(self, code: str | None, message: str) -> None:
        """The proxy answered an error of its own: its code and the start of its message, for the access line."""
        cut = message if len(message) <= ERROR_CHARS else message[: ERROR_CHARS - 3] + "..."
        self.error = f"{code}: {cut}" if code else cut

    def answer_started(self, upstream: str, attempts: int, status: int) -> None:
        """The upstream that answered, after how many attempts, and its status."""
        self.upstream = upstream
        self.attempts = attempts
        self.status = status

    def overhead(self, waited_ms: float) -> float:
        """The time spent in the proxy so far, less ``waited_ms`` waiting on the upstream (recorded, and
        handed back in milliseconds)."""
        self.overhead_ms = self.elapsed_ms() - waited_ms
        return self.overhead_ms

    def stream_opened(self) -> bool:
        """A streamed answer starts being relayed: ``True`` the first time, if the request is not over."""
        if self.streaming or self.finished:
            return False
        self.streaming = True
        return True

    def relayed(
        self, *, broken: bool, first_byte_at: float | None, usage: CacheUsage | None, status: int | None
    ) -> None:
        """The answer's body was relayed: whether it broke off, when its first byte came, the usage the
        upstream reported, and ``status`` when it replaces the upstream's (the client left early)."""
        self.broken = broken
        self.first_byte_at = first_byte_at
        self.usage = usage
        if status is not None:
            self.status = status

    def ended(self, status: int | None = None) -> bool:
        """The request is over (with ``status`` when the proxy answered it): ``False`` if it already was."""
        if self.finished:
            return False
        self.finished = True
        if status is not None:
            self.status = status
        return True

    # --- what the phases add up to -----------------------------------------------------------------

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
        fields: dict[str, Any] = {
            "request_id": self.request_id,
            "method": self.method,
            "path": self.path,
            "role": who.role if who else None,
            "role_sent": who.role_sent if who else None,
            "agent": who.agent if who else None,
            "tenant": who.tenant if who else None,
            "model": self.model,
            "upstream": self.upstream,
            "status": self.status,
            "stream": self.stream,
        }
        if result is None:
            fields.update(_NO_RESULT, attempts=self.attempts, broken=self.broken)
        else:
            report = result.report
            fields["mode"] = result.mode
            fields["attempts"] = self.attempts
            fields["messages_before"] = result.messages_before
            fields["messages_after"] = result.messages_after
            fields["tokens_before"] = result.tokens_before
            fields["tokens_after"] = result.tokens_after
            forwarded = report.get("forwarded")
            if forwarded is not None:  # shadow mode: "after" is what the chain would have sent
                fields["messages_forwarded"] = forwarded["messages"]
                fields["tokens_forwarded"] = forwarded["tokens"]
            fields["tokens_by_role_before"] = report.get("before", _EMPTY).get("tokens_by_role")
            fields["tokens_by_role_after"] = report.get("after", _EMPTY).get("tokens_by_role")
            fields["filters"] = [
                {
                    "type": f["type"],
                    "at": f["at"],
                    "tokens_removed": f["tokens_removed"],
                    "messages_removed": f["messages_removed"],
                    "ms": f["ms"],
                }
                for f in report.get("filters", ())
            ]
            fields["limit"] = report.get("limit")
            fields["failed_filter"] = result.failed_filter
            fields["notes"] = report.get("notes")
            fields["refetches"] = refetch_count(report.get("notes"))
            fields["broken"] = self.broken
        usage = self.usage
        fields["upstream_input_tokens"] = usage.input_tokens if usage else None
        fields["upstream_cached_tokens"] = usage.cached_tokens if usage else None
        fields["upstream_cache_write_tokens"] = usage.cache_write_tokens if usage else None
        fields["cached_share"] = round(usage.cached_share, 4) if usage else None
        fields["overflow_retry"] = self.overflow_retry
        now = time.perf_counter()
        sent = self.upstream_started
        fields["overhead_ms"] = None if self.overhead_ms is None else round(self.overhead_ms, 2)
        fields["first_byte_ms"] = _rounded(self.first_byte_ms())
        fields["upstream_ms"] = None if sent is None else round((now - sent) * 1000, 2)
        fields["total_ms"] = round((now - self.started) * 1000, 2)
        if self.trace is not None:  # joins the line to its trace
            fields["trace_id"] = self.trace.trace_id
        if self.error is not None:  # the proxy's own words to the client, key-shaped strings redacted
            fields["error"] = redact(self.error, secrets)
        if self.body is not None:
            fields["body"] = redact(self.body, secrets)
        return fields
