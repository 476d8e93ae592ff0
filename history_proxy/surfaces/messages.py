"""``POST /v1/messages`` (Anthropic Messages API) as the chain's view, and back.

The view (docs/surfaces.md):

- ``system`` (a string or text blocks) is the leading system message;
- an assistant message is one assistant message: its ``text`` blocks the content, its ``tool_use``
  blocks the tool calls; ``thinking``, ``redacted_thinking``, ``server_tool_use`` and server tool
  results are not in the view: they stay in place, never edited, or go with the whole message;
- a user message's ``tool_result`` blocks are tool messages answering those calls; its other blocks
  are one user message after them (a turn boundary) when one of them is text; images, documents and
  other blocks of a message without text travel with its tool results.

Never stricter than the upstream: a message of any other role (a mid-conversation ``system``
message, beta ``mid-conversation-system-2026-04-07``, or a role this adapter does not know) is
**pinned**: it is not in the view, so no filter can drop, merge or edit it or take it for a turn
boundary, and it is written back verbatim, in place (before the first kept message that followed
it). Unknown block types and fields travel inside their message untouched. The few requests the
adapter cannot read at all are refused with Anthropic's own wording for that mistake.

Written back, the request stays valid for the Messages API: messages a filter emptied are left
out, system messages a filter made are appended to ``system``, and when the kept history would
start with something other than a user message (and did not before), a short user message saying
that earlier messages were left out opens it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeGuard, cast

from history_proxy.core.messages import ANNOTATION_KEYS, Message, text_of
from history_proxy.core.tokens import TOKENS_PER_MESSAGE, TokenCounter, approximate_length
from history_proxy.surfaces._view import (
    REF,
    Unit,
    View,
    compact_json,
    counted_content,
    unchanged,
    view_part,
    without_annotations,
    written_back,
)
from history_proxy.surfaces.marks import UNMARKABLE, marks_in
from history_proxy.surfaces.memo import Conversation, Remembered, ViewMemo, conversation_key, matched
from history_proxy.surfaces.messages_check import refuse_anthropic_messages
from history_proxy.surfaces.messages_pinned import omitted_at, with_pinned

SURFACE = "messages"
OMITTED = "(earlier messages were left out by history-proxy)"


def tool_use_arguments(tool_input: Any) -> str:
    """A ``tool_use`` block's ``input`` as the view's call arguments: compact JSON, sorted keys (what
    is counted for it, and what :mod:`history_proxy.server.warm` counts ahead of a large request)."""
    return compact_json(tool_input)


def _blocks(content: Any) -> list[dict[str, Any]]:
    return content if isinstance(content, list) else []


def to_view(body: dict[str, Any], counter: TokenCounter | None = None, memo: ViewMemo | None = None) -> View:
    """The request as chat messages for the chain (``messages`` checked as
    :func:`history_proxy.surfaces.messages_check.anthropic_messages` does).

    Each view message is counted by the chat recipe as it is built, with ``counter``'s strings (an
    approximate counter of its own when none is given), so the pipeline does not walk it again. With
    a ``memo``, the leading messages equal to the conversation's previous request keep their view.
    """
    natives = body.get("messages")
    if not isinstance(natives, list) or not natives:
        refuse_anthropic_messages(body)
    counter = counter or TokenCounter(approximate_length)
    known, count = counter.known.get, counter.text
    base = {role: TOKENS_PER_MESSAGE + count(role) for role in ("system", "user", "assistant", "tool")}
    tool_base = base["tool"]
    key = conversation_key(SURFACE, body.get("system"), natives) if memo is not None else None
    view, start = _opening(body.get("system"), natives, counter, memo, key, base["system"])
    out, units, spans, counts = view.messages, view.units, view.spans, view.counts
    # one walk checks, converts and counts; in order, so the first message at fault is named
    for i, message in enumerate(natives[start:], start):
        spans.append(len(units))
        if message.__class__ is not dict and not isinstance(message, dict):
            refuse_anthropic_messages(body)
        role = message.get("role")
        content = message.get("content")
        if content.__class__ is str and (role == "user" or role == "assistant"):
            out.append({"role": role, "content": content, REF: len(units)})
            units.append(Unit(role, i))
            counts.append(base[role] + (known(content) or count(content)))
            continue
        if role == "user" and content.__class__ is list and len(content) == 1:  # one tool result: the usual
            block = content[0]
            if block.__class__ is dict and block.get("type") == "tool_result":
                call_id, result = block.get("tool_use_id", ""), block.get("content")
                if call_id.__class__ is str and result.__class__ is str:
                    out.append({"role": "tool", "tool_call_id": call_id, "content": result, REF: len(units)})
                    units.append(Unit("result", i, (0,)))
                    counts.append(
                        tool_base + (known(call_id) or count(call_id)) + (known(result) or count(result))
                    )
                    continue
        if role != "user" and role != "assistant":
            continue  # pinned: not in the view, written back in place (see the module's docstring)
        if not _blocks_checked(content, body, view, role, i):
            continue
        if role == "assistant":
            assistant, tokens = _assistant_view(content, len(units), counter)
            out.append(assistant)
            units.append(Unit("assistant", i))
            counts.append(base["assistant"] + tokens)
            continue
        _user_blocks_view(view, content, i, counter, base)
    spans.append(len(units))
    if memo is None:  # whoever places marks counts them itself
        view.first_mark = -1
    else:
        _remember(memo, key, natives, view, counter, start)
    return view


def _opening(
    system: Any,
    natives: list[Any],
    counter: TokenCounter,
    memo: ViewMemo | None,
    key: Conversation | None,
    base: int,
) -> tuple[View, int]:
    """The view's start and the first native message still to convert: the remembered view of the
    conversation's leading messages equal to its previous request's, else the system prompt alone."""
    remembered = memo.recall(key, counter) if memo is not None else None
    start = matched(natives, remembered.natives) if remembered is not None else 0
    if remembered is not None and start:
        return remembered.view.prefix(start), start
    view = View([], [])
    if isinstance(system, str | list) and system:
        content, tokens = counted_content(system, counter)
        view.add({"role": "system", "content": content}, Unit("system"), base + tokens)
    return view, 0


def _blocks_checked(
    content: Any, body: dict[str, Any], view: View, role: str, i: int
) -> TypeGuard[list[dict[str, Any]]]:
    """Whether ``content`` is a list of block objects to convert (else a 400); a ``str`` subclass is
    added to the view as it is (the pipeline checks and counts it) and is not."""
    if content.__class__ is not list:
        if not isinstance(content, str | list):
            refuse_anthropic_messages(body)
        if isinstance(content, str):
            view.add({"role": role, "content": content}, Unit(role, i))
            return False
    for block in content:
        if block.__class__ is not dict and not isinstance(block, dict):
            refuse_anthropic_messages(body)
    return True


def _remember(
    memo: ViewMemo,
    key: Conversation | None,
    natives: list[Any],
    view: View,
    counter: TokenCounter,
    start: int,
) -> None:
    """Keep the conversation's view for its next request, its first native mark found (in the new
    messages only: the memo knows the others)."""
    if view.first_mark is None and marks_in(natives[start:]):
        view.first_mark = next(i for i in range(start, len(natives)) if marks_in(natives[i : i + 1]))
    memo.keep(key, Remembered(natives, view, counter), reused=start)


def _user_blocks_view(
    view: View, content: list[dict[str, Any]], i: int, counter: TokenCounter, base: dict[str, int]
) -> None:
    """A user message of several blocks: a tool message per ``tool_result``, then one user message of
    the other blocks when they hold text (or are all there is)."""
    known, count = counter.known.get, counter.text
    out, units, counts = view.messages, view.units, view.counts
    others: list[int] = []
    has_text = False
    for b, block in enumerate(content):
        kind = block.get("type")
        if kind != "tool_result":
            others.append(b)
            if kind == "text":
                has_text = True
            continue
        call_id = block.get("tool_use_id", "")
        if call_id.__class__ is not str:
            call_id = str(call_id)
        result = block.get("content")
        if result.__class__ is str:
            tokens = known(result) or count(result)
        elif isinstance(result, list | str):
            result, tokens = counted_content(result, counter)
        else:
            result, tokens = "", 0
        out.append({"role": "tool", "tool_call_id": call_id, "content": result, REF: len(units)})
        units.append(Unit("result", i, (b,)))
        counts.append(base["tool"] + (known(call_id) or count(call_id)) + tokens)
    if others and (has_text or len(others) == len(content)):
        parts, tokens = counted_content([content[b] for b in others], counter)
        out.append({"role": "user", "content": parts, REF: len(units)})
        units.append(Unit("user", i, others))
        counts.append(base["user"] + tokens)


def _assistant_view(content: list[dict[str, Any]], ref: int, counter: TokenCounter) -> tuple[Message, int]:
    """An assistant message's view (its texts and tool calls) and its tokens less the role's."""
    known, count = counter.known.get, counter.text
    texts: list[Any] = []
    calls: list[dict[str, Any]] = []
    tokens = 0
    for block in content:
        kind = block.get("type")
        if kind == "tool_use":
            name, call_id = block.get("name", ""), block.get("id", "")
            if name.__class__ is not str:
                name = str(name)
            arguments = tool_use_arguments(block.get("input", {}))
            tokens += (known(name) or count(name)) + (known(arguments) or count(arguments))
            calls.append(
                {
                    "id": call_id if call_id.__class__ is str else str(call_id),
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            )
        elif kind == "text":
            text = block.get("text")
            if text.__class__ is str:
                texts.append({"type": "text", "text": text})
                tokens += known(text) or count(text)
            else:
                texts.append(view_part(block))
    message: Message = {"role": "assistant", "content": texts or None}
    if calls:
        message["tool_calls"] = calls
    elif not texts:  # thinking or server tool blocks alone: opaque
        opaque = "(" + ", ".join(str(block.get("type")) for block in content) + ")"
        message["content"] = opaque
        tokens = count(opaque)
    message[REF] = ref
    return message, tokens


def rebuild(body: dict[str, Any], view: View, sent: Sequence[Message]) -> dict[str, Any]:
    """The native request for the view messages the chain kept (``sent``, in order)."""
    natives = body["messages"]  # checked by to_view
    if unchanged(view, sent):
        return body
    out: list[dict[str, Any] | None] = []
    origins: list[int] = []  # each ``out`` entry's native position (-1: a message a filter made)
    placed: set[int] = set()  # native positions of one view message, written already
    pieces: dict[int, dict[int, Message]] = {}  # native position (of several view messages) -> ref -> kept
    slots: dict[int, int] = {}  # native position (of several view messages) -> its place in ``out``
    system_kept: Message | None = None
    extra_system: list[str] = []
    units, originals, spans, rewritten = view.units, view.messages, view.spans, view.rewritten
    for message in sent:
        ref = message.get(REF)
        if ref.__class__ is not int:
            _made(message, out, origins, extra_system)
            continue
        index = units[ref].index
        if index < 0:  # the system unit
            system_kept = message
            continue
        if spans[index + 1] - spans[index] == 1:  # the usual native message: one view message
            if index in placed:
                continue
            placed.add(index)
            native = natives[index]
            if message is originals[ref]:
                if native["content"]:  # an empty one is left out
                    out.append(native if ANNOTATION_KEYS.isdisjoint(native) else without_annotations(native))
                    origins.append(index)
                continue
            elided = _elided(native, message.get("content"), index, rewritten)
            if elided is not None:
                out.append(elided)
                origins.append(index)
                continue
            pieces[index], slots[index] = {ref: message}, len(out)
            out.append(None)
            origins.append(index)
            continue
        if index not in pieces:
            pieces[index], slots[index] = {}, len(out)
            out.append(None)
            origins.append(index)
        pieces[index][ref] = message
    for index, kept in pieces.items():
        out[slots[index]] = _native(natives[index], view, range(spans[index], spans[index + 1]), kept)
    rebuilt = {**body, "messages": _placed(natives, spans, out, origins, bool(pieces))}
    system = _system(body.get("system"), view, system_kept, extra_system)
    if system is None:
        rebuilt.pop("system", None)
    else:
        rebuilt["system"] = system
    return rebuilt


def _made(
    message: Message, out: list[dict[str, Any] | None], origins: list[int], extra_system: list[str]
) -> None:
    """A message a filter made, as a native one (system text goes to ``system``)."""
    text = text_of(message.get("content"))
    if message.get("role") in ("system", "developer"):
        extra_system.append(text)
    elif text and message.get("role") in ("user", "assistant"):
        out.append({"role": message["role"], "content": [{"type": "text", "text": text}]})
        origins.append(-1)


def _elided(native: dict[str, Any], new: Any, index: int, rewritten: dict[int, Any]) -> dict[str, Any] | None:
    """One tool result whose text a filter rewrote (an elided observation), written back; else ``None``."""
    content = native["content"]
    if not (new.__class__ is str and new and content.__class__ is list and len(content) == 1):
        return None
    block = content[0]
    if block.get("type") != "tool_result" or block.get("content").__class__ is not str:
        return None
    done = rewritten.get(index)
    if done is None or done[0] != new:  # not written back with this text by the last turn
        done = rewritten[index] = (
            new,
            {**without_annotations(native), "content": [{**block, "content": new}]},
        )
    written: dict[str, Any] = done[1]
    return written


def _placed(
    natives: list[Any], spans: list[int], out: list[dict[str, Any] | None], origins: list[int], pieced: bool
) -> list[dict[str, Any]]:
    """The native messages in order: emptied ones left out, pinned ones put back, an opening user
    message where the history would not open with one."""
    if pieced:  # a rewritten native may have come out empty (or not at all): left out
        kept_at = [
            n for n, native in enumerate(out) if native is not None and native.get("content") not in ([], "")
        ]
        out, origins = [out[n] for n in kept_at], [origins[n] for n in kept_at]
    written = cast(list[dict[str, Any]], out)  # every placeholder filled or dropped
    written, origins = with_pinned(natives, spans, written, origins)
    at = omitted_at(natives, written, origins)
    if at is not None:
        written.insert(at, {"role": "user", "content": OMITTED})
    return written


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
    user_unit: int | None = None
    results: dict[int, int] = {}  # block position -> the ref of its tool message
    for r in refs:
        unit = units[r]
        if unit.kind == "result":
            results[unit.items[0]] = r
        elif user_unit is None and unit.kind == "user":
            user_unit = r
    blocks = _kept_blocks(content, results, user_unit, kept, originals)
    if user_unit is not None and user_unit in kept:
        blocks = _user_blocks(
            content, blocks, view.units[user_unit].items, view.messages[user_unit], kept[user_unit]
        )
    return {**native, "content": blocks}


def _kept_blocks(
    content: list[Any],
    results: dict[int, int],
    user_unit: int | None,
    kept: dict[int, Message],
    originals: Sequence[Message],
) -> list[Any]:
    """The blocks of a native message whose view messages the chain kept, tool results written back."""
    blocks: list[Any] = []
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
        elif user_unit is None or user_unit in kept:
            blocks.append(block)  # travels with the message's tool results, or with its kept user text
    return blocks


def _same(a: Message, b: Message) -> bool:
    return a.get("content") == b.get("content") and a.get("tool_calls") == b.get("tool_calls")


def _user_blocks(
    content: list[dict[str, Any]],
    blocks: list[Any],
    positions: Sequence[int],
    before: Message,
    after: Message,
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
