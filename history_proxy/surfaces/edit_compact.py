"""``compact_20260112`` emulated: the conversation summarised into a ``compaction`` block.

Anthropic's semantics: once the request passes ``trigger`` (``input_tokens``, default 150,000, at
least 50,000), the conversation is summarised (``instructions`` replaces the summary prompt), the
answer opens with a ``{"type": "compaction", "content": SUMMARY}`` block, and the model answers from
the summary. The client appends the whole answer to its history; on later requests everything before
the newest ``compaction`` block is dropped and the block stands for it. With
``pause_after_compaction: true`` the answer is the block alone, ``stop_reason: "compaction"``, and the
client sends the request again to go on.

Emulated, this module is the pure part: :func:`expanded` replaces everything before the newest
``compaction`` block with a user message holding its summary (the block round-trips verbatim: the
client keeps what it got; the upstream, which does not know the block, never sees it), :func:`due`
says whether the edit fires, and :func:`compacted` is the request sent once the summary is written.
The summary itself is written by the proxy's summaries machinery
(:mod:`history_proxy.server.context_standards`: the ``summarize`` filter's cached, tenant-keyed
summarizer).

```json
{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 150000},
 "pause_after_compaction": false, "instructions": "Keep every file path."}
```
"""

from __future__ import annotations

from typing import Any

from history_proxy.surfaces.edit_common import EditInput, blocks, value_of

TYPE = "compact_20260112"
BETA = "compact-2026-01-12"
"""The ``anthropic-beta`` value Anthropic's API asks for with this edit."""
DEFAULT_TRIGGER = 150_000
MIN_TRIGGER = 50_000
OPENING = "Summary of the conversation before this point (compacted):\n\n"
PROMPT = (
    "Summarise the conversation above so that it can continue from the summary alone: the task, "
    "what was done and found (file paths, identifiers, numbers, errors, decisions), and what remains "
    "to do next. Write only the summary."
)


def expanded(messages: list[Any]) -> list[Any]:
    """``messages`` with everything before the newest ``compaction`` block replaced by its summary (a
    user message), and the block itself left out; ``messages`` itself when it holds none."""
    found = _newest(messages)
    if found is None:
        return messages
    m, at = found
    content = blocks(messages[m])
    summary = content[at].get("content")
    text = {"type": "text", "text": OPENING + (summary if isinstance(summary, str) else "")}
    rest = content[at + 1 :]
    later = messages[m + 1 :]
    if rest:
        return [{"role": "user", "content": [text]}, {**messages[m], "content": rest}, *later]
    if later and isinstance(later[0], dict) and later[0].get("role") == "user":
        first = later[0]["content"]
        opening = [{"type": "text", "text": first}] if isinstance(first, str) else list(blocks(later[0]))
        if not any(isinstance(b, dict) and b.get("type") == "tool_result" for b in opening):
            return [{**later[0], "content": [text, *opening]}, *later[1:]]
    return [{"role": "user", "content": [text]}, *later]


def _newest(messages: list[Any]) -> tuple[int, int] | None:
    """Where the newest ``compaction`` block is (message, block): one pass over assistant blocks, the
    walk every request carrying ``context_management`` pays (Claude Code's do)."""
    for m in range(len(messages) - 1, -1, -1):
        message = messages[m]
        if message.__class__ is not dict or message.get("role") != "assistant":
            continue
        content = message.get("content")
        if content.__class__ is not list:
            continue
        for b in range(len(content) - 1, -1, -1):
            block = content[b]
            if block.__class__ is dict and block.get("type") == "compaction":
                return m, b
    return None


def due(edit: dict[str, Any], env: EditInput) -> bool:
    """The request has passed the edit's trigger."""
    trigger = max(MIN_TRIGGER, value_of(edit.get("trigger"), "input_tokens", DEFAULT_TRIGGER))
    return env.input_tokens >= trigger


def prompt_of(edit: dict[str, Any]) -> str:
    """The summary prompt: the edit's ``instructions``, else the proxy's."""
    instructions = edit.get("instructions")
    return instructions if isinstance(instructions, str) and instructions.strip() else PROMPT


def compacted(summary: str) -> list[dict[str, Any]]:
    """The messages sent once the conversation is summarised: the summary alone."""
    return [{"role": "user", "content": [{"type": "text", "text": OPENING + summary}]}]


def block(summary: str) -> dict[str, Any]:
    """The ``compaction`` block the answer opens with."""
    return {"type": "compaction", "content": summary}
