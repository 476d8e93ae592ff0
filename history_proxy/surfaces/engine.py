"""``POST /v1/compress``: the gateways' engine contract (Headroom's) as the chain's view, and back.

A gateway (LiteLLM's ``headroom`` guardrail, Portkey, Kong, agentgateway) sends chat messages,
often not a whole conversation: LiteLLM withholds the system rows, the newest user and assistant
rows and every assistant row, so tool results arrive without the calls they answer. The view is the
messages as sent, each carrying :data:`REF`; a run of tool messages answering no preceding call gets
a stand-in assistant message with those calls, and a conversation whose first message after the
system ones is not a user message gets a stand-in task (:data:`WITHHELD_TASK`) before it, so every
chain reads a valid conversation opened by a task (a view anchors the current turn there, and
``last_n_observations`` counts it as the first observation, never elided, as SWE-agent's instance
template). Stand-ins are never written back.

Written back, the answer has exactly one message per message sent, in order (the contract; a
gateway matches rows by position):

- a message the chain kept is sent as the chain left it (an elided observation, redacted text);
- a message the chain dropped becomes a placeholder of the same role, ``tool_call_id``,
  ``tool_calls`` and ``name``, whose text says what was left out (and the handle to retrieve it
  by, :func:`placeholder`);
- an assistant message keeps its own ``tool_calls`` and a tool message its ``tool_call_id``, so the
  pairs the gateway sent are the pairs it gets back;
- ``system`` and ``developer`` messages come back verbatim (gateways keep or discard the system
  prompt themselves: agentgateway never sends it, LiteLLM discards a rewritten one);
- a message a filter made (a summary, a digest) takes the place of the first message it stands
  for: its text goes into the first dropped message's placeholder.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import orjson

from history_proxy.core.messages import ANNOTATION_KEYS, Message, text_of
from history_proxy.core.tokens import TokenCounter
from history_proxy.errors import InvalidRequestError
from history_proxy.surfaces._view import REF, Unit, View, ref_of

SURFACE = "engine"
STAND_IN = "stand_in"
"""The unit kind of an assistant message made for tool results that answer no call sent."""
VERBATIM_ROLES = frozenset({"system", "developer"})
WITHHELD_TASK = "(the task, withheld by the gateway)"
"""The stand-in user message opening a view whose messages do not open with one."""
HANDLE_CHARS = 24
"""A handle's length in hex digits (what LiteLLM's guardrail reads as a retrieval hash: 12 to 24)."""


def to_view(body: dict[str, Any], counter: TokenCounter | None = None, memo: Any = None) -> View:
    """The messages sent as chat messages for the chain (stand-in calls for orphan tool results)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequestError(
            "'messages' must be a non-empty list of chat messages", param="messages", code="invalid_messages"
        )
    view = View([], [])
    answered: set[str] = set()  # the call ids the nearest assistant message (or stand-in) made
    stand_in: Message | None = None
    opened = False  # a user message (or the stand-in task) opens the conversation
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InvalidRequestError(
                f"messages[{i}] must be an object", param=f"messages[{i}]", code="invalid_messages"
            )
        role = message.get("role")
        if not opened and role not in VERBATIM_ROLES:
            opened = True
            if role != "user":
                view.add({"role": "user", "content": WITHHELD_TASK}, Unit(STAND_IN))
        if role == "tool":
            call_id = message.get("tool_call_id")
            if isinstance(call_id, str) and call_id not in answered:
                stand_in = _stand_in(view, stand_in, call_id)
                answered.add(call_id)
        else:
            stand_in = None
            answered = _call_ids(message) if role == "assistant" else set()
        view.add({**message, REF: len(view.units)}, Unit(str(role), i))
    return view


def _call_ids(message: Message) -> set[str]:
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return set()
    return {call["id"] for call in calls if isinstance(call, dict) and isinstance(call.get("id"), str)}


def _stand_in(view: View, current: Message | None, call_id: str) -> Message:
    """The stand-in assistant message of the current run of orphan tool results, with ``call_id`` added."""
    call = {"id": call_id, "type": "function", "function": {"name": "tool", "arguments": "{}"}}
    if current is not None and view.messages and view.messages[-1].get("role") == "tool":
        current["tool_calls"].append(call)
        return current
    return view.add({"role": "assistant", "content": None, "tool_calls": [call]}, Unit(STAND_IN))


def handle_of(message: Message) -> str:
    """The handle an elided message's original is kept under: a hash of its content (hex)."""
    try:
        data = orjson.dumps(message.get("content"), option=orjson.OPT_SORT_KEYS)
    except TypeError:
        data = repr(message.get("content")).encode()
    return hashlib.sha256(data).hexdigest()[:HANDLE_CHARS]


def placeholder(original: Message, handle: str | None, made: str = "") -> Message:
    """A dropped message's stand-in: its role and pairing fields kept, its text saying what went."""
    kept = {k: v for k, v in original.items() if k != "content" and k not in ANNOTATION_KEYS}
    if made:
        text = made
    elif handle is not None:
        text = f"[history-proxy: message left out; original retrievable with hash={handle}]"
    else:
        text = "[history-proxy: message left out]"
    return {**kept, "content": text}


def rebuild(body: dict[str, Any], view: View, sent: Sequence[Message]) -> dict[str, Any]:
    """One message per message sent, in order (see the module docstring), and the elided ones' handles.

    Returns ``{"messages": [...], "elided": [[position, handle], ...]}``; the handler keeps each
    elided original retrievable under its handle and answers the contract's shape.
    """
    originals: list[Message] = body["messages"]
    placed: list[Message | None] = [None] * len(originals)
    made: list[str] = []
    for message in sent:
        ref = ref_of(message)
        index = view.units[ref].index if ref is not None else -1
        if ref is None:
            text = text_of(message.get("content"))
            if text:
                made.append(text)
        elif index >= 0:  # the view's own message: nothing changed, the original goes back
            placed[index] = originals[index] if message is view.messages[ref] else message
    out: list[Message] = []
    elided: list[list[Any]] = []
    for i, original in enumerate(originals):
        kept = placed[i]
        if original.get("role") in VERBATIM_ROLES:
            out.append(original)
        elif kept is not None:
            out.append(_written(original, kept))
        elif made:
            out.append(placeholder(original, None, "\n\n".join(made)))
            made = []
        else:
            handle = handle_of(original)
            out.append(placeholder(original, handle))
            elided.append([i, handle])
    return {"messages": out, "elided": elided}


def _written(original: Message, kept: Message) -> Message:
    """A kept message as sent back: the chain's content, the original's pairing fields."""
    if kept is original:
        return original
    out = {k: v for k, v in kept.items() if k != REF and k not in ANNOTATION_KEYS}
    for key in ("role", "tool_calls", "tool_call_id", "name"):
        if key in original:
            out[key] = original[key]
        else:
            out.pop(key, None)
    if out.get("content") in (None, "", []) and original.get("content") not in (None, "", []):
        out["content"] = "[history-proxy: content left out]"
    return out
