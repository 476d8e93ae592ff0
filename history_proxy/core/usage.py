"""The prompt-cache figures an upstream reports in its answer's ``usage`` (issue 18).

OpenAI: ``usage.prompt_tokens`` (all input) and ``usage.prompt_tokens_details.cached_tokens``; in a
stream, the last chunk carries ``usage`` when the request asked for it (``stream_options:
{include_usage: true}``). Anthropic: ``usage.input_tokens`` (the uncached input only),
``cache_read_input_tokens`` and ``cache_creation_input_tokens``; in a stream, ``message_start``
carries them under ``message.usage`` and ``message_delta`` may repeat them under ``usage``. Gemini:
``usageMetadata.promptTokenCount`` (all input) and ``cachedContentTokenCount`` (the implicit or
explicit cache's share), on the answer and on a stream's last chunk.

The stream tap reads the relayed pieces after they have been passed on: it never holds a byte back.
It keeps only the unfinished line between pieces and parses only lines that mention ``usage``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from history_proxy.core.answer import AnswerFacts

_NULL_USAGE = re.compile(rb'"usage"\s*:\s*null')
"""OpenAI's chunks before the last say ``"usage": null`` when usage was asked for: nothing to parse."""
_FINISHED = (b'"finish_reason":"', b'"finish_reason": "')
"""A chat completions chunk that ends a choice (the one before the usage chunk), compact JSON (OpenAI)
or spaced (many compatible servers): read for its reason."""
MAX_LINE_BYTES = 1 << 16
"""A line longer than this is not followed to its end (a usage event is well under 1 KiB)."""


@dataclass(frozen=True)
class CacheUsage:
    """Input tokens of one answer, of which read from and written to the provider's prompt cache."""

    input_tokens: int
    cached_tokens: int
    cache_write_tokens: int = 0

    @property
    def cached_share(self) -> float:
        return self.cached_tokens / self.input_tokens if self.input_tokens else 0.0


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def usage_of(usage: Any) -> CacheUsage | None:
    """A ``usage`` object in either provider's shape, or ``None`` when it holds no input figure."""
    if not isinstance(usage, dict):
        return None
    if "prompt_tokens" in usage:  # OpenAI chat completions
        details = usage.get("prompt_tokens_details")
        cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else 0
        return CacheUsage(_count(usage["prompt_tokens"]), cached)
    if "promptTokenCount" in usage:  # Gemini's usageMetadata: cached tokens are part of the prompt's
        return CacheUsage(_count(usage["promptTokenCount"]), _count(usage.get("cachedContentTokenCount")))
    if "input_tokens" in usage:  # Anthropic Messages (and OpenAI Responses: input_tokens_details)
        read = _count(usage.get("cache_read_input_tokens"))
        written = _count(usage.get("cache_creation_input_tokens"))
        details = usage.get("input_tokens_details")
        if isinstance(details, dict):  # Responses: input_tokens counts the cached ones already
            return CacheUsage(_count(usage["input_tokens"]), _count(details.get("cached_tokens")))
        return CacheUsage(_count(usage["input_tokens"]) + read + written, read, written)
    return None


def usage_of_answer(answer: Any) -> CacheUsage | None:
    """The usage of a JSON answer or of one stream event.

    Anthropic's ``message_start`` nests it in ``message``; the Responses API's ``response.completed``
    event in ``response``.
    """
    if not isinstance(answer, dict):
        return None
    found = usage_of(answer.get("usage"))
    if found is None and "usageMetadata" in answer:  # Gemini, answer or stream chunk
        found = usage_of(answer["usageMetadata"])
    for wrapper in ("message", "response"):
        inner = answer.get(wrapper)
        if found is None and isinstance(inner, dict):
            found = usage_of(inner.get("usage"))
    return found


def usage_of_json(body: bytes) -> CacheUsage | None:
    """The usage of a whole JSON answer body (``None`` when it is not JSON or reports none)."""
    if b'"usage"' not in body and b'"usageMetadata"' not in body:
        return None
    try:
        return usage_of_answer(json.loads(body))
    except ValueError:
        return None


JSON_TAIL_BYTES = 8192
"""Of a JSON answer relayed piece by piece, the end kept to find its ``usage`` (the last field)."""


class UsageTap:
    """Follows a relayed body piece by piece and keeps the latest usage it reported: the last usage
    event of an SSE stream, or the ``usage`` object near the end of a JSON answer."""

    def __init__(self, *, sse: bool = True) -> None:
        self.usage: CacheUsage | None = None
        self.facts = AnswerFacts()
        """The answer's id, model, finish reasons and output tokens, from the events read."""
        self._sse = sse
        self._partial = b""

    def feed(self, piece: bytes) -> None:
        """Read one relayed piece (call it after the piece went on its way)."""
        if not self._sse:
            joined = piece if len(piece) >= JSON_TAIL_BYTES else self._partial + piece
            self._partial = joined[-JSON_TAIL_BYTES:]
            return
        data = self._partial + piece if self._partial else piece
        if b"usage" not in data and _FINISHED[0] not in data and _FINISHED[1] not in data:
            cut = data.rfind(b"\n")
            self._partial = data[cut + 1 :] if len(data) - cut <= MAX_LINE_BYTES else b""
            return
        *lines, rest = data.split(b"\n")
        self._partial = rest if len(rest) <= MAX_LINE_BYTES else b""
        for line in lines:
            if line.startswith(b"data:") and (
                (b'"usage"' in line and not _NULL_USAGE.search(line))
                or b'"usageMetadata"' in line
                or _FINISHED[0] in line
                or _FINISHED[1] in line
            ):
                self._read(line[5:].strip())

    def close(self) -> CacheUsage | None:
        """The usage found, once the body ended (a JSON answer is read from its kept end here)."""
        if not self._sse:
            at = max(self._partial.rfind(b'"usage"'), self._partial.rfind(b'"usageMetadata"'))
            start = self._partial.find(b"{", at) if at >= 0 else -1
            if start >= 0:
                try:
                    found, _ = json.JSONDecoder().raw_decode(self._partial[start:].decode("utf-8", "replace"))
                except ValueError:
                    found = None
                self.usage = usage_of(found)
                self.facts.read({"usage": found})
        return self.usage

    def _read(self, payload: bytes) -> None:
        try:
            answer = json.loads(payload)
        except ValueError:
            return
        self.facts.read(answer)
        found = usage_of_answer(answer)
        if found is None:
            return
        previous = self.usage
        if previous is not None and found.input_tokens == 0 and previous.input_tokens:
            return  # Anthropic's message_delta may report output only: keep message_start's input
        self.usage = found
