"""Chat conversations written as Responses and Messages requests, and each API's validity rules, for tests.

``responses_body`` and ``messages_body`` convert a chat ``messages`` list into the other surface's
request, optionally adding what only that surface has (reasoning and server tool items, thinking and
server tool blocks, a compaction item), so property tests can compare the chain's decisions across
surfaces. ``responses_errors`` and ``messages_errors`` list what the API would reject.
"""

from __future__ import annotations

import json
from typing import Any

from history_proxy.core.messages import ANNOTATION_KEYS, Message, leading_system_count, text_of
from history_proxy.core.tokens import TokenCounter
from history_proxy.surfaces._view import View, compact_json

VENDOR_KEYS = frozenset({"name", "reasoning_content", "refusal", "audio"})
PNG = "iVBORw0KGgo="


def plain_chat(messages: list[Message]) -> list[Message]:
    """The conversation without annotations or vendor keys, tool arguments in compact JSON.

    What every surface can say.
    """
    out: list[Message] = []
    for message in messages:
        plain = {k: v for k, v in message.items() if k not in ANNOTATION_KEYS and k not in VENDOR_KEYS}
        if "tool_calls" in plain:
            plain["tool_calls"] = [
                {
                    **call,
                    "function": {
                        **call["function"],
                        "arguments": compact_json(json.loads(call["function"]["arguments"])),
                    },
                }
                for call in plain["tool_calls"]
            ]
        out.append(plain)
    return out


def anthropic_chat(messages: list[Message]) -> list[Message]:
    """:func:`plain_chat` with one leading system message at most and no other (the Messages API has no system role)."""
    plain = plain_chat(messages)
    lead = leading_system_count(plain)
    system = (
        [{"role": "system", "content": "\n".join(text_of(m.get("content")) for m in plain[:lead])}]
        if lead
        else []
    )
    rest = [m for m in plain[lead:] if m.get("role") not in ("system", "developer")]
    if rest and rest[0].get("role") != "user":  # the Messages API opens with a user message
        rest.insert(0, {"role": "user", "content": "Begin."})
    return [*system, *rest]


def _parts(content: Any, text_type: str, image: Any) -> Any:
    if not isinstance(content, list):
        return content
    return [
        {"type": text_type, "text": part["text"]} if part.get("type") == "text" else image(part)
        for part in content
    ]


def responses_body(
    messages: list[Message], extras: list[int] | None = None, compaction: bool = False
) -> dict[str, Any]:
    """The conversation as a Responses request; ``extras[k]`` adds a reasoning item (1), a server tool
    item (2) or both (3) to the k-th assistant step."""

    def image(part: Any) -> Any:
        return {"type": "input_image", "image_url": part["image_url"]["url"], "detail": "auto"}

    items: list[dict[str, Any]] = (
        [{"type": "compaction", "id": "cmp_1", "encrypted_content": "enc"}] if compaction else []
    )
    step = 0
    previous: Message = {}
    for message in messages:
        role = message["role"]
        # a step that follows an assistant text directly needs a boundary (a reasoning item) to stay a step
        boundary = (
            role == "assistant" and previous.get("role") == "assistant" and not previous.get("tool_calls")
        )
        previous = message
        if role == "tool":
            output = _parts(message.get("content"), "input_text", image)
            items.append(
                {"type": "function_call_output", "call_id": message["tool_call_id"], "output": output}
            )
        elif role == "assistant":
            extra = extras[step % len(extras)] if extras else 0
            step += 1
            if extra & 1 or boundary:
                items.append(
                    {
                        "type": "reasoning",
                        "id": f"rs_{step}",
                        "summary": [],
                        "encrypted_content": f"sig{step}",
                    }
                )
            if extra & 2:
                items.append(
                    {
                        "type": "web_search_call",
                        "id": f"ws_{step}",
                        "status": "completed",
                        "action": {"type": "search"},
                    }
                )
            content = message.get("content")
            if content:
                items.append({"role": "assistant", "content": _parts(content, "output_text", image)})
            for call in message.get("tool_calls") or []:
                function = call["function"]
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call["id"],
                        "name": function["name"],
                        "arguments": function["arguments"],
                    }
                )
        else:
            items.append({"role": role, "content": _parts(message.get("content"), "input_text", image)})
    return {"model": "gpt-4o", "input": items}


