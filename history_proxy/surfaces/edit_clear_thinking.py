"""``clear_thinking_20251015`` emulated: thinking blocks of older assistant turns left out.

Anthropic's semantics: the thinking blocks of every assistant turn but the newest ``keep``
(``{"type": "thinking_turns", "value": N}``, default 1) are removed; ``keep: "all"`` removes none.

Never touching a signed block the upstream will check: the thinking blocks of the current turn (the
tool loop after the newest user message that is not only tool results) always stay, whatever
``keep`` says, and a block is removed whole, never edited. An assistant message that holds nothing
but thinking stays as it is (removing its blocks would leave it empty). With thinking not enabled the
edit still applies here (Anthropic answers 400 to it; an emulating proxy has no reason to).

```json
{"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 2}}
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

TYPE = "clear_thinking_20251015"
DEFAULT_KEEP = 1


def _thinking(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") in THINKING_BLOCKS


def apply(
    edit: dict[str, Any], messages: list[Any], env: EditInput
) -> tuple[list[Any], dict[str, Any] | None]:
    """``messages`` with the edit applied, and its ``applied_edits`` entry (``None``: not applied)."""
    keep_setting = edit.get("keep")
    if keep_setting == "all":
        return messages, None
    keep = value_of(keep_setting, "thinking_turns", DEFAULT_KEEP)
    turns = [
        m
        for m, message in enumerate(messages)
        if isinstance(message, dict)
        and message.get("role") == "assistant"
        and any(_thinking(b) for b in blocks(message))
    ]
    older = turns[: max(0, len(turns) - keep)]
    start = current_turn_start(messages)
    out = list(messages)
    cleared_turns, cleared_tokens = 0, 0
    for m in older:
        if m >= start:
            continue  # the current turn's thinking: the upstream checks its signature
        content = blocks(messages[m])
        kept = [b for b in content if not _thinking(b)]
        if not kept:
            continue
        out[m] = {**messages[m], "content": kept}
        cleared_turns += 1
        cleared_tokens += sum(
            text_tokens(b.get("thinking") or b.get("data") or "", env.tokens) for b in content if _thinking(b)
        )
    if not cleared_turns:
        return messages, None
    return out, {
        "type": TYPE,
        "cleared_thinking_turns": cleared_turns,
        "cleared_input_tokens": cleared_tokens,
    }
