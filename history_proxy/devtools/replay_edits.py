"""A client's Messages context edits emulated on a replayed chat conversation (``replay --client-edits``).

Claude Code and other Anthropic clients send ``context_management`` edits; behind an upstream that
does not apply them, the proxy does (docs/surfaces.md, context standards). To put their cost and
evidence on the same frontier as the chains, ``replay`` can apply them after the chain, on every
request, as the proxy would: :func:`with_client_edits` writes the chat messages the chain sent as a
Messages request (assistant tool calls as ``tool_use`` blocks, tool messages as ``tool_result`` blocks
of one user message), applies the edits with the proxy's own modules
(:func:`history_proxy.surfaces.context_management.manage`), and writes back only what they changed
(a cleared result's text, an emptied call's arguments): every other message stays the object the
chain sent, so the prefix and evidence measures compare like with like. Chat messages carry no
thinking blocks, so ``clear_thinking_20251015`` has nothing to clear here; ``compact_20260112`` needs
a model call and is not replayed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from history_proxy.core.messages import Message
from history_proxy.surfaces.context_management import manage
from history_proxy.surfaces.edit_common import EditInput

Place = tuple[int, int | None]
"""Where a native block came from: the chat message, and the tool call within it (``None``: a result)."""


def _native(messages: list[Message]) -> tuple[list[dict[str, Any]], dict[tuple[int, int], Place]]:
    """The chat messages as Messages ``messages`` (system messages left out), and where each
    ``tool_use`` / ``tool_result`` block came from."""
    out: list[dict[str, Any]] = []
    places: dict[tuple[int, int], Place] = {}
    for i, message in enumerate(messages):
        role = message.get("role")
        if role == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": str(message.get("tool_call_id")),
                "content": message.get("content") or "",
            }
            if out and out[-1]["role"] == "user" and out[-1].get("_results"):
                out[-1]["content"].append(block)
            else:
                out.append({"role": "user", "content": [block], "_results": True})
            places[(len(out) - 1, len(out[-1]["content"]) - 1)] = (i, None)
        elif role == "assistant":
            content = message.get("content")
            blocks: list[dict[str, Any]] = (
                [{"type": "text", "text": content}] if isinstance(content, str) and content else []
            )
            for k, call in enumerate(message.get("tool_calls") or []):
                function = call.get("function") or {}
                try:
                    arguments = json.loads(function.get("arguments") or "{}")
                except ValueError:
                    arguments = {"arguments": function.get("arguments")}
                places[(len(out), len(blocks))] = (i, k)
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": str(call.get("id")),
                        "name": str(function.get("name")),
                        "input": arguments,
                    }
                )
            out.append({"role": "assistant", "content": blocks or "(no content)"})
        elif role == "user":
            out.append({"role": "user", "content": message.get("content") or ""})
    return [{k: v for k, v in m.items() if k != "_results"} for m in out], places


def with_client_edits(
    messages: list[Message], edits: list[dict[str, Any]], tokens: Callable[[str], int], input_tokens: int
) -> tuple[list[Message], list[dict[str, Any]]]:
    """``messages`` (what the chain sent) with the client's ``edits`` applied as the proxy emulates them,
    and the ``applied_edits`` the answer would carry."""
    natives, places = _native(messages)
    body = {"messages": natives, "context_management": {"edits": edits}}
    managed = manage(body, "emulate", lambda _: EditInput(input_tokens=input_tokens, tokens=tokens))
    edited = managed.body["messages"]
    out = list(messages)
    for (m, b), (i, k) in places.items():
        after, before = edited[m]["content"][b], natives[m]["content"][b]
        if after == before:
            continue
        if k is None:
            out[i] = {**out[i], "content": after.get("content")}
        else:
            calls = list(out[i].get("tool_calls") or [])
            function = {
                **calls[k]["function"],
                "arguments": json.dumps(after.get("input"), separators=(",", ":")),
            }
            calls[k] = {**calls[k], "function": function}
            out[i] = {**out[i], "tool_calls": calls}
    return out, managed.applied or []
