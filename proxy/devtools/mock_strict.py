"""What OpenAI refuses that clients rely on being refused, in OpenAI's own words, for the built-in mock.

A mock more lenient than the API it imitates hides client bugs (a history cut between a call and its
output passes offline, then fails against the real API); one stricter than it breaks clients that work.
So the mock's chat completions and Responses routes refuse exactly these, as OpenAI answers them
(400 ``invalid_request_error``, the same ``message``, ``param`` and ``code``):

- a body without ``model``: ``Missing required parameter: 'model'.``;
- chat: a ``tool`` message that answers no call of the assistant message before it (only tool
  messages between): ``Invalid parameter: messages with role 'tool' must be a response to a
  preceeding message with 'tool_calls'.`` (OpenAI's spelling);
- Responses, stateless (no ``previous_response_id`` or ``conversation``): a ``function_call_output``
  (or ``custom_tool_call_output``) whose ``call_id`` no earlier call item has: ``No tool call found
  for function call output with call_id CALL.``

Everything else OpenAI accepts is accepted: ``additional_tools`` input items are tool declarations
(:func:`declared_tools`), like top-level ``tools``.
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
