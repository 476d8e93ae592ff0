"""``POST /v1/responses`` (OpenAI Responses API, stateless use) as the chain's view, and back.

The view (docs/surfaces.md):

- ``instructions`` is the leading system message; it is kept and never edited;
- a string ``input`` is one user message; ``message`` items (typed or not) are messages of their role;
- an **assistant step** (one model turn) is one assistant message: its ``reasoning`` items, its
  assistant ``message`` item (the text), its call items (``function_call``, ``custom_tool_call``, and
  any ``*_call`` item with a ``*_output`` counterpart: the tool calls, parallel calls together) and
  server-side tool items (``web_search_call`` and the like, without output: opaque, they move with
  their step). ``reasoning`` opens the step that follows it;
- every ``*_output`` item is a tool message answering its call;
- ``compaction``, ``item_reference``, untyped items and message items of a role the chat API does
  not know are opaque assistant messages (:data:`history_proxy.core.messages.OPAQUE`): kept or dropped whole;
- the **leading instructions**: ``instructions``, the developer/system message items before the
  first other item, tool declarations (``additional_tools`` items, Codex's form) and any opaque or
  unknown item among them are leading system messages, so every view keeps them (an opaque one as a
  ``developer`` message sent whole). A tool declaration later in the input is an opaque
  ``developer`` message too.

Never stricter than the upstream: an item type, role, content part or field the adapter does not
know is forwarded unchanged, in place; its only 400s name ``input`` items in OpenAI's words.

Written back: unchanged view messages give their items verbatim; a step whose calls a filter removed
loses those call items, and a ``reasoning`` item is kept only while the item right after it in its
step is; changed text is written into the native text parts. Messages a filter made (a digest, a
summary, a ``Used tool`` note) become input messages of their role.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from history_proxy.core.messages import (
    ANNOTATION_KEYS,
    KNOWN_ROLES,
    OPAQUE,
    SYSTEM_ROLES,
    Message,
    leading_system_count,
    text_of,
)
from history_proxy.core.tokens import TOKENS_PER_MESSAGE, TokenCounter, approximate_length
from history_proxy.core.validation import check_annotations
from history_proxy.surfaces._view import (
    REF,
    Unit,
    View,
    annotations_of,
    counted_content,
    ref_of,
    unchanged,
    without_annotations,
    written_back,
)
from history_proxy.surfaces.memo import Conversation, Remembered, ViewMemo, conversation_key, matched
from history_proxy.surfaces.responses_items import (
    DECLARATION,
    PROVIDER_STATE,
    STEP_KINDS,
    TOOL_CALLS,
    TOOL_DECLARATIONS,
    answered_calls,
    input_items,
    item_type,
    opaque_alone,
    output_call_id,
    output_follows,
    provider_state,
    view_call,
    with_declarations,
)

__all__ = [
    "PROVIDER_STATE",
    "SURFACE",
    "input_items",
    "item_type",
    "output_call_id",
    "provider_state",
    "rebuild",
    "to_view",
]

SURFACE = "responses"
ORDINARY = frozenset({*TOOL_CALLS, "reasoning", "function_call_output", "custom_tool_call_output"})
"""Item kinds that are never alone (:func:`opaque_alone` says no to them)."""


class _Step:
    """An assistant step being read: its items and its view message."""

    def __init__(self) -> None:
        self.items: list[int] = []
        self.text_item: int | None = None
        self.calls: list[dict[str, Any]] = []
        self.kinds: list[str] = []


def to_view(body: dict[str, Any], counter: TokenCounter | None = None, memo: ViewMemo | None = None) -> View:
    """The request as chat messages for the chain.

    Each view message is counted by the chat recipe as it is built, with ``counter``'s strings (an
    approximate counter of its own when none is given), so the pipeline does not walk it again; a
    message item with annotations or a role the chat API does not know is left for it to check.
    With a ``memo``, the leading items equal to the conversation's previous request keep their view
    (up to the last unit they close; ``spans[i]`` is -1 where item ``i`` continues a step).
    """
    counter = counter or TokenCounter(approximate_length)
    count = counter.text
    instructions, raw = body.get("instructions"), body.get("input")
    key = conversation_key(SURFACE, instructions, raw) if memo is not None and isinstance(raw, list) else None
    view, start = _opening(instructions, raw, counter, memo, key)
    if isinstance(raw, str):
        only: Message = {"role": "user", "content": raw}
        view.add(only, Unit("input_string"), counter.message(only))
        return view
    items, kinds = input_items(body, start)
    server_call: int | None = (
        None  # the first server-side ``*_call``: whether it is a call depends on later items
    )
    answered: set[str] | None = None  # the calls an output answers: read when a server-side ``*_call`` asks
    base = {role: TOKENS_PER_MESSAGE + count(role) for role in KNOWN_ROLES}
    step: _Step | None = None

    out, units, spans = view.messages, view.units, view.spans
    leading = leading_system_count(out) == len(out)  # no other item yet: instructions go on
    for i, item in enumerate(items[start:], start):
        kind = kinds[i - start]
        role = item.get("role")
        # the common kinds decided inline (this runs for every item)
        alone = (
            role not in base
            if kind == "message"
            else kind not in ORDINARY and opaque_alone(kind, role, leading)
        )
        if alone:
            _close(step, items, view, base, counter)
            step = None
            _add_opaque(view, kind, i, leading, base, count)
            continue
        if leading:
            leading = kind == "message" and role in SYSTEM_ROLES
        if kind == "message" and role != "assistant":
            _close(step, items, view, base, counter)
            step = None
            _add_message(view, item, i, base[str(role)], counter)
        elif kind.endswith("_output"):
            _close(step, items, view, base, counter)
            step = None
            _add_output(view, item, i, base["tool"], counter)
        else:  # assistant-side: a text message, reasoning, a call, a server-side tool item
            is_call = kind in TOOL_CALLS
            if not is_call and kind.endswith("_call"):
                if answered is None:
                    answered = answered_calls(items, input_items(body)[1])
                    server_call = i
                is_call = item.get("call_id") in answered
            step = _assistant_item(view, items, kinds, start, i, kind, is_call, step, base, counter)
    open_step = step is not None  # a later request's next item may still belong to it
    _close(step, items, view, base, counter)
    spans.append(-1 if open_step else len(units))
    if server_call is not None:  # a later request may answer it: no view is taken past it
        spans[server_call + 1 :] = [-1] * (len(spans) - server_call - 1)
    if memo is not None:
        memo.keep(key, Remembered(items, view, counter), reused=start)
    return view


def _opening(
    instructions: Any, raw: Any, counter: TokenCounter, memo: ViewMemo | None, key: Conversation | None
) -> tuple[View, int]:
    """The view's start and the first item still to convert: the remembered view of the leading
    items equal to the conversation's previous request's, else the instructions alone."""
    remembered = memo.recall(key, counter) if memo is not None else None
    start = _resume_at(remembered, raw) if remembered is not None and isinstance(raw, list) else 0
    view = remembered.view.prefix(start) if remembered is not None and start else View([], [])
    if not start and isinstance(instructions, str) and instructions:
        system: Message = {"role": "system", "content": instructions}
        view.add(system, Unit("instructions", opaque=True), counter.message(system))
    return view, start


def _assistant_item(
    view: View,
    items: list[Any],
    kinds: list[str],
    start: int,
    i: int,
    kind: str,
    is_call: bool,
    step: _Step | None,
    base: dict[str, int],
    counter: TokenCounter,
) -> _Step | None:
    """An assistant-side item (a text message, reasoning, a call, a server-side tool item): it rides
    with the output before it, or opens a step, or continues the open one. The step open after it."""
    units, spans = view.units, view.spans
    if (
        step is None
        and not is_call
        and kind not in STEP_KINDS
        and units
        and units[-1].kind == "output"
        and output_follows(kinds, i - start)
    ):
        units[-1] = replace(units[-1], items=(*units[-1].items, i))  # rides with the output before it
        spans.append(-1)
        return None
    opens = step is None or (
        (kind == "reasoning" or kind == "message") and (step.text_item is not None or step.calls)
    )
    if opens:
        _close(step, items, view, base, counter)
        step = _Step()
    spans.append(len(units) if opens else -1)
    assert step is not None
    step.items.append(i)
    step.kinds.append(kind)
    if kind == "message":
        step.text_item = i
    elif is_call:
        step.calls.append(view_call(items[i], kind))
    return step


def _close(
    step: _Step | None, items: list[Any], view: View, base: dict[str, int], counter: TokenCounter
) -> None:
    """The assistant step being read, as one view message (nothing when no step is open)."""
    if step is None:
        return
    known, count = counter.known.get, counter.text
    message: Message = {"role": "assistant"}
    tokens = base["assistant"]
    if step.text_item is not None:
        content = items[step.text_item].get("content")
        if isinstance(content, str | list):
            message["content"], text_tokens = counted_content(content, counter)
            tokens += text_tokens
        else:
            message["content"] = None
    elif not step.calls:  # reasoning or server-side items alone: opaque
        message["content"] = opaque = "(" + ", ".join(step.kinds) + ")"
        tokens += count(opaque)
    else:
        message["content"] = None
    if step.calls:
        message["tool_calls"] = step.calls
        for call in step.calls:
            function = call["function"]
            name, arguments = function["name"], function["arguments"]
            tokens += (known(name) or count(name)) + (known(arguments) or count(arguments))
    opaque_step = step.text_item is None and not step.calls
    view.add(message, Unit("step", items=step.items, opaque=opaque_step), tokens)


def _add_opaque(
    view: View, kind: str, i: int, leading: bool, base: dict[str, int], count: Callable[[str], int]
) -> None:
    """An item the chain may only keep or drop whole, as a labelled opaque message."""
    view.spans.append(len(view.units))
    label = f"({kind or 'item'})"
    opaque_role = "developer" if leading or kind in TOOL_DECLARATIONS else "assistant"
    view.add(
        {"role": opaque_role, "content": label, OPAQUE: True},
        Unit(DECLARATION if kind in TOOL_DECLARATIONS else "opaque", i, opaque=True),
        base[opaque_role] + count(label),
    )


def _add_message(view: View, item: dict[str, Any], i: int, base: int, counter: TokenCounter) -> None:
    """A message item of a known role other than the assistant's."""
    units = view.units
    view.spans.append(len(units))
    content = item.get("content")
    if isinstance(content, str | list):
        content, tokens = counted_content(content, counter)
    else:
        content, tokens = None, 0
    message = {"role": item.get("role"), "content": content, REF: len(units)}
    plain = ANNOTATION_KEYS.isdisjoint(item)  # the role is known: opaque_alone took the others
    if not plain:
        check_annotations(item, f"input[{i}]")
        message.update(annotations_of(item))
    units.append(Unit("message", i))
    view.messages.append(message)
    view.counts.append(base + tokens if plain else None)


