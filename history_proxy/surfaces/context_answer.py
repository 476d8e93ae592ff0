"""The answer to an emulated ``context_management`` request: ``applied_edits`` added as Anthropic adds them.

A whole ``message`` gets ``context_management: {"applied_edits": [...]}`` at its top level; a stream
gets it in its final ``message_delta`` event; a ``count_tokens`` answer gets
``context_management: {"original_input_tokens": N}`` (the upstream's count of the request before the
edits). Only the answers of emulated requests go through these rewrites; every other answer is relayed
raw. SSE is rewritten event by event: bytes are passed on up to the last complete event of each
piece, and only the ``message_delta`` event is parsed and written again.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from history_proxy.surfaces.sse_rewrite import EventRewrite

_DELTA = b'"message_delta"'


def _dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


class AppliedEdits(EventRewrite):
    """Adds ``context_management`` to an answer (an :class:`history_proxy.upstream.reply.AnswerRewrite`)."""

    def __init__(self, context_management: dict[str, Any]) -> None:
        super().__init__()
        self.context_management = context_management

    def whole(self, body: bytes) -> bytes:
        """A JSON answer with the field added (anything that is not a JSON object: as it came)."""
        try:
            answer = json.loads(body)
        except ValueError:
            return body
        if not isinstance(answer, dict) or answer.get("type") == "error":
            return body
        return _dumps({**answer, "context_management": self.context_management})

    def concerns(self, data: bytes) -> bool:
        """Only events holding a ``message_delta`` are read (subclasses that shift blocks read all)."""
        return not self.only_delta or _DELTA in data

    def events(self, data: bytes) -> bytes:
        """Each event's ``data:`` line that :meth:`_event` rewrites, written again."""
        lines = data.split(b"\n")
        for n, line in enumerate(lines):
            if not line.startswith(b"data:") or (self.only_delta and _DELTA not in line):
                continue
            try:
                event = json.loads(line[5:])
            except ValueError:
                continue
            if isinstance(event, dict):
                lines[n] = self._event(event, line)
        return b"\n".join(lines)

    only_delta = True
    """Only the ``message_delta`` event is parsed (subclasses that shift blocks read every event)."""

    def _event(self, event: dict[str, Any], line: bytes) -> bytes:
        if event.get("type") != "message_delta":
            return line
        return b"data: " + _dumps({**event, "context_management": self.context_management})


class Compacted(AppliedEdits):
    """An answer that opens with the ``compaction`` block: first in ``content``; in a stream, its
    ``content_block_start`` / ``content_block_stop`` at index 0 right after ``message_start``, every
    later block's index one up."""

    only_delta = False

    def __init__(self, context_management: dict[str, Any], block: dict[str, Any]) -> None:
        super().__init__(context_management)
        self.block = block

    def whole(self, body: bytes) -> bytes:
        try:
            answer = json.loads(body)
        except ValueError:
            return body
        if not isinstance(answer, dict) or not isinstance(answer.get("content"), list):
            return body
        content = [self.block, *answer["content"]]
        return _dumps({**answer, "content": content, "context_management": self.context_management})

    def _event(self, event: dict[str, Any], line: bytes) -> bytes:
        kind = event.get("type")
        if kind == "message_start":
            return line + b"\n\n" + b"".join(_block_events(self.block, 0)).rstrip(b"\n")
        if isinstance(event.get("index"), int) and str(kind).startswith("content_block"):
            return b"data: " + _dumps({**event, "index": event["index"] + 1})
        return super()._event(event, line)


def _block_events(block: dict[str, Any], index: int) -> list[bytes]:
    """A whole block as SSE events (start with its content, stop), each ending with a blank line."""
    start = {"type": "content_block_start", "index": index, "content_block": block}
    stop = {"type": "content_block_stop", "index": index}
    return [
        b"event: content_block_start\ndata: " + _dumps(start) + b"\n\n",
        b"event: content_block_stop\ndata: " + _dumps(stop) + b"\n\n",
    ]


def paused(
    request: dict[str, Any], block: dict[str, Any], context_management: dict[str, Any]
) -> tuple[bytes, str]:
    """The answer to a request compacted with ``pause_after_compaction``: the ``compaction`` block alone,
    ``stop_reason: "compaction"`` (JSON, or the event stream when the request streams)."""
    model = request.get("model")
    message = {
        "id": "msg_compaction_" + hashlib.sha256(_dumps(block)).hexdigest()[:24],
        "type": "message",
        "role": "assistant",
        "model": model if isinstance(model, str) else "",
        "content": [block],
        "stop_reason": "compaction",
        "stop_sequence": None,
        "usage": {"input_tokens": 0, "output_tokens": 0},
        "context_management": context_management,
    }
    if request.get("stream") is not True:
        return _dumps(message), "application/json"
    start = {**message, "content": [], "stop_reason": None}
    del start["context_management"]
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": "compaction", "stop_sequence": None},
        "usage": {"output_tokens": 0},
        "context_management": context_management,
    }
    events = [
        b"event: message_start\ndata: " + _dumps({"type": "message_start", "message": start}) + b"\n\n",
        *_block_events(block, 0),
        b"event: message_delta\ndata: " + _dumps(delta) + b"\n\n",
        b'event: message_stop\ndata: {"type":"message_stop"}\n\n',
    ]
    return b"".join(events), "text/event-stream"


class OriginalTokens(AppliedEdits):
    """A ``count_tokens`` answer with ``context_management.original_input_tokens``: ``original`` (the
    upstream's count of the request before the edits), or the answer's own count when the edits
    changed nothing."""

    def __init__(self, original: int | None) -> None:
        super().__init__({})
        self.original = original

    def whole(self, body: bytes) -> bytes:
        try:
            answer = json.loads(body)
        except ValueError:
            return body
        if not isinstance(answer, dict) or not isinstance(answer.get("input_tokens"), int):
            return body
        original = answer["input_tokens"] if self.original is None else self.original
        return _dumps({**answer, "context_management": {"original_input_tokens": original}})
