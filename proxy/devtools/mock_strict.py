"""The Messages requests the mock upstream refuses, as Anthropic refuses them (status 400, its wording).

Offline tests should catch what the API would refuse: a missing ``model`` or ``max_tokens``, a
role the API does not know, a ``tool_result`` that answers no ``tool_use`` of the message before it, a ``tool_use`` left
unanswered by the next message, an empty text block, an empty message. What the API accepts the mock
accepts too: mid-conversation ``system`` messages (beta ``mid-conversation-system-2026-04-07``),
unknown block types and fields. The wording is Anthropic's, as its API answers (and as clients such
as Claude Code match it).
"""

from __future__ import annotations

from typing import Any

VIEWED_ROLES = ("user", "assistant")
"""The roles of ``messages`` besides ``system`` (mid-conversation, the beta) that the API takes."""


def messages_refusal(body: dict[str, Any]) -> str | None:
    """Anthropic's error message for the first mistake in ``body`` it would refuse, or None."""
    for field in ("model", "max_tokens"):
        if field not in body:
            return f"{field}: Field required"
    if isinstance(body["max_tokens"], bool) or not isinstance(body["max_tokens"], int):
        return "max_tokens: Input should be a valid integer"
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None  # the adapter's own checks answer these
    previous: dict[str, Any] | None = None
    last = len(messages) - 1
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") == "system":
            continue  # a mid-conversation system message: the API takes it where it stands
        if message.get("role") not in VIEWED_ROLES:
            return f"messages.{i}.role: Input should be 'user' or 'assistant'"
        content = message.get("content")
        blocks = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
        refusal = _empty(i, message, content, blocks, last) or _orphans(i, previous, blocks)
        if refusal is None and previous is not None:
            refusal = _unanswered(i - 1, previous, blocks)
        if refusal is not None:
            return refusal
        previous = message
    return None


def _empty(
    i: int, message: dict[str, Any], content: Any, blocks: list[dict[str, Any]], last: int
) -> str | None:
    if content in ("", []) and not (i == last and message.get("role") == "assistant"):
        return f"messages.{i}: all messages must have non-empty content except for the optional final assistant message"
    if any(b.get("type") == "text" and b.get("text") == "" for b in blocks):
        return "messages: text content blocks must be non-empty"
    return None


def _calls(message: dict[str, Any] | None) -> list[str]:
    content = message.get("content") if message is not None else None
    if message is None or message.get("role") != "assistant" or not isinstance(content, list):
        return []
    return [str(b.get("id")) for b in content if isinstance(b, dict) and b.get("type") == "tool_use"]


def _orphans(i: int, previous: dict[str, Any] | None, blocks: list[dict[str, Any]]) -> str | None:
    calls = set(_calls(previous))
    for b, block in enumerate(blocks):
        if block.get("type") == "tool_result" and str(block.get("tool_use_id")) not in calls:
            return (
                f"messages.{i}.content.{b}: unexpected `tool_use_id` found in `tool_result` blocks: "
                f"{block.get('tool_use_id')}. Each `tool_result` block must have a corresponding "
                "`tool_use` block in the previous message."
            )
    return None


def _unanswered(at: int, previous: dict[str, Any], blocks: list[dict[str, Any]]) -> str | None:
    answered = {str(b.get("tool_use_id")) for b in blocks if b.get("type") == "tool_result"}
    missing = [call for call in _calls(previous) if call not in answered]
    if not missing:
        return None
    return (
        f"messages.{at}: `tool_use` ids were found without `tool_result` blocks immediately after: "
        f"{', '.join(missing)}. Each `tool_use` block must have a corresponding `tool_result` block "
        "in the next message."
    )