def _add_output(view: View, item: dict[str, Any], i: int, base: int, counter: TokenCounter) -> None:
    """A tool's output item, as a tool message."""
    known, count = counter.known.get, counter.text
    units = view.units
    view.spans.append(len(units))
    output = item.get("output")
    if output.__class__ is str:
        content, tokens = output, known(output) or count(output)
    elif isinstance(output, list | str):
        content, tokens = counted_content(output, counter)
    else:
        content = json.dumps(output)
        tokens = count(content)
    call_id = item.get("call_id")
    if call_id.__class__ is not str:
        call_id = output_call_id(item) or ""
    view.messages.append({"role": "tool", "tool_call_id": call_id, "content": content, REF: len(units)})
    units.append(Unit("output", i))
    view.counts.append(base + (known(call_id) or count(call_id)) + tokens)


def _resume_at(remembered: Remembered, items: list[Any]) -> int:
    """How many leading items keep their remembered view: equal ones, up to the last unit they close."""
    at, spans = matched(items, remembered.natives), remembered.view.spans
    while at > 0 and spans[at] < 0:
        at -= 1
    return at


def _rebuild_string(body: dict[str, Any], raw: str, view: View, sent: Sequence[Message]) -> dict[str, Any]:
    """A request whose ``input`` is one string: that string as the chain left it."""
    new_input: Any = raw
    for message in sent:
        ref = ref_of(message)
        if ref is not None and view.units[ref].kind == "input_string":
            new_input = text_of(message.get("content")) if message.get("content") != raw else raw
    return {**body, "input": new_input} if new_input is not raw else body


