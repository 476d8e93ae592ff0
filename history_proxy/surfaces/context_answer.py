"""The answer to an emulated ``context_management`` request: ``applied_edits`` added as Anthropic adds them.

A whole ``message`` gets ``context_management: {"applied_edits": [...]}`` at its top level; a stream
gets it in its final ``message_delta`` event; a ``count_tokens`` answer gets
``context_management: {"original_input_tokens": N}`` (the upstream's count of the request before the
edits). Only the answers of emulated requests go through these rewrites; every other answer is relayed
raw. SSE is rewritten event by event: bytes are passed on up to the last complete event of each
piece, and only the ``message_delta`` event is parsed and written again.
"""

from __future__ import annotations

import json
from typing import Any

_DELTA = b'"message_delta"'


def _dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


class AppliedEdits:
    """Adds ``context_management`` to an answer (an :class:`history_proxy.upstream.reply.AnswerRewrite`)."""

    def __init__(self, context_management: dict[str, Any]) -> None:
        self.context_management = context_management
        self._pending = b""

    def whole(self, body: bytes) -> bytes:
        """A JSON answer with the field added (anything that is not a JSON object: as it came)."""
        try:
            answer = json.loads(body)
        except ValueError:
            return body
        if not isinstance(answer, dict) or answer.get("type") == "error":
            return body
        return _dumps({**answer, "context_management": self.context_management})

    def piece(self, piece: bytes) -> bytes:
        """The complete SSE events received so far (the rest is held until its end arrives)."""
        data = self._pending + piece
        end = data.rfind(b"\n\n")
        if end < 0:
            self._pending = data
            return b""
        ready, self._pending = data[: end + 2], data[end + 2 :]
        return self._events(ready) if _DELTA in ready else ready

    def end(self) -> bytes:
        """What is still held when the stream ends."""
        rest, self._pending = self._pending, b""
        return self._events(rest) if _DELTA in rest else rest

    def _events(self, data: bytes) -> bytes:
        lines = data.split(b"\n")
        for n, line in enumerate(lines):
            if not line.startswith(b"data:") or _DELTA not in line:
                continue
            try:
                event = json.loads(line[5:])
            except ValueError:
                continue
            if isinstance(event, dict) and event.get("type") == "message_delta":
                lines[n] = b"data: " + _dumps({**event, "context_management": self.context_management})
        return b"\n".join(lines)


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
