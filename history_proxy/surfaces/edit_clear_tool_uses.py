"""``clear_tool_uses_20250919`` emulated: the oldest tool results replaced by a placeholder.

Anthropic's semantics: once the request passes ``trigger`` (``input_tokens``, default 100,000, or
``tool_uses``: that many tool uses in the request), the results of every tool use but the newest
``keep`` (``tool_uses``, default 3) are cleared, oldest first, skipping tools named in
``exclude_tools``; with ``clear_tool_inputs: true`` their ``tool_use`` inputs are emptied too.
``clear_at_least`` (``input_tokens``) is a gate: when clearing would free fewer tokens, nothing is
cleared (a cleared prefix that moves by a few tokens would cost a prompt-cache write for nothing).

Blocks are rewritten, never removed: every ``tool_use`` keeps its id and its ``tool_result``, so the
pairs stay whole and the request stays valid. A result cleared before is not counted again. Inputs of
the current turn's tool uses stay when that turn carries a thinking block (the upstream checks it).

```json
{"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 30000},
 "keep": {"type": "tool_uses", "value": 3}, "clear_at_least": {"type": "input_tokens", "value": 5000}}
```
"""

from __future__ import annotations

from typing import Any

from history_proxy.surfaces.edit_common import (
    THINKING_BLOCKS,
    EditInput,
    blocks,
    current_turn_start,
    text_tokens,
    value_of,
)

TYPE = "clear_tool_uses_20250919"
PLACEHOLDER = "[tool result cleared to save context]"
DEFAULT_TRIGGER = 100_000
DEFAULT_KEEP = 3

Use = tuple[int, int, str, str]
"""A tool use: its message, its block, its id, its tool's name."""


def _uses(messages: list[Any]) -> tuple[list[Use], dict[str, tuple[int, int]]]:
    """Every tool use in order, and where each call id's result is."""
    uses: list[Use] = []
    results: dict[str, tuple[int, int]] = {}
    for m, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        for b, block in enumerate(blocks(message)):
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if role == "assistant" and kind == "tool_use":
                uses.append((m, b, str(block.get("id")), str(block.get("name"))))
            elif role == "user" and kind == "tool_result":
                results[str(block.get("tool_use_id"))] = (m, b)
    return uses, results


def _triggered(edit: dict[str, Any], env: EditInput, uses: int) -> bool:
    trigger = edit.get("trigger")
    if isinstance(trigger, dict) and trigger.get("type") == "tool_uses":
        return uses >= value_of(trigger, "tool_uses", 0)
    return env.input_tokens >= value_of(trigger, "input_tokens", DEFAULT_TRIGGER)


def _protected(messages: list[Any]) -> set[int]:
    """Assistant messages of the current turn that carry a thinking block: their inputs stay."""
    start = current_turn_start(messages)
    return {
        m
        for m in range(start, len(messages))
        if any(isinstance(b, dict) and b.get("type") in THINKING_BLOCKS for b in blocks(messages[m]))
    }


def apply(
    edit: dict[str, Any], messages: list[Any], env: EditInput
) -> tuple[list[Any], dict[str, Any] | None]:
    """``messages`` with the edit applied, and its ``applied_edits`` entry (``None``: not applied)."""
    uses, results = _uses(messages)
    if not uses or not _triggered(edit, env, len(uses)):
        return messages, None
    excluded = edit.get("exclude_tools")
    excluded = {str(name) for name in excluded} if isinstance(excluded, list) else set()
    eligible = [use for use in uses if use[3] not in excluded]
    keep = value_of(edit.get("keep"), "tool_uses", DEFAULT_KEEP)
    older = eligible[: max(0, len(eligible) - keep)]
    clear_inputs = edit.get("clear_tool_inputs") is True
    protected = _protected(messages) if clear_inputs else set()
    changes: dict[tuple[int, int], dict[str, Any]] = {}
    cleared_uses, cleared_tokens = 0, 0
    for m, b, call_id, _ in older:
        freed = 0
        where = results.get(call_id)
        if where is not None:
            result = messages[where[0]]["content"][where[1]]
            if result.get("content") != PLACEHOLDER:
                freed += text_tokens(result.get("content"), env.tokens)
                changes[where] = {**result, "content": PLACEHOLDER}
        use = messages[m]["content"][b]
        if clear_inputs and m not in protected and use.get("input") not in ({}, None):
            freed += text_tokens(use.get("input"), env.tokens)
            changes[(m, b)] = {**use, "input": {}}
        if freed:
            cleared_uses += 1
            cleared_tokens += freed
    at_least = value_of(edit.get("clear_at_least"), "input_tokens", 0)
    if not changes or cleared_tokens < at_least:
        return messages, None
    return _rewritten(messages, changes), {
        "type": TYPE,
        "cleared_tool_uses": cleared_uses,
        "cleared_input_tokens": cleared_tokens,
    }


def _rewritten(messages: list[Any], changes: dict[tuple[int, int], dict[str, Any]]) -> list[Any]:
    """``messages`` with the changed blocks in place (changed messages copied, the others shared)."""
    out = list(messages)
    contents: dict[int, list[Any]] = {}
    for (m, b), block in changes.items():
        content = contents.get(m)
        if content is None:
            content = contents[m] = list(messages[m]["content"])
        content[b] = block
    for m, content in contents.items():
        out[m] = {**messages[m], "content": content}
    return out