def rebuild(body: dict[str, Any], view: View, sent: Sequence[Message]) -> dict[str, Any]:
    """The native request for the view messages the chain kept (``sent``, in order)."""
    raw = body.get("input")
    if isinstance(raw, str):
        return _rebuild_string(body, raw, view, sent)
    if unchanged(view, sent):
        return body
    sent = with_declarations(view, sent)
    items = body["input"]  # checked by to_view
    out: list[Any] = []
    units, originals = view.units, view.messages
    for message in sent:
        ref = message.get(REF)
        if ref.__class__ is not int:
            out.append(_new_item(message))
            continue
        unit, before = units[ref], originals[ref]
        if unit.kind == "instructions":
            continue
        if message is before and unit.index >= 0:  # an unchanged item: as it came
            item = items[unit.index]
            out.append(item if ANNOTATION_KEYS.isdisjoint(item) else without_annotations(item))
            out.extend(without_annotations(items[i]) for i in unit.items)  # an output's riders
        elif message is before and unit.kind == "step":
            out.extend(
                item if ANNOTATION_KEYS.isdisjoint(item) else without_annotations(item)
                for item in map(items.__getitem__, unit.items)
            )
        elif unit.opaque:
            out.extend(without_annotations(items[i]) for i in (unit.items or [unit.index]))
        elif unit.kind == "message":
            item = items[unit.index]
            if message.get("content") != before.get("content"):
                text_type = "output_text" if item.get("role") == "assistant" else "input_text"
                content = written_back(
                    item.get("content"), before.get("content"), message.get("content"), text_type
                )
                item = {**item, "content": content}
            out.append(without_annotations(item))
        elif unit.kind == "output":
            item = items[unit.index]
            new, output = message.get("content"), item.get("output")
            if new.__class__ is str and output.__class__ is str:  # an elided observation: its text replaced
                item = {**item, "output": new}
            elif new != before.get("content") and isinstance(output, list | str):
                output = written_back(
                    item["output"], before.get("content"), message.get("content"), "input_text"
                )
                item = {**item, "output": output}
            out.append(without_annotations(item))
            out.extend(without_annotations(items[i]) for i in unit.items)
        else:
            out.extend(_step_items(items, unit, before, message))
    return {**body, "input": out}


