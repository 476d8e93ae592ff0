"""The invariants every chain output keeps (docs/architecture.md, invariants), as checks that name what broke.

:func:`broken_invariants` is the one source of "newly broken": what an output breaks that its input
did not.
"""

from __future__ import annotations

from collections.abc import Sequence

from history_proxy.core.messages import Message, has_text, is_action, tool_call_ids, tool_calls


def tool_pair_errors(messages: Sequence[Message]) -> list[str]:
    """Violations of invariant 1 (tool messages paired with the nearest preceding tool calls)."""
    errors: list[str] = []
    open_ids: list[str] | None = None  # unanswered call ids of the current action, None outside one
    open_at = -1
    for i, message in enumerate(messages):
        role = message.get("role")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if open_ids is None:
                errors.append(f"messages[{i}]: tool message without a preceding assistant tool call")
            elif call_id not in open_ids:
                errors.append(
                    f"messages[{i}]: tool_call_id {call_id!r} answers no call of messages[{open_at}]"
                )
            else:
                open_ids.remove(call_id)
            continue
        if open_ids:
            errors.append(f"messages[{open_at}]: tool calls {open_ids} not answered before messages[{i}]")
        open_ids = None
        if is_action(message):
            open_ids = tool_call_ids(message)
            open_at = i
    return errors


def empty_assistant_errors(messages: Sequence[Message]) -> list[str]:
    """Violations of invariant 3 (an assistant message keeps text or tool calls)."""
    return [
        f"messages[{i}]: assistant message with neither content nor tool_calls"
        for i, m in enumerate(messages)
        if m.get("role") == "assistant"
        and not tool_calls(m)
        and not has_text(m)
        and not m.get("refusal")
        and not m.get("audio")
        and not m.get("function_call")
    ]


MAX_CACHE_MARKS = 4


def cache_mark_count(messages: Sequence[Message]) -> int:
    """``cache_control`` marks on messages and on their content parts."""
    count = 0
    for message in messages:
        if "cache_control" in message:
            count += 1
        content = message.get("content")
        if isinstance(content, list):
            count += sum(1 for part in content if isinstance(part, dict) and "cache_control" in part)
    return count


def invariant_errors(messages: Sequence[Message]) -> dict[str, list[str]]:
    """Every invariant violation of a message list, by invariant name."""
    marks = cache_mark_count(messages)
    found = {
        "non_empty": [] if messages else ["the message list is empty"],
        "tool_pairs": tool_pair_errors(messages),
        "assistant_content": empty_assistant_errors(messages),
        "cache_marks": [f"{marks} cache_control marks (at most {MAX_CACHE_MARKS})"]
        if marks > MAX_CACHE_MARKS
        else [],
    }
    return {name: errors for name, errors in found.items() if errors}


def invariants_hold(messages: Sequence[Message]) -> bool:
    """``invariant_errors(messages) == {}``, in one pass that stops at the first violation.

    The check a request pays for on every call; :func:`invariant_errors` says what is wrong.
    """
    if not messages:
        return False
    open_ids: list[str] | None = None  # as in tool_pair_errors
    marks = 0
    for message in messages:
        role = message.get("role")
        content = message.get("content")
        if "cache_control" in message:
            marks += 1
        if content.__class__ is not str and isinstance(content, list):
            marks += sum(1 for part in content if isinstance(part, dict) and "cache_control" in part)
        if role == "tool":
            call_id = message.get("tool_call_id")
            if open_ids is None or call_id not in open_ids:
                return False
            open_ids.remove(call_id)
            continue
        if open_ids:
            return False
        open_ids = None
        if role != "assistant":
            continue
        calls = message.get("tool_calls")
        if isinstance(calls, list) and calls:
            # most actions make one call: skip the comprehension's own frame for them
            open_ids = (
                [str(calls[0].get("id"))] if len(calls) == 1 else [str(call.get("id")) for call in calls]
            )
        elif not (
            (content.strip() if isinstance(content, str) else has_text(message))
            or message.get("refusal")
            or message.get("audio")
            or message.get("function_call")
        ):
            return False
    return marks <= MAX_CACHE_MARKS


def broken_invariants(before: Sequence[Message], after: Sequence[Message]) -> list[str]:
    """Invariants that ``before`` satisfied and ``after`` breaks, as readable lines.

    An input that already broke an invariant is not held to it (the upstream judges such input).
    """
    already = invariant_errors(before)
    return [
        f"{name}: {error}"
        for name, errors in invariant_errors(after).items()
        if name not in already
        for error in errors[:3]
    ]
