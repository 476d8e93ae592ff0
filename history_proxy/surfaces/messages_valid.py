"""A rebuilt Messages request kept valid for Anthropic when a filter emptied some of its text.

Anthropic refuses a text block whose text is empty or whitespace, and a request whose last message is
an assistant message is read as a prefill (the model continues it). A filter that removes text (the
global ``remove_regex`` secret filter, say) can leave both behind. :func:`valid_for_messages` cleans
the messages the chain changed (and ``system``):

- a text block left empty or blank is removed, also inside a ``tool_result``'s content (a tool result
  left with nothing says :data:`REMOVED` instead: the block and its pairing stay);
- a message left with no content is removed; ``tool_use`` and ``tool_result`` blocks are never
  removed here, so every call keeps its result and the pairing rules hold;
- when the client's request ended with a user message and the cleaned one does not, a user message
  saying :data:`REMOVED` closes it, so the request never becomes an accidental prefill.

Messages the chain left as they came are not touched (never stricter than the upstream). Cache
marks are placed after this, so they never land on a removed block (nor on thinking blocks:
:data:`history_proxy.surfaces.marks.UNMARKABLE`).
"""

from __future__ import annotations

from typing import Any

REMOVED = "(removed by history-proxy)"
"""The text standing for content the chain removed entirely, where something must stay."""


def valid_for_messages(body: dict[str, Any], rebuilt: dict[str, Any]) -> dict[str, Any]:
    """``rebuilt`` (the native request after the chain) with emptied blocks and messages removed."""
    if rebuilt is body:
        return rebuilt
    natives: list[Any] = body["messages"]
    kept = {id(message) for message in natives}
    messages = []
    for message in rebuilt["messages"]:
        if id(message) not in kept:
            message = _cleaned(message)
        if message is not None:
            messages.append(message)
    if natives and natives[-1].get("role") == "user" and (not messages or messages[-1].get("role") != "user"):
        messages.append({"role": "user", "content": [{"type": "text", "text": REMOVED}]})
    out = {**rebuilt, "messages": messages}
    system = out.get("system")
    if system is not None and system is not body.get("system"):
        system = _content(system)
        if system is None:
            out.pop("system")
        else:
            out["system"] = system
    return out


def _cleaned(message: Any) -> Any:
    """``message`` without emptied text (None: nothing left)."""
    if not isinstance(message, dict):
        return message
    content = _content(message.get("content"))
    if content is None:
        return None
    return message if content is message.get("content") else {**message, "content": content}


def _content(content: Any) -> Any:
    """Content without empty text blocks (the same object when it had none; None when nothing is left)."""
    if isinstance(content, str):
        return content if content.strip() else None
    if not isinstance(content, list):
        return content
    blocks = []
    for block in content:
        if _blank_text(block):
            continue
        if (
            isinstance(block, dict)
            and block.get("type") == "tool_result"
            and isinstance(block.get("content"), list)
        ):
            inner = [part for part in block["content"] if not _blank_text(part)]
            if len(inner) != len(block["content"]):
                block = {**block, "content": inner or [{"type": "text", "text": REMOVED}]}
        blocks.append(block)
    if not blocks:
        return None
    same = len(blocks) == len(content) and all(a is b for a, b in zip(blocks, content, strict=True))
    return content if same else blocks


def _blank_text(block: Any) -> bool:
    return (
        isinstance(block, dict)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
        and not block["text"].strip()
    )