def _step_items(items: list[dict[str, Any]], unit: Unit, before: Message, after: Message) -> list[Any]:
    """A step's native items for its view message as the chain left it."""
    if after is before or (
        after.get("content") == before.get("content") and after.get("tool_calls") == before.get("tool_calls")
    ):
        return [without_annotations(items[i]) for i in unit.items]
    kept_calls = {str(call.get("id")) for call in after.get("tool_calls") or []}
    text_changed = after.get("content") != before.get("content")
    text = text_of(after.get("content"))
    keep: list[bool] = []
    for i in unit.items:
        kind = item_type(items[i])
        if kind == "message":
            keep.append(bool(text) or not text_changed)
        elif kind in TOOL_CALLS or any(
            call.get("id") == items[i].get("call_id") for call in before.get("tool_calls") or []
        ):
            keep.append(str(items[i].get("call_id")) in kept_calls)
        else:
            keep.append(True)
    # a reasoning item stays only while the item it preceded does
    for k in range(len(unit.items) - 1, -1, -1):
        if item_type(items[unit.items[k]]) == "reasoning":
            keep[k] = keep[k] and (k + 1 < len(keep) and keep[k + 1])
    out: list[Any] = []
    wrote_text = False
    for k, i in enumerate(unit.items):
        item = items[i]
        if item_type(item) == "message" and keep[k]:
            if text_changed:
                content = written_back(
                    item.get("content"), before.get("content"), after.get("content"), "output_text"
                )
                item = {**item, "content": content}
            wrote_text = True
        if keep[k]:
            out.append(without_annotations(item))
    if text_changed and text and not wrote_text:
        at = next((n for n, item in enumerate(out) if item_type(item) != "reasoning"), len(out))
        out.insert(at, {"type": "message", "role": "assistant", "content": text})
    return out


def _new_item(message: Message) -> dict[str, Any]:
    """An input item for a view message a filter made."""
    role = message.get("role")
    if role == "tool":
        return {
            "type": "function_call_output",
            "call_id": message.get("tool_call_id"),
            "output": text_of(message.get("content")),
        }
    return {"type": "message", "role": role, "content": text_of(message.get("content"))}


def strip_refs(messages: Sequence[Message]) -> list[Message]:
    """View messages without their back-references (for reports and previews)."""
    return [{k: v for k, v in m.items() if k != REF} for m in messages]