def messages_body(messages: list[Message], extras: list[int] | None = None) -> dict[str, Any]:
    """An :func:`anthropic_chat` conversation as a Messages request; ``extras[k]`` adds a signed thinking
    block (1), a server tool use with its result (2) or both (3) to the k-th assistant message."""

    def image(part: Any) -> Any:
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": PNG},
        }

    body: dict[str, Any] = {"model": "claude-x", "max_tokens": 1024}
    out: list[dict[str, Any]] = []
    step = 0
    for message in messages:
        role, content = message["role"], message.get("content")
        if role == "system":
            body["system"] = text_of(content)
        elif role == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": message["tool_call_id"],
                "content": _parts(content, "text", image),
            }
            if out and out[-1]["role"] == "user" and out[-1].get("results"):
                out[-1]["content"].append(block)
            else:
                out.append({"role": "user", "content": [block], "results": True})
        elif role == "assistant":
            extra = extras[step % len(extras)] if extras else 0
            step += 1
            blocks: list[dict[str, Any]] = []
            if extra & 1:
                blocks.append({"type": "thinking", "thinking": f"thought {step}", "signature": f"sig{step}"})
            if extra & 2:
                blocks.append(
                    {
                        "type": "server_tool_use",
                        "id": f"srvtoolu_{step}",
                        "name": "web_search",
                        "input": {"query": "q"},
                    }
                )
                blocks.append(
                    {"type": "web_search_tool_result", "tool_use_id": f"srvtoolu_{step}", "content": []}
                )
            text = _parts(content, "text", image)
            if isinstance(text, str) and text:
                blocks.append({"type": "text", "text": text})
            elif isinstance(text, list):
                blocks += text
            for call in message.get("tool_calls") or []:
                function = call["function"]
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call["id"],
                        "name": function["name"],
                        "input": json.loads(function["arguments"]),
                    }
                )
            out.append({"role": "assistant", "content": blocks or ""})
        else:
            out.append({"role": "user", "content": _parts(content, "text", image)})
    body["messages"] = [{k: v for k, v in m.items() if k != "results"} for m in out]
    return body


def gemini_body(messages: list[Message]) -> dict[str, Any]:
    """:func:`anthropic_chat`'s conversation as a Gemini ``generateContent`` request: the system message as
    ``systemInstruction``, assistant messages as ``model`` contents (text, then ``functionCall`` parts),
    each run of tool results as one ``user`` content of ``functionResponse`` parts (``{"output": text}``)."""
    chat = anthropic_chat(messages)
    body: dict[str, Any] = {"contents": []}
    names: dict[str, str] = {}
    contents: list[dict[str, Any]] = body["contents"]
    for message in chat:
        role, text = message["role"], text_of(message.get("content"))
        if role == "system":
            body["systemInstruction"] = {"parts": [{"text": text}]}
        elif role == "assistant":
            parts: list[dict[str, Any]] = [{"text": text}] if text else []
            for call in message.get("tool_calls") or []:
                names[call["id"]] = call["function"]["name"]
                args = json.loads(call["function"]["arguments"] or "{}")
                parts.append(
                    {"functionCall": {"name": call["function"]["name"], "args": args, "id": call["id"]}}
                )
            contents.append({"role": "model", "parts": parts or [{"text": "..."}]})
        elif role == "tool":
            call_id = message["tool_call_id"]
            answer = {
                "functionResponse": {
                    "name": names.get(call_id, "tool"),
                    "id": call_id,
                    "response": {"output": text},
                }
            }
            if (
                contents
                and contents[-1]["role"] == "user"
                and "functionResponse" in contents[-1]["parts"][-1]
            ):
                contents[-1]["parts"].append(answer)
            else:
                contents.append({"role": "user", "parts": [answer]})
        else:
            contents.append({"role": "user", "parts": [{"text": text or "..."}]})
    return body


