"""Re-fetches: the live signal that a chain hid something the agent needed (docs/cost.md, evidence kept).

A *re-fetch* is a tool call whose name and arguments equal an earlier call whose output the chain
elided or dropped: the agent asks again for what it had read. The proxy cannot see the model's next
answer, but each request carries the calls of the step before it, so it counts them there: the calls of
the newest assistant step whose results end the request, each matched against the earlier calls of the
same history whose results the chain's output no longer holds as they were (dropped, or content
changed). A pure function of the request and the chain's output, so every replica counts alike.

It is an approximation: the earlier output is judged hidden in this request's output, which for a
boundary that moved on this very request may differ from what the agent saw one request before.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from history_proxy.core.messages import Message, tool_calls

REFETCH_NOTE = "refetch:"
"""The note (``x-history-notes``, report, access line) that carries the count: ``refetch:2``."""


def _signature(call: Any) -> tuple[str, str] | None:
    """A call's name and its arguments normalised (JSON re-encoded with sorted keys when it parses)."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict):
        return None
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return str(function.get("name")), arguments
    return str(function.get("name")), json.dumps(arguments, sort_keys=True, ensure_ascii=False)


def _newest_step(messages: Sequence[Message]) -> int | None:
    """The index of the newest assistant message with tool calls when only its results follow it."""
    for i in range(len(messages) - 1, -1, -1):
        role = messages[i].get("role")
        if role == "assistant" and tool_calls(messages[i]):
            return i if i < len(messages) - 1 else None
        if role != "tool":
            return None
    return None


def refetches(before: Sequence[Message], after: Sequence[Message]) -> int:
    """How many calls of ``before``'s newest step repeat an earlier call whose output ``after`` hid."""
    step = _newest_step(before)
    if step is None:
        return 0
    results = {m.get("tool_call_id"): m.get("content") for m in before[:step] if m.get("role") == "tool"}
    shown = {m.get("tool_call_id"): m.get("content") for m in after if m.get("role") == "tool"}
    hidden: set[tuple[str, str]] = set()
    for message in before[:step]:
        for call in tool_calls(message) if message.get("role") == "assistant" else ():
            key = call.get("id") if isinstance(call, dict) else None
            if key not in results or (key in shown and shown[key] == results[key]):
                continue  # its output is shown as it was: no need to read its arguments
            signature = _signature(call)
            if signature is not None:
                hidden.add(signature)
    return sum(1 for call in tool_calls(before[step]) if _signature(call) in hidden)


def refetch_notes(before: Sequence[Message], after: Sequence[Message]) -> list[str]:
    """``["refetch:N"]`` when the newest step re-fetched N hidden outputs, else nothing."""
    count = refetches(before, after)
    return [f"{REFETCH_NOTE}{count}"] if count else []


def refetch_count(notes: Iterable[str] | None) -> int:
    """The count a ``refetch:N`` note carries (0 without one)."""
    for note in notes or ():
        if note.startswith(REFETCH_NOTE) and note[len(REFETCH_NOTE) :].isdigit():
            return int(note[len(REFETCH_NOTE) :])
    return 0
