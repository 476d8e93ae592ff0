"""The event-by-event frame every SSE answer rewrite shares: complete events passed on, the rest held.

A rewrite of a streamed answer (an :class:`history_proxy.upstream.reply.AnswerRewrite`) may only change
whole events: :meth:`EventRewrite.piece` hands :meth:`EventRewrite.events` the bytes up to the last
blank line received and holds the rest until its end arrives; :meth:`EventRewrite.end` hands over what
is left when the stream ends. :meth:`EventRewrite.concerns` lets a rewrite pass bytes on untouched
without reading them.
"""

from __future__ import annotations


class EventRewrite:
    """Base of the SSE answer rewrites (Messages' ``applied_edits``, Responses' inline compaction)."""

    def __init__(self) -> None:
        self._pending = b""

    def piece(self, piece: bytes) -> bytes:
        """The complete SSE events received so far, rewritten (the rest is held until its end arrives)."""
        data = self._pending + piece
        end = data.rfind(b"\n\n")
        if end < 0:
            self._pending = data
            return b""
        ready, self._pending = data[: end + 2], data[end + 2 :]
        return self.events(ready) if self.concerns(ready) else ready

    def end(self) -> bytes:
        """What is still held when the stream ends, rewritten."""
        rest, self._pending = self._pending, b""
        return self.events(rest) if rest.strip() and self.concerns(rest) else rest

    def concerns(self, data: bytes) -> bool:
        """Whether ``data`` (complete events) may need rewriting; False passes it on unread."""
        return True

    def events(self, data: bytes) -> bytes:
        """``data`` (complete events) rewritten."""
        raise NotImplementedError
