"""The Responses API's input items as the adapter reads them: their kinds, what is opaque, the checks.

The only 400s the Responses adapter gives are here, in OpenAI's own wording for the same mistake
(``Invalid type for 'input[3]': expected an object, but got a string instead.``), naming ``input``
items, never ``messages``. Everything else an item holds is the upstream's to judge.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from history_proxy.core.messages import KNOWN_ROLES, Message
from history_proxy.errors import InvalidRequestError
from history_proxy.surfaces._view import View, compact_json, ref_of

TOOL_CALLS = frozenset({"function_call", "custom_tool_call"})
"""Call items that are always client-side tool calls."""
OPAQUE_ALONE = frozenset({"compaction", "item_reference"})
TOOL_DECLARATIONS = frozenset({"additional_tools"})
"""Input items that declare tools (Codex sends its tools so, with no top-level ``tools``)."""
DECLARATION = "declaration"
"""The unit kind of a tool declaration item: sent whole, and never left out (:func:`with_declarations`)."""
STEP_KINDS = frozenset({"message", "reasoning", *TOOL_CALLS})
PROVIDER_STATE = ("previous_response_id", "conversation")


def item_type(item: dict[str, Any]) -> str:
    """An input item's type (an untyped item with a ``role`` is a message)."""
    kind = item.get("type")
    if isinstance(kind, str):
        return kind
    return "message" if "role" in item else ""


def output_call_id(item: dict[str, Any]) -> str | None:
    """The call an ``*_output`` item answers (``local_shell_call_output`` names it ``id``)."""
    value = item.get("call_id", item.get("id"))
    return value if isinstance(value, str) else None


def provider_state(body: dict[str, Any]) -> str | None:
    """``previous_response_id`` or ``conversation`` when the history lives at the provider."""
    for key in PROVIDER_STATE:
        if body.get(key) not in (None, ""):
            return key
    return None


def input_items(body: dict[str, Any], start: int = 0) -> tuple[list[dict[str, Any]], list[str]]:
    """The ``input`` list, checked (a 400 naming the first item that is not an object), and its item
    types (from item ``start`` on: the items before it were checked before)."""
    items = body.get("input")
    if isinstance(items, str) or items is None:  # a string is one message; none: nothing to shape
        return [], []
    if not isinstance(items, list):
        raise InvalidRequestError(
            f"Invalid type for 'input': expected a string or an array of input items, but got "
            f"{_json_type(items)} instead.",
            param="input",
            code="invalid_type",
        )
    kinds: list[str] = []
    for i, item in enumerate(items[start:], start):
        if item.__class__ is not dict:
            raise InvalidRequestError(
                f"Invalid type for 'input[{i}]': expected an object, but got {_json_type(item)} instead.",
                param=f"input[{i}]",
                code="invalid_type",
            )
        kind = item.get("type")
        if kind.__class__ is not str:
            kind = "message" if "role" in item else ""
        if kind == "message" and item.get("role").__class__ is not str:
            raise InvalidRequestError(
                f"Invalid type for 'input[{i}].role': expected a string, but got "
                f"{_json_type(item.get('role'))} instead.",
                param=f"input[{i}].role",
                code="invalid_type",
            )
        kinds.append(kind)
    return items, kinds


def _json_type(value: Any) -> str:
    """How OpenAI's errors name a JSON value's type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    names = {str: "a string", int: "an integer", float: "a decimal", list: "an array", dict: "an object"}
    return names.get(type(value), "a value")


def opaque_alone(kind: str, role: Any, leading: bool) -> bool:
    """Whether an item is a view message of its own, sent whole: tool declarations, compaction, item
    references, untyped items, messages of an unknown role; among the leading instructions also any
    item type the adapter does not know."""
    if kind == "message":
        return role not in KNOWN_ROLES
    if kind in OPAQUE_ALONE or kind in TOOL_DECLARATIONS or not kind:
        return True
    return leading and kind not in STEP_KINDS and not kind.endswith(("_call", "_output"))


def output_follows(kinds: list[str], at: int) -> bool:
    """Whether more outputs of the same calls follow item ``at`` (a server-side or unknown item between
    parallel outputs: it rides with the output before it, so the call group stays one)."""
    for k in range(at + 1, len(kinds)):
        kind = kinds[k]
        if kind.endswith("_output"):
            return True
        if kind in ("message", "reasoning") or kind in TOOL_CALLS or opaque_alone(kind, None, False):
            return False
    return False


def answered_calls(items: list[dict[str, Any]], kinds: list[str]) -> set[str]:
    return {
        call_id
        for item, kind in zip(items, kinds, strict=True)
        if kind.endswith("_output") and (call_id := output_call_id(item)) is not None
    }


def with_declarations(view: View, sent: Sequence[Message]) -> Sequence[Message]:
    """``sent`` with every tool declaration the chain left out put back in place, as it came.

    Tool declarations are instructions wherever they stand: a view that drops an older turn (a
    worker's, a sliding window's) must not take the tools declared in it (Codex may declare more
    tools mid-conversation). Each goes back before the first kept message that came after it.
    """
    missing = [ref for ref, unit in enumerate(view.units) if unit.kind == DECLARATION]
    if not missing:
        return sent
    kept = {ref_of(message) for message in sent}
    missing = [ref for ref in missing if ref not in kept]
    if not missing:
        return sent
    out: list[Message] = []
    for message in sent:
        ref = ref_of(message)
        while missing and ref is not None and missing[0] < ref:
            out.append(view.messages[missing.pop(0)])
        out.append(message)
    out.extend(view.messages[ref] for ref in missing)
    return out


def view_call(item: dict[str, Any], kind: str) -> dict[str, Any]:
    """A call item as a chat tool call (a custom tool's input, another call's action as the arguments)."""
    name = item.get("name")
    if name.__class__ is not str:
        name = kind
    if kind == "function_call":
        arguments = item.get("arguments")
    elif kind == "custom_tool_call":
        arguments = item.get("input")
    else:
        arguments = compact_json(item.get("action", {}))
    call_id = item.get("call_id", "")
    return {
        "id": call_id if call_id.__class__ is str else str(call_id),
        "type": "function",
        "function": {"name": name, "arguments": arguments if arguments.__class__ is str else ""},
    }
