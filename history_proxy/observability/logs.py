"""Log output for ``serve``: one JSON object per line (or a short text line for humans), and redaction.

``logging_config(format, level)`` is the ``logging.config.dictConfig`` document that ``serve``
hands to uvicorn, so every worker process formats the proxy's lines and uvicorn's own the same way,
each line once, on stderr. The access line (logger ``history_proxy.access``, one per request) carries
its fields on the record as ``record.access``; both formatters render them.

``redact(value, secrets)`` replaces configured secrets and key-shaped strings in a JSON value; the
access line uses it when ``log_bodies: true`` puts request bodies in the log.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import orjson

LOG_FORMATS = ("json", "text")
TRACE = 5  # uvicorn's extra level below DEBUG
REDACTED = "[REDACTED]"

_KEY_SHAPED = re.compile(
    r"(?:sk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}"  # OpenAI / Anthropic keys
    r"|AKIA[0-9A-Z]{16}"  # AWS access key ids
    r"|gh[pousr]_[A-Za-z0-9]{30,}"  # GitHub tokens
    r"|(?<=[Bb]earer )[A-Za-z0-9._~+/=-]{8,})"  # whatever follows "Bearer "
)
_SECRET_NAMES = re.compile(r"(?i)(api[_-]?key|authorization|password|secret|token)$")


def redact(value: Any, secrets: Iterable[str] = ()) -> Any:
    """A copy of a JSON value with every secret, key-shaped string and secret-named field replaced.

    Walked with an explicit stack, not recursion: a body nested hundreds of levels deep (valid JSON
    the proxy forwards) must not break its own access line.
    """
    known = sorted({s for s in secrets if s}, key=len, reverse=True)

    def text(s: str) -> str:
        for secret in known:
            s = s.replace(secret, REDACTED)
        return _KEY_SHAPED.sub(REDACTED, s)

    def copy(node: Any, name: str, pending: list[tuple[Any, Any]]) -> Any:
        """``node`` redacted if a leaf; else an empty container of its kind, queued to be filled."""
        if isinstance(node, str):
            return REDACTED if node and name and _SECRET_NAMES.search(name) else text(node)
        if isinstance(node, dict | list):
            empty: dict[Any, Any] | list[Any] = {} if isinstance(node, dict) else []
            pending.append((node, empty))
            return empty
        return node

    pending: list[tuple[Any, Any]] = []
    root = copy(value, "", pending)
    while pending:
        source, target = pending.pop()
        if isinstance(source, dict):
            for key, item in source.items():
                target[key] = copy(item, str(key), pending)
        else:
            target.extend(copy(item, "", pending) for item in source)
    return root


class JsonMessage:
    """A log message that is its fields as compact JSON, serialized only if a handler asks for it."""

    __slots__ = ("fields",)

    def __init__(self, fields: dict[str, Any]) -> None:
        self.fields = fields

    def __str__(self) -> str:
        return json.dumps(self.fields, separators=(",", ":"))


class NotFromTask(logging.Filter):
    """Drops records logged from inside one asyncio task (e.g. a server run in-process for tests)."""

    def __init__(self, task: asyncio.Task[Any]) -> None:
        super().__init__()
        self.task = task

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            return asyncio.current_task() is not self.task
        except RuntimeError:  # no running loop: not that task
            return True


_second: list[Any] = [None, ""]
"""The last whole second :func:`_timestamp` rendered and its text up to the seconds."""


def _timestamp(record: logging.LogRecord) -> str:
    """``record.created`` as ISO 8601 UTC to the millisecond, as ``datetime.fromtimestamp`` rounds it.

    The text up to the seconds is kept for the next record in the same second: one a request.
    """
    whole = int(record.created)
    micros = round((record.created - whole) * 1_000_000)  # what fromtimestamp does: half to even
    if micros >= 1_000_000:
        whole, micros = whole + 1, micros - 1_000_000
    second = _second
    if second[0] != whole:
        second[1] = datetime.fromtimestamp(whole, UTC).isoformat(timespec="seconds").removesuffix("+00:00")
        second[0] = whole
    return f"{second[1]}.{micros // 1000:03d}Z"


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", ...}``: the access fields for access lines, else ``message``."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {"ts": _timestamp(record), "level": record.levelname, "logger": record.name}
        access = getattr(record, "access", None)
        if isinstance(access, dict):
            line.update(access)
        else:
            line["message"] = record.getMessage()
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        try:  # one line per request: orjson is several times faster; the stdlib takes what it refuses
            return orjson.dumps(line, default=str).decode()
        except (TypeError, orjson.JSONEncodeError):  # non-str keys cost orjson an option, so only on need
            pass
        try:
            return orjson.dumps(line, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
        except (TypeError, orjson.JSONEncodeError):
            return json.dumps(line, separators=(",", ":"), ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """``time LEVEL logger: message``; access lines as a short summary of the request."""

    def format(self, record: logging.LogRecord) -> str:
        access = getattr(record, "access", None)
        message = access_summary(access) if isinstance(access, dict) else record.getMessage()
        line = f"{_timestamp(record)} {record.levelname:<7} {record.name}: {message}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def access_summary(fields: dict[str, Any]) -> str:
    """One readable line: status, route, who, tokens and messages before -> after, filters, timings."""
    parts = [f"{fields.get('status')} {fields.get('method')} {fields.get('path')}"]
    for key in ("role", "role_sent", "agent", "tenant", "model", "upstream"):
        if fields.get(key) is not None:
            parts.append(f"{key}={fields[key]}")
    if fields.get("mode") == "shadow":
        parts.append("mode=shadow")
    if fields.get("stream"):
        parts.append("stream")
    if fields.get("tokens_before") is not None:
        parts.append(
            f"tokens {fields['tokens_before']}->{fields['tokens_after']} "
            f"messages {fields['messages_before']}->{fields['messages_after']}"
        )
    removed = [f"{f['type']}:-{f['tokens_removed']}" for f in fields.get("filters") or []]
    if removed:
        parts.append("filters " + ",".join(removed))
    if fields.get("failed_filter"):
        parts.append(f"failed={fields['failed_filter']}")
    if fields.get("notes"):
        parts.append("notes " + ",".join(fields["notes"]))
    if fields.get("error"):
        parts.append(f"error {fields['error']}")
    if fields.get("overhead_ms") is not None:
        parts.append(f"overhead {fields['overhead_ms']}ms")
    parts.append(f"total {fields.get('total_ms')}ms id={fields.get('request_id')}")
    return " ".join(parts)


def level_number(name: str) -> int:
    """A ``--log-level`` name as a logging level (``trace`` is uvicorn's level 5)."""
    return TRACE if name.lower() == "trace" else logging.getLevelNamesMapping()[name.upper()]


def logging_config(log_format: str, level: str) -> dict[str, Any]:
    """The dictConfig for ``serve``: one stderr handler, used once by the proxy's and uvicorn's loggers."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {log_format!r}")
    number = level_number(level)
    formatter = JsonFormatter if log_format == "json" else TextFormatter
    # propagate=False on each named tree: a line reaches the handler once, never again through root
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"proxy": {"()": f"{__name__}.{formatter.__name__}"}},
        "handlers": {
            "stderr": {"class": "logging.StreamHandler", "formatter": "proxy", "stream": "ext://sys.stderr"}
        },
        "loggers": {
            "history_proxy": {"handlers": ["stderr"], "level": number, "propagate": False},
            "uvicorn": {"handlers": ["stderr"], "level": number, "propagate": False},
            "uvicorn.error": {"level": number},
            "uvicorn.access": {"level": number},
        },
        "root": {"handlers": ["stderr"], "level": max(number, logging.WARNING)},
    }
