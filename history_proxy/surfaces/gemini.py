"""Gemini's ``generateContent`` (and ``streamGenerateContent``, ``countTokens``) as the chain's view, and back.

The view (docs/surfaces.md):

- ``systemInstruction`` is the leading system message; it goes back verbatim, and a system message a
  filter made (a summary, a digest) is appended to it as a text part;
- a ``model`` content is one assistant message: its ``text`` parts the content, its ``functionCall``
  parts the tool calls (id: the part's ``id``, else ``<content>:<part>``); thought parts, code
  execution parts and parts of unknown kinds are not in the view and travel with their content;
- a ``user`` content's ``functionResponse`` parts are tool messages answering the preceding
  ``model`` content's calls (by ``id``, else in order); its other parts are one user message after
  them when one of them is text (images and files as image parts), else they travel with the results.

Written back, an unchanged content is sent as it came; a tool message a filter rewrote (an elided
observation) is written back under the response's one key (``{"output": text}`` otherwise); a
tool message's text is that one string, or the response as compact JSON; a call dropped with its
results leaves with them, so every ``functionCall`` keeps its ``functionResponse``. A message a filter
made (a summary, a digest, a ``Used X tool`` note) is appended to ``systemInstruction``. Contents a
filter emptied are left out, and when the kept history would open with a ``model`` content a short
``user`` content saying earlier turns were left out opens it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from history_proxy.core.messages import Message, text_of
from history_proxy.core.summary_input import NATIVE_PART, PLACEHOLDER_URL
from history_proxy.core.tokens import TOKENS_PER_MESSAGE, TokenCounter, approximate_length
from history_proxy.errors import InvalidRequestError
from history_proxy.surfaces._view import REF, Unit, View, compact_json, unchanged
from history_proxy.surfaces.memo import Remembered, ViewMemo, conversation_key, matched

SURFACE = "gemini"
OMITTED = "(earlier turns were left out by history-proxy)"
MEDIA_KEYS = ("inlineData", "fileData")
ROLES = ("system", "user", "assistant", "tool")


def _refuse(message: str, field: str) -> InvalidRequestError:
    return InvalidRequestError(message, param=field)


def to_view(body: dict[str, Any], counter: TokenCounter | None = None, memo: ViewMemo | None = None) -> View:
    """The request as chat messages for the chain, each counted by the chat recipe as it is built.

    With a ``memo``, the leading contents equal to the conversation's previous request keep their view
    (and their counts): only the new contents are converted.
    """
    contents = body.get("contents")
    if contents is None and "generateContentRequest" in body:
        return View([], [])  # countTokens over a whole request: forwarded as it came
    if not isinstance(contents, list):
        raise _refuse("* GenerateContentRequest.contents: contents is not specified", "contents")
    counter = counter or TokenCounter(approximate_length)
    base = {role: TOKENS_PER_MESSAGE + counter.text(role) for role in ROLES}  # before content
    instruction = body.get("systemInstruction")
    key = conversation_key(SURFACE, instruction, contents) if memo is not None else None
    remembered = memo.recall(key, counter) if memo is not None else None
    start = matched(contents, remembered.natives) if remembered is not None else 0
    if remembered is not None and start:
        view = remembered.view.prefix(start)
        calls = _calls_before(view, contents, start)
    else:
        view, start, calls = View([], []), 0, []  # calls: the ids of the latest model content, in order
        _system(instruction, view, counter, base["system"])
    for i, content in enumerate(contents[start:], start):
        if not isinstance(content, dict) or not isinstance(content.get("parts", []), list):
            raise _refuse(f"Invalid value at 'contents[{i}]': parts must be a list", f"contents[{i}]")
        view.spans.append(len(view.units))
        parts = content.get("parts") or []
        if content.get("role") == "model":
            calls = _model_view(view, parts, i, counter, base["assistant"])
        else:
            _user_view(view, parts, i, counter, calls, base)
            calls = []
    view.spans.append(len(view.units))
    view.first_mark = -1  # Gemini has no cache marks to place
    if memo is not None:
        memo.keep(key, Remembered(contents, view, counter), reused=start)
    return view


def _calls_before(view: View, contents: list[Any], start: int) -> list[str]:
    """The call ids of the content before ``start`` when it is a model content (its responses may follow)."""
    previous = contents[start - 1]
    if not isinstance(previous, dict) or previous.get("role") != "model":
        return []
    message = view.messages[view.spans[start - 1]] if view.spans[start] > view.spans[start - 1] else {}
    return [call["id"] for call in message.get("tool_calls") or []]


def _system(instruction: Any, view: View, counter: TokenCounter, base: int) -> None:
    if not isinstance(instruction, dict):
        return
    parts = instruction.get("parts")
    texts = [p["text"] for p in parts or [] if isinstance(p, dict) and isinstance(p.get("text"), str)]
    if texts:
        text = "\n".join(texts)
        view.add({"role": "system", "content": text}, Unit("system"), base + counter.text(text))


def _model_view(view: View, parts: list[Any], i: int, counter: TokenCounter, base: int) -> list[str]:
    """A model content as one assistant message; the ids of its calls, in order."""
    count = counter.text
    if len(parts) == 1 and parts[0].__class__ is dict:  # the usual: one text, or one call
        text = parts[0].get("text")
        if text.__class__ is str and parts[0].get("thought") is not True:
            view.add({"role": "assistant", "content": text}, Unit("assistant", i), base + count(text))
            return []
    texts: list[Any] = []
    tool_calls: list[dict[str, Any]] = []
    tokens = base
    for k, part in enumerate(parts):
        if not isinstance(part, dict) or part.get("thought") is True:
            continue
        text, call = part.get("text"), part.get("functionCall")
        if isinstance(text, str):
            texts.append({"type": "text", "text": text})
            tokens += count(text)
        elif isinstance(call, dict):
            call_id = call.get("id") if isinstance(call.get("id"), str) and call.get("id") else f"{i}:{k}"
            name = str(call.get("name", ""))
            arguments = compact_json(call.get("args", {}))
            tokens += count(name) + count(arguments)
            tool_calls.append(
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            )
    message: Message = {"role": "assistant", "content": texts or None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    elif not texts:  # thoughts or code execution alone: opaque, kept or dropped whole
        message["content"] = "(model parts)"
        tokens += count("(model parts)")
    view.add(message, Unit("assistant", i), tokens)
    return [call["id"] for call in tool_calls]


def _user_view(
    view: View, parts: list[Any], i: int, counter: TokenCounter, calls: list[str], base: dict[str, int]
) -> None:
    """A user content: a tool message per ``functionResponse``, then one user message of its other parts."""
    count = counter.text
    others: list[int] = []
    has_text = False
    answered = 0
    for k, part in enumerate(parts):
        response = part.get("functionResponse") if isinstance(part, dict) else None
        if not isinstance(response, dict):
            others.append(k)
            has_text = has_text or (isinstance(part, dict) and isinstance(part.get("text"), str))
            continue
        given = response.get("id")
        if isinstance(given, str) and given:
            call_id = given
        elif answered < len(calls):
            call_id = calls[answered]
        else:
            call_id = f"{i}:{k}"
        answered += 1
        result = response_text(response.get("response", {}))
        tokens = base["tool"] + count(call_id) + count(result)
        view.add(
            {"role": "tool", "tool_call_id": call_id, "content": result}, Unit("result", i, (k,)), tokens
        )
    if others and (has_text or len(others) == len(parts)):
        content, tokens = _user_content([parts[k] for k in others], counter)
        view.add({"role": "user", "content": content}, Unit("user", i, others), base["user"] + tokens)


def response_text(response: Any) -> str:
    """A ``functionResponse``'s ``response`` as the tool message's text: the string itself when it holds
    one string (``{"output": "..."}``, as Gemini CLI sends), else compact JSON."""
    if isinstance(response, dict) and len(response) == 1:
        (value,) = response.values()
        if isinstance(value, str):
            return value
    return compact_json(response)


def _user_content(parts: list[Any], counter: TokenCounter) -> tuple[Any, int]:
    count = counter.text
    if len(parts) == 1 and isinstance(parts[0], dict) and isinstance(parts[0].get("text"), str):
        text = parts[0]["text"]
        return text, count(text)
    out: list[Any] = []
    tokens = 0
    for part in parts:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            out.append({"type": "text", "text": part["text"]})
            tokens += count(part["text"])
        elif isinstance(part, dict) and any(key in part for key in MEDIA_KEYS):
            out.append({"type": "image_url", "image_url": {"url": PLACEHOLDER_URL}, NATIVE_PART: part})
        else:
            out.append({"type": "unknown"})
    return out, tokens


def rebuild(body: dict[str, Any], view: View, sent: Sequence[Message]) -> dict[str, Any]:
    """The native request for the view messages the chain kept (``sent``, in order)."""
    if unchanged(view, sent):
        return body
    contents: list[Any] = body["contents"]
    units, originals, spans = view.units, view.messages, view.spans
    out: list[Any] = []
    pieces: dict[int, dict[int, Message]] = {}  # content position -> ref -> the kept view message
    slots: dict[int, int] = {}  # content position -> its place in ``out``
    made: list[str] = []
    for message in sent:
        ref = message.get(REF)
        if ref.__class__ is not int:
            text = text_of(message.get("content"))
            if text:
                made.append(text)  # a filter's own message: said in the instruction
            continue
        index = units[ref].index
        if index < 0:
            continue  # the system instruction goes back as it came
        if spans[index + 1] - spans[index] == 1:  # the usual content: one view message
            if message is originals[ref]:
                out.append(contents[index])
                continue
            content = contents[index]
            if units[ref].kind == "result" and len(content["parts"]) == 1:
                out.append(_one_response(content, view, index, message))  # an elided observation
                continue
        held = pieces.get(index)
        if held is None:
            held = pieces[index] = {}
            slots[index] = len(out)
            out.append(None)
        held[ref] = message
    for index, held in pieces.items():
        out[slots[index]] = _native(contents[index], view, index, held)
    if pieces:
        out = [content for content in out if content is not None]
    if out and out[0].get("role") == "model" and (not contents or contents[0].get("role") != "model"):
        out.insert(0, {"role": "user", "parts": [{"text": OMITTED}]})
    rebuilt = {**body, "contents": out}
    if made:
        instruction = body.get("systemInstruction")
        parts = list(instruction.get("parts") or []) if isinstance(instruction, dict) else []
        base = instruction if isinstance(instruction, dict) else {}
        rebuilt["systemInstruction"] = {**base, "parts": [*parts, *({"text": t} for t in made if t)]}
    return rebuilt


def _native(
    content: dict[str, Any], view: View, index: int, kept: dict[int, Message]
) -> dict[str, Any] | None:
    """One content as the chain left the view messages made of it (None: nothing of it is left)."""
    refs = range(view.spans[index], view.spans[index + 1])
    originals = view.messages
    if len(kept) == len(refs) and all(kept[r] is originals[r] for r in refs):
        return content
    parts: list[Any] = content.get("parts") or []
    if len(parts) == 1 and len(refs) == 1 and view.units[refs[0]].kind == "result":
        return _one_response(content, view, index, kept.get(refs[0]))
    if content.get("role") == "model":
        ((ref, after),) = kept.items()
        new_parts = _model_parts(parts, originals[ref], after)
        return {**content, "parts": new_parts} if new_parts else None
    results: dict[int, int] = {}  # part position -> its tool message's ref
    user_ref: int | None = None
    for r in refs:
        unit = view.units[r]
        if unit.kind == "result":
            results[unit.items[0]] = r
        elif unit.kind == "user":
            user_ref = r
    new: list[Any] = []
    for k, part in enumerate(parts):
        result = results.get(k)
        if result is not None:
            if result in kept:
                new.append(_response_part(part, originals[result], kept[result]))
        elif user_ref is None or user_ref in kept:
            new.append(part)
    if user_ref is not None and user_ref in kept and kept[user_ref] is not originals[user_ref]:
        new = _user_parts(new, kept[user_ref])
    return {**content, "parts": new} if new else None


def _one_response(
    content: dict[str, Any], view: View, index: int, after: Message | None
) -> dict[str, Any] | None:
    """A content of one ``functionResponse`` as the chain left its tool message; an elided one written
    back as the last turn wrote it, when it was (the memo keeps the write-back with the view)."""
    if after is None:
        return None
    text = after.get("content")
    done = view.rewritten.get(index)
    if done is None or done[0] != text:
        before = view.messages[view.spans[index]]
        part = _response_part(content["parts"][0], before, after)
        done = view.rewritten[index] = (str(text), {**content, "parts": [part]})
    written: dict[str, Any] = done[1]
    return written


def _response_part(part: dict[str, Any], before: Message, after: Message) -> dict[str, Any]:
    if after is before or after.get("content") == before.get("content"):
        return part
    response = part["functionResponse"]
    was = response.get("response")
    key = next(iter(was)) if isinstance(was, dict) and len(was) == 1 else "output"
    return {**part, "functionResponse": {**response, "response": {key: text_of(after.get("content"))}}}


def _user_parts(parts: list[Any], after: Message) -> list[Any]:
    """The user text a filter rewrote, written over the content's text parts (the first one takes it)."""
    text = text_of(after.get("content"))
    out: list[Any] = []
    placed = False
    for part in parts:
        if isinstance(part, dict) and isinstance(part.get("text"), str) and part.get("thought") is not True:
            if not placed and text:
                out.append({**part, "text": text})
                placed = True
            continue
        out.append(part)
    return out


def _model_parts(parts: list[Any], before: Message, after: Message) -> list[Any]:
    kept_calls = {call.get("id") for call in after.get("tool_calls") or []}
    all_calls = [call.get("id") for call in before.get("tool_calls") or []]
    out: list[Any] = []
    calls_seen = 0
    for part in parts:
        if isinstance(part, dict) and isinstance(part.get("functionCall"), dict):
            call_id = all_calls[calls_seen] if calls_seen < len(all_calls) else None
            calls_seen += 1
            if call_id in kept_calls:
                out.append(part)
            continue
        out.append(part)
    if after.get("content") == before.get("content"):
        return out
    return _user_parts(out, after)
