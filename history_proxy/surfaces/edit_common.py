"""What the emulated Messages context edits share: their view of the request and their parameters.

Each edit (``clear_tool_uses_20250919``, ``clear_thinking_20251015``, ``compact_20260112``) is a pure
function over the native Messages ``messages`` list, in its own module, that returns a new list
(messages it changed are new dicts, the others the same objects) and the ``applied_edits`` entry
Anthropic's API would report, or ``None`` when it did not apply. Parameters the client got wrong fall
back to Anthropic's defaults: an upstream that does not know the field cannot refuse them, and the
proxy is never stricter than the upstream.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

THINKING_BLOCKS = ("thinking", "redacted_thinking")


@dataclass(frozen=True)
class EditInput:
    """The request an edit looks at, beyond its messages."""

    input_tokens: int
    """The request's input tokens as the upstream would count them (the proxy's count, calibrated)."""
    tokens: Callable[[str], int]
    """Tokens of a text, on the same (calibrated) scale."""
    thinking: bool = False
    """Extended thinking is enabled on the request (``thinking.type`` ``enabled`` or ``adaptive``)."""


def value_of(setting: Any, kind: str, default: int) -> int:
    """``{"type": kind, "value": N}``'s N (a non-negative int), else ``default``."""
    if isinstance(setting, dict) and setting.get("type") == kind:
        value = setting.get("value")
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return default


def blocks(message: Any) -> list[Any]:
    """A native message's content blocks (a string content has none)."""
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, list) else []


def text_tokens(content: Any, tokens: Callable[[str], int]) -> int:
    """Tokens of a block's content: its text, a list of blocks' texts, or any other value as JSON."""
    if isinstance(content, str):
        return tokens(content)
    if isinstance(content, list):
        return sum(text_tokens(b.get("text", b) if isinstance(b, dict) else b, tokens) for b in content)
    if content is None:
        return 0
    return tokens(json.dumps(content, sort_keys=True, separators=(",", ":")))


def current_turn_start(messages: list[Any]) -> int:
    """Where the conversation's current turn starts: just after the newest user message that is not
    only tool results (what follows is the tool loop the upstream checks signed thinking blocks of)."""
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str) or any(
            isinstance(b, dict) and b.get("type") != "tool_result" for b in blocks(message)
        ):
            return i + 1
    return 0
