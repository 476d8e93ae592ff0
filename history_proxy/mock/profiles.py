"""How the mock's Messages route takes the providers' standards, and how many input tokens it reports.

``--messages-profile`` (:data:`PROFILES`):

- ``lenient`` (the default): unknown top-level fields are accepted and ignored;
- ``strict``: a top-level field outside the Messages API's generally available ones
  (:data:`MESSAGES_FIELDS`) is refused as the strict Anthropic-compatible servers refuse it, 400
  ``invalid_request_error`` "``<field>``: Extra inputs are not permitted" (``context_management``
  among them: what copilot-api, local servers and other vendors' endpoints answer Claude Code);
- ``honour``: ``context_management`` is applied as Anthropic's API applies it (the same edit modules
  the proxy emulates with), its ``applied_edits`` returned in the answer, ``original_input_tokens``
  on ``count_tokens``; a due ``compact_20260112`` summarises with the mock's own description of the
  history (the ``compaction`` block first in the answer, alone with ``stop_reason: "compaction"`` when
  ``pause_after_compaction``), and ``compaction`` blocks sent back stand for what they summarise.

``--input-token-factor F`` makes every input figure the mock reports (``usage`` on all surfaces) F
times the proxy's own count of what the mock received (tiktoken, the model's encoding), standing in
for a provider whose tokenizer counts F times what the proxy counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Literal

from history_proxy.core.messages import Message
from history_proxy.core.tokens import TokenCounters
from history_proxy.mock.cache import CacheReport
from history_proxy.mock.common import describe_received
from history_proxy.surfaces import edit_compact
from history_proxy.surfaces.context_management import FIELD, manage, thinking_enabled
from history_proxy.surfaces.edit_common import EditInput
from history_proxy.surfaces.shape import as_chat

MessagesProfile = Literal["lenient", "strict", "honour"]
PROFILES: tuple[MessagesProfile, ...] = ("lenient", "strict", "honour")

MESSAGES_FIELDS = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "system",
        "metadata",
        "stop_sequences",
        "stream",
        "temperature",
        "top_k",
        "top_p",
        "tools",
        "tool_choice",
        "thinking",
        "service_tier",
        "output_config",
    }
)
"""The Messages API's generally available top-level fields (what a strict compatible server knows)."""


def extra_field(body: dict[str, Any]) -> str | None:
    """A strict server's refusal of ``body``'s first unknown top-level field, or ``None``."""
    for key in body:
        if key not in MESSAGES_FIELDS:
            return f"{key}: Extra inputs are not permitted"
    return None


_COUNTERS = TokenCounters()
"""The proxy's own counters (tiktoken, by model), for a factor taken of the proxy's count."""


def scaled(report: CacheReport, factor: float, model: str, view: list[Message]) -> CacheReport:
    """``report`` as a provider counting ``factor`` times the proxy's tokens reports it: the prompt is
    the proxy's own count of ``view`` times ``factor``, the cache figures in the same proportion.
    With a factor of 1 the mock's own approximation (characters / 4) stands."""
    if factor == 1.0:
        return report
    prompt = math.ceil(_COUNTERS.get(model=model).messages(view) * factor)
    share = prompt / report.prompt_tokens if report.prompt_tokens else 0.0
    return replace(
        report,
        prompt_tokens=prompt,
        cached_tokens=math.floor(report.cached_tokens * share),
        written_tokens=math.floor(report.written_tokens * share),
    )


@dataclass
class Honoured:
    """What the answer to a request whose ``context_management`` the mock applied carries."""

    context_management: dict[str, Any]
    block: dict[str, Any] | None = None
    """The ``compaction`` block the answer opens with (a ``compact_20260112`` was due)."""
    pause: bool = False


def honoured(
    body: dict[str, Any], input_tokens: int, factor: float
) -> tuple[dict[str, Any], Honoured | None]:
    """``body`` with its ``context_management`` applied, and what the answer carries (``None`` when the
    request carries none). A due compaction's summary is the mock's own description of the history."""
    if FIELD not in body:
        return body, None

    def env(request: dict[str, Any]) -> EditInput:
        return EditInput(
            input_tokens=input_tokens,
            tokens=lambda text: math.ceil(len(text) / 4 * factor),
            thinking=thinking_enabled(request),
        )

    managed = manage(body, "emulate", env)
    applied = managed.applied or []
    if managed.compact is None:
        return managed.body, Honoured({"applied_edits": applied})
    summary = "mock summary: " + describe_received(as_chat("messages", managed.body)["messages"])
    compacted = {**managed.body, "messages": edit_compact.compacted(summary)}
    entry = {"type": edit_compact.TYPE, "cleared_input_tokens": managed.input_tokens}
    pause = managed.compact.get("pause_after_compaction") is True
    return compacted, Honoured({"applied_edits": [*applied, entry]}, edit_compact.block(summary), pause)
