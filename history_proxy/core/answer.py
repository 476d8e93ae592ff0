"""What an upstream's answer says about itself, for the request's span (issue 28): its id, the model
that answered, why it stopped and how many tokens it wrote. Never its text.

Read from a whole JSON answer or from the stream events that carry these fields, in each API's shape:

    chat completions   ``id``, ``model``, ``choices[].finish_reason``, ``usage.completion_tokens``
    Responses          ``id``, ``model``, ``status`` (the finish reason), ``usage.output_tokens``;
                       in a stream, inside ``response.completed``'s ``response``
    Messages           ``id``, ``model``, ``stop_reason``, ``usage.output_tokens``; in a stream,
                       ``message_start``'s ``message`` then ``message_delta``'s ``delta`` and ``usage``
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


@dataclass
class AnswerFacts:
    """The id, model, finish reasons and output tokens of one answer, as far as it reported them."""

    response_id: str | None = None
    response_model: str | None = None
    finish_reasons: list[str] = field(default_factory=list)
    output_tokens: int | None = None

    def read(self, answer: Any) -> None:
        """Take what one JSON answer or stream event says (later events refine earlier ones)."""
        if not isinstance(answer, dict):
            return
        for wrapper in ("message", "response"):  # Messages' message_start, Responses' final events
            inner = answer.get(wrapper)
            if isinstance(inner, dict):
                self._read_object(inner)
        self._read_object(answer)
        delta = answer.get("delta")
        if isinstance(delta, dict) and (reason := _text(delta.get("stop_reason"))):
            self.finish_reasons = [reason]  # Messages' message_delta

    def _read_object(self, answer: dict[str, Any]) -> None:
        kind = answer.get("type")
        if kind is None or kind in ("message", "response"):  # not an event wrapper
            self.response_id = _text(answer.get("id")) or self.response_id
            self.response_model = _text(answer.get("model")) or self.response_model
        reasons = [
            reason
            for choice in answer.get("choices") or ()
            if isinstance(choice, dict) and (reason := _text(choice.get("finish_reason")))
        ]
        reason = _text(answer.get("stop_reason")) or (
            _text(answer.get("status")) if answer.get("object") == "response" else None
        )
        if reason:
            reasons.append(reason)
        if reasons:
            self.finish_reasons = reasons
        usage = answer.get("usage")
        if isinstance(usage, dict):
            written = _count(usage.get("completion_tokens"))
            written = written if written is not None else _count(usage.get("output_tokens"))
            if written is not None:
                self.output_tokens = written