def responses_errors(body: dict[str, Any]) -> list[str]:
    """What the Responses API would reject in a stateless request's ``input``."""
    items = body["input"]
    if isinstance(items, str):
        return []
    errors: list[str] = []
    if not items:
        errors.append("empty input")
    calls: dict[str, int] = {}
    for i, item in enumerate(items):
        kind = item.get("type", "message")
        if kind in ("function_call", "custom_tool_call"):
            calls[item["call_id"]] = i
        elif kind.endswith("_output") and item.get("call_id") not in calls:
            errors.append(f"input[{i}]: output for unknown call {item.get('call_id')}")
        elif kind == "reasoning":
            following = items[i + 1] if i + 1 < len(items) else None
            if (
                following is None
                or following.get("type", "message")
                not in ("message", "function_call", "custom_tool_call", "web_search_call", "reasoning")
                or following.get("role", "assistant") != "assistant"
            ):
                errors.append(f"input[{i}]: reasoning without its following item")
    answered = {item.get("call_id") for item in items if item.get("type", "").endswith("_output")}
    last_output = max(
        (
            i
            for i, item in enumerate(items)
            if item.get("type", "").endswith("_output") or item.get("role") in ("user", "system", "developer")
        ),
        default=-1,
    )
    for call_id, at in calls.items():
        if call_id not in answered and at < last_output:
            errors.append(f"call {call_id} has no output")
    return errors


def messages_errors(body: dict[str, Any]) -> list[str]:
    """What the Messages API would reject (roles, tool pairing, empty content, thinking, cache marks)."""
    messages = body["messages"]
    errors: list[str] = []
    if not messages or messages[0]["role"] != "user":
        errors.append("the first message must be a user message")
    marks = 0
    for i, message in enumerate(messages):
        content = message["content"]
        if content in ("", []):
            errors.append(f"messages[{i}]: empty content")
        blocks = content if isinstance(content, list) else []
        marks += sum(1 for b in blocks if b.get("cache_control"))
        kinds = [b.get("type") for b in blocks]
        if message["role"] == "assistant":
            if blocks and set(kinds) <= {"thinking", "redacted_thinking"}:
                errors.append(f"messages[{i}]: thinking alone")
            uses = [b["id"] for b in blocks if b.get("type") == "tool_use"]
            following = messages[i + 1] if i + 1 < len(messages) else None
            if uses and following is not None:
                answered = [
                    b.get("tool_use_id")
                    for b in following["content"]
                    if isinstance(following["content"], list) and b.get("type") == "tool_result"
                ]
                if following["role"] != "user" or sorted(answered) != sorted(uses):
                    errors.append(
                        f"messages[{i}]: tool_use {uses} not answered by the next message ({answered})"
                    )
        else:
            results = [k for k, kind in enumerate(kinds) if kind == "tool_result"]
            if results and results != list(range(len(results))):
                errors.append(f"messages[{i}]: tool_result blocks must come first")
            if results:
                previous = messages[i - 1] if i else None
                uses = (
                    [b.get("id") for b in previous["content"] if b.get("type") == "tool_use"]
                    if previous and isinstance(previous["content"], list)
                    else []
                )
                for k in results:
                    if blocks[k].get("tool_use_id") not in uses:
                        errors.append(
                            f"messages[{i}]: tool_result for {blocks[k].get('tool_use_id')} without its tool_use"
                        )
    for tool in body.get("tools") or []:
        marks += 1 if tool.get("cache_control") else 0
    system = body.get("system")
    if isinstance(system, list):
        marks += sum(1 for b in system if b.get("cache_control"))
    if marks > 4:
        errors.append(f"{marks} cache_control marks (at most 4)")
    return errors


def miscounted(view: View, counter: TokenCounter) -> list[int]:
    """The view messages whose count, taken while the view was built, is not the pipeline's own.

    A count must be what :meth:`TokenCounter.each_plain` gives the message (which also says it is of
    the plain shape, so the pipeline may skip checking it); None leaves the message to the pipeline.
    """
    assert len(view.counts) == len(view.messages)
    fresh = counter.for_request()
    return [
        i
        for i, (message, tokens) in enumerate(zip(view.messages, view.counts, strict=True))
        if tokens is not None and fresh.each_plain([message]) != [tokens]
    ]
