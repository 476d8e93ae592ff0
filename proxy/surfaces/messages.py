"""``POST /v1/messages`` (Anthropic Messages API) as the chain's view, and back.

The view (SPEC section 7):

- ``system`` (a string or text blocks) is the leading system message;
- an assistant message is one assistant message: its ``text`` blocks the content, its ``tool_use``
  blocks the tool calls; ``thinking``, ``redacted_thinking``, ``server_tool_use`` and server tool
  results are not in the view: they stay in place, never edited, or go with the whole message;
- a user message's ``tool_result`` blocks are tool messages answering those calls; its other blocks
  are one user message after them (a turn boundary) when one of them is text; images, documents and
  other blocks of a message without text travel with its tool results.

Written back, the request stays valid for the Messages API: messages a filter emptied are left
out, system messages a filter made are appended to ``system`` (the API has no system role in
``messages``), and when the kept history would start with an assistant message, a short user
message saying that earlier messages were left out opens it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NoReturn

from proxy.core.invariants import MAX_CACHE_MARKS
from proxy.core.messages import Message, text_of
from proxy.errors import InvalidRequestError
from proxy.filters.cache_control import CacheControl
from proxy.surfaces._view import (
    REF,
    Unit,
    View,
    compact_json,
    unchanged,
    view_content,
    view_part,
    without_annotations,
    written_back,
)

SURFACE = "messages"
OMITTED = "(earlier messages were left out by history-proxy)"
UNMARKABLE = ("thinking", "redacted_thinking")  # a tuple: a hostile block type may be unhashable


def message_list(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``messages`` list, checked: 400s naming the first field at fault."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequestError("'messages' must be a non-empty list of message objects", param="messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            raise InvalidRequestError(
                f"messages[{i}].role must be 'user' or 'assistant'", param=f"messages[{i}].role"
            )
        content = message.get("content")
        if not isinstance(content, str) and not (
            isinstance(content, list) and all(isinstance(block, dict) for block in content)
        ):
            raise InvalidRequestError(
                f"messages[{i}].content must be a string or a list of content blocks",
                param=f"messages[{i}].content",
            )
    return messages


def _fault(body: dict[str, Any]) -> NoReturn:
    """The 400 naming the first message at fault (``body`` has one)."""
    message_list(body)
    raise AssertionError("message_list found no fault")


def _blocks(content: Any) -> list[dict[str, Any]]:
    return content if isinstance(content, list) else []


def to_view(body: dict[str, Any]) -> View:
    """The request as chat messages for the chain (``messages`` checked as :func:`message_list` does)."""
    natives = body.get("messages")
    if not isinstance(natives, list) or not natives:
        _fault(body)
    view = View([], [])
    out, units, spans = view.messages, view.units, view.spans
    system = body.get("system")
    if isinstance(system, str | list) and system:
        view.add({"role": "system", "content": view_content(system)}, Unit("system"))
    # one walk checks and converts; the view is built in order, so the first message at fault is named
    for i, message in enumerate(natives):
        spans.append(len(units))
        if not isinstance(message, dict):
            _fault(body)
        role = message.get("role")
        content = message.get("content")
        if content.__class__ is str and (role == "user" or role == "assistant"):
            out.append({"role": role, "content": content, REF: len(units)})
            units.append(Unit(role, i))
            continue
        if role not in ("user", "assistant") or not (
            isinstance(content, str)
            or (isinstance(content, list) and all(isinstance(block, dict) for block in content))
        ):
            _fault(body)
        if role == "assistant":
            out.append(_assistant_view(content, len(units)))
            units.append(Unit("assistant", i))
            continue
        if isinstance(content, str):  # a str subclass
            out.append({"role": "user", "content": content, REF: len(units)})
            units.append(Unit("user", i))
            continue
        others: list[int] = []
        has_text = False
        for b, block in enumerate(content):
            kind = block.get("type")
            if kind != "tool_result":
                others.append(b)
                if kind == "text":
                    has_text = True
                continue
            result = block.get("content")
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": str(block.get("tool_use_id", "")),
                    "content": view_content(result) if isinstance(result, list | str) else "",
                    REF: len(units),
                }
            )
            units.append(Unit("result", i, items=[b]))
        if others and (has_text or len(others) == len(content)):
            out.append({"role": "user", "content": [view_part(content[b]) for b in others], REF: len(units)})
            units.append(Unit("user", i, items=others))
    spans.append(len(units))
    return view


def _assistant_view(content: Any, ref: int) -> Message:
    if isinstance(content, str):
        return {"role": "assistant", "content": content, REF: ref}
    texts: list[Any] = []
    calls: list[dict[str, Any]] = []
    for block in content:
        kind = block.get("type")
        if kind == "text":
            texts.append(view_part(block))
        elif kind == "tool_use":
            calls.append(
                {
                    "id": str(block.get("id", "")),
                    "type": "function",
                    "function": {
                        "name": str(block.get("name", "")),
                        "arguments": compact_json(block.get("input", {})),
                    },
                }
            )
    message: Message = {"role": "assistant", "content": texts or None}
    if calls:
        message["tool_calls"] = calls
    elif not texts:  # thinking or server tool blocks alone: opaque
        message["content"] = "(" + ", ".join(str(block.get("type")) for block in content) + ")"
    message[REF] = ref
    return message


def rebuild(body: dict[str, Any], view: View, sent: Sequence[Message]) -> dict[str, Any]:
    """The native request for the view messages the chain kept (``sent``, in order)."""
    natives = body["messages"]  # checked by to_view
    if unchanged(view, sent):
        return body
    order: list[int | dict[str, Any]] = []  # native message positions, or messages a filter made
    pieces: dict[int, dict[int, Message]] = {}  # native position -> unit ref -> surviving view message
    same: dict[int, int] = {}  # native position -> how many of its view messages came back untouched
    system_kept: Message | None = None
    extra_system: list[str] = []
    units, originals = view.units, view.messages
    for message in sent:
        ref = message.get(REF)
        if ref.__class__ is not int:
            text = text_of(message.get("content"))
            if message.get("role") in ("system", "developer"):
                extra_system.append(text)
            elif text and message.get("role") in ("user", "assistant"):
                order.append({"role": message["role"], "content": [{"type": "text", "text": text}]})
            continue
        unit = units[ref]
        if unit.kind == "system":
            system_kept = message
            continue
        index = unit.index
        kept = pieces.get(index)
        if kept is None:
            kept = pieces[index] = {}
            order.append(index)
        kept[ref] = message
        if message is originals[ref]:
            same[index] = same.get(index, 0) + 1
    spans = view.spans
    out: list[dict[str, Any]] = []
    for entry in order:
        if isinstance(entry, dict):
            native: dict[str, Any] | None = entry
        elif same.get(entry) == spans[entry + 1] - spans[entry]:  # every view message of it untouched
            native = without_annotations(natives[entry])
        else:
            native = _native(natives[entry], view, range(spans[entry], spans[entry + 1]), pieces[entry])
        if native is not None and native.get("content") not in ([], ""):
            out.append(native)
    if out and out[0].get("role") != "user":
        out.insert(0, {"role": "user", "content": OMITTED})
    rebuilt = {**body, "messages": out}
    system = _system(body.get("system"), view, system_kept, extra_system)
    if system is None:
        rebuilt.pop("system", None)
    else:
        rebuilt["system"] = system
    return rebuilt


def _system(system: Any, view: View, kept: Message | None, extra: list[str]) -> Any:
    if kept is not None:
        before = view.messages[0]
        system = written_back(system, before.get("content"), kept.get("content"), "text")
    elif system is not None and any(unit.kind == "system" for unit in view.units):
        system = None  # the chain dropped it
    if not extra:
        return system
    blocks = [{"type": "text", "text": system}] if isinstance(system, str) and system else list(system or [])
    return [*blocks, *({"type": "text", "text": text} for text in extra if text)]


def _native(
    native: dict[str, Any], view: View, refs: Sequence[int], kept: dict[int, Message]
) -> dict[str, Any] | None:
    """One native message as the chain left the view messages made of it (``refs``: all of them)."""
    originals = view.messages
    if len(kept) == len(refs) and all(kept[r] is originals[r] or _same(kept[r], originals[r]) for r in refs):
        same: dict[str, Any] = without_annotations(native)
        return same
    content = native["content"]
    if native["role"] == "assistant":
        ((ref, after),) = kept.items()
        return {**native, "content": _assistant_content(content, view.messages[ref], after)}
    if isinstance(content, str):
        ((ref, after),) = kept.items()
        return {**native, "content": text_of(after.get("content"))}
    units = view.units
    if len(content) == 1 and len(refs) == 1 and units[refs[0]].kind == "result":
        # one tool result alone (the usual shape): its text written back, no block bookkeeping
        block, ref = content[0], refs[0]
        new, old = kept[ref].get("content"), originals[ref].get("content")
        result = block.get("content")
        if new != old and isinstance(result, (list, str)):
            block = {**block, "content": written_back(result, old, new, "text")}
        return {**native, "content": [block]}
    blocks: list[Any] = []
    user_unit: int | None = None
    results: dict[int, int] = {}  # block position -> the ref of its tool message
    for r in refs:
        unit = units[r]
        if unit.kind == "result":
            results[unit.items[0]] = r
        elif user_unit is None and unit.kind == "user":
            user_unit = r
    for b, block in enumerate(content):
        if block.get("type") == "tool_result":
            found = results.get(b)
            if found is None or found not in kept:
                continue
            new, old = kept[found].get("content"), originals[found].get("content")
            native_result = block.get("content")
            if new != old and isinstance(native_result, (list, str)):
                block = {**block, "content": written_back(native_result, old, new, "text")}
            blocks.append(block)
        elif user_unit is None:
            blocks.append(block)  # travels with the message's tool results
        elif user_unit in kept:
            blocks.append(block)
    if user_unit is not None and user_unit in kept:
        blocks = _user_blocks(
            content, blocks, view.units[user_unit].items, view.messages[user_unit], kept[user_unit]
        )
    return {**native, "content": blocks}


def _same(a: Message, b: Message) -> bool:
    return a.get("content") == b.get("content") and a.get("tool_calls") == b.get("tool_calls")


def _user_blocks(
    content: list[dict[str, Any]], blocks: list[Any], positions: list[int], before: Message, after: Message
) -> list[Any]:
    if after.get("content") == before.get("content"):
        return blocks
    originals = [content[b] for b in positions]
    changed = written_back(originals, before.get("content"), after.get("content"), "text")
    results = [block for block in blocks if block.get("type") == "tool_result"]
    return [*results, *changed]


def _assistant_content(content: Any, before: Message, after: Message) -> Any:
    if isinstance(content, str):
        return text_of(after.get("content"))
    kept_calls = {str(call.get("id")) for call in after.get("tool_calls") or []}
    blocks = [b for b in content if b.get("type") != "tool_use" or str(b.get("id")) in kept_calls]
    if after.get("content") == before.get("content"):
        return blocks
    texts = [b for b in blocks if b.get("type") == "text"]
    new = after.get("content")
    if isinstance(new, list) and isinstance(before.get("content"), list) and len(new) == len(texts):
        replaced = iter(written_back(texts, before.get("content"), new, "text"))
        return [next(replaced) if b.get("type") == "text" else b for b in blocks]
    text = text_of(new)
    out = [b for b in blocks if b.get("type") != "text"]
    if text:
        at = next((n for n, b in enumerate(out) if b.get("type") not in UNMARKABLE), len(out))
        out.insert(at, {"type": "text", "text": text})
    return out


def place_marks(body: dict[str, Any], slot: CacheControl) -> dict[str, Any]:
    """Native ``cache_control`` marks on the newest eligible messages, as the slot says.

    The client's own marks (on tools, system and messages) are kept and count towards the limit of
    4; a message already carrying one counts as marked. A user message holding tool results is of
    role ``tool`` for ``tagged_roles``; the mark goes on its last (``part: first``: first) block
    that may carry one (not ``thinking``). Applying it twice equals applying it once.
    """
    messages = body.get("messages")
    if not isinstance(messages, list):
        return body
    room = MAX_CACHE_MARKS - _marks(body.get("tools")) - _marks(body.get("system")) - _marks(messages)
    mark = slot.mark()
    out = list(messages)
    counted = 0
    for age, i in enumerate(range(len(out) - 1, -1, -1)):
        if counted >= slot.last_n_messages:
            break
        message = out[i]
        content = message.get("content")
        if age < slot.last_n_messages_offset or not content or _role(message) not in slot.tagged_roles:
            continue
        if _marks([message]) == 0:
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
            markable = [
                n
                for n, block in enumerate(blocks)
                if isinstance(block, dict) and block.get("type") not in UNMARKABLE
            ]
            if room <= 0 or not markable:
                continue
            at = markable[0] if slot.part == "first" else markable[-1]
            blocks[at] = {**blocks[at], "cache_control": mark}
            out[i] = {**message, "content": blocks}
            room -= 1
        counted += 1
    return {**body, "messages": out}


def _role(message: dict[str, Any]) -> str:
    content = message.get("content")
    if (
        message.get("role") == "user"
        and isinstance(content, list)
        and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
    ):
        return "tool"
    return str(message.get("role"))


def _marks(value: Any) -> int:
    """The ``cache_control`` marks in tools, system blocks or messages (blocks and tool results inside)."""
    if not isinstance(value, list):
        return 0
    count = 0
    for item in value:
        if item.__class__ is not dict:
            continue
        if item.get("cache_control"):
            count += 1
        content = item.get("content")
        if content.__class__ is list:
            for block in content:  # one level inline: the usual depth, without a call per message
                if block.__class__ is not dict:
                    continue
                if block.get("cache_control"):
                    count += 1
                inner = block.get("content")
                if inner.__class__ is list:
                    count += _marks(inner)
    return count
