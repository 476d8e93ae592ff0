"""What the real APIs refuse that clients rely on being refused, in each provider's own words, for the mock.

A mock more lenient than the API it imitates hides client bugs (a history cut between a call and its
output passes offline, then fails against the real API); one stricter than it breaks clients that work.

OpenAI (chat completions and Responses; 400 ``invalid_request_error``, the same ``message``, ``param``
and ``code``):

- a body without ``model``: ``Missing required parameter: 'model'.``;
- chat: a ``tool`` message that answers no call of the assistant message before it (only tool
  messages between): ``Invalid parameter: messages with role 'tool' must be a response to a
  preceeding message with 'tool_calls'.`` (OpenAI's spelling);
- Responses, stateless (no ``previous_response_id`` or ``conversation``): a ``function_call_output``
  (or ``custom_tool_call_output``) whose ``call_id`` no earlier call item has: ``No tool call found
  for function call output with call_id CALL.``

Everything else OpenAI accepts is accepted: ``additional_tools`` input items are tool declarations
(:func:`declared_tools`), like top-level ``tools``.

Anthropic Messages (:func:`messages_refusal`): a missing ``model`` or ``max_tokens``, a role the API
does not know, a ``tool_result`` that answers no ``tool_use`` of the message before it, a ``tool_use``
left unanswered by the next message, an empty text block, an empty message. What the API accepts the
mock accepts too: mid-conversation ``system`` messages (beta ``mid-conversation-system-2026-04-07``),
unknown block types and fields. The wording is Anthropic's, as its API answers (and as clients such
as Claude Code match it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

CALL_ITEMS = {"function_call_output": "function_call", "custom_tool_call_output": "custom_tool_call"}


@dataclass(frozen=True)
class Refusal:
    """One 400 as OpenAI words it."""

    message: str
    param: str | None
    code: str | None = None


MISSING_MODEL = Refusal("Missing required parameter: 'model'.", "model", "missing_required_parameter")


def chat_refusal(body: dict[str, Any]) -> Refusal | None:
    """What OpenAI's chat completions would refuse in ``body`` (its ``messages`` already a list of objects)."""
    if "model" not in body:
        return MISSING_MODEL
    answerable: set[Any] = set()
    for i, message in enumerate(body["messages"]):
        role = message.get("role")
        if role == "tool":
            if message.get("tool_call_id") not in answerable:
                return Refusal(
                    "Invalid parameter: messages with role 'tool' must be a response to a preceeding "
                    "message with 'tool_calls'.",
                    f"messages.[{i}].role",
                )
            continue
        calls = message.get("tool_calls") if role == "assistant" else None
        answerable = {c.get("id") for c in calls if isinstance(c, dict)} if isinstance(calls, list) else set()
    return None


def responses_refusal(body: dict[str, Any]) -> Refusal | None:
    """What OpenAI's Responses API would refuse in ``body``."""
    if "model" not in body:
        return MISSING_MODEL
    items = body.get("input")
    if not isinstance(items, list) or body.get("previous_response_id") or body.get("conversation"):
        return None
    calls: set[Any] = set()
    for item in items:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind in CALL_ITEMS.values():
            calls.add(item.get("call_id"))
        elif kind in CALL_ITEMS and item.get("call_id") not in calls:
            return Refusal(
                f"No tool call found for function call output with call_id {item.get('call_id')}.", "input"
            )
    return None


def declared_tools(body: dict[str, Any]) -> list[Any]:
    """The tools a Responses request declares: top-level ``tools``, then those of ``additional_tools``
    input items (Codex's form), namespaces opened."""
    found: list[Any] = []

    def walk(tools: Any) -> None:
        for tool in tools if isinstance(tools, list) else []:
            if isinstance(tool, dict) and tool.get("type") == "namespace":
                walk(tool.get("tools"))
            else:
                found.append(tool)

    walk(body.get("tools"))
    items = body.get("input")
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and item.get("type") == "additional_tools":
            walk(item.get("tools"))
    return found


# --- Anthropic Messages ---------------------------------------------------------------------

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
