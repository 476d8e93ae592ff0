"""``sliding_window``: leading system plus the newest ``window_size`` turns (AgentRoute's HistorySlidingWindow)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from history_proxy.core.cost import ANTHROPIC, Pricing
from history_proxy.core.invariants import broken_invariants
from history_proxy.core.messages import Message, leading_system_count, newest_user_index, turn_spans
from history_proxy.core.tokens import TokenCounters
from history_proxy.filters.base import FilterContext
from history_proxy.filters.sliding_window import SlidingWindow
from tests.factories import (
    action,
    assistant,
    call,
    corpus_body,
    corpus_files,
    exchange,
    parallel,
    result,
    system,
    user,
)

CTX = FilterContext(model="gpt-4o")


def window(window_size: int = 20, step: int = 1) -> SlidingWindow:
    return SlidingWindow(type="sliding_window", window_size=window_size, step=step)


def run(messages: list[Message], window_size: int = 20, step: int = 1) -> list[Message]:
    return window(window_size, step).apply(messages, CTX)


def turn(n: int) -> list[Message]:
    """One turn: a question, a tool call with its result, an answer."""
    return [user(f"question {n}"), *exchange("get_weather", f"weather {n}"), assistant(f"answer {n}")]


def chat(turns: int) -> list[Message]:
    return [
        system("You are a helpful support assistant."),
        *(m for n in range(1, turns + 1) for m in turn(n)),
    ]


def turn_count(messages: list[Message]) -> int:
    return len(turn_spans(messages, leading_system_count(messages)))


def turn_of(messages: list[Message], n: int) -> list[Message]:
    start = 1 + (n - 1) * 4
    return messages[start : start + 4]


def questions(messages: list[Message]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "user"]


def test_a_history_of_window_size_turns_or_fewer_is_unchanged() -> None:
    messages = chat(3)
    out = run(messages, window_size=3)
    assert out == messages and out is not messages
    assert all(a is b for a, b in zip(out, messages, strict=True))


def test_leading_system_plus_the_newest_window_size_turns_are_kept() -> None:
    messages = chat(5)
    out = run(messages, window_size=2)
    assert out == [messages[0], *turn_of(messages, 4), *turn_of(messages, 5)]
    assert questions(out) == ["question 4", "question 5"]


def test_keeping_the_last_turn_keeps_all_its_messages_not_just_the_trailing_answer() -> None:
    messages = chat(2)
    out = run(messages, window_size=1)
    assert [m["role"] for m in out] == ["system", "user", "assistant", "tool", "assistant"]


def test_parallel_tool_calls_stay_with_their_turn() -> None:
    messages = [
        system(),
        user("old"),
        assistant("old answer"),
        user("new"),
        *parallel("a", "b", "c"),
        assistant("x"),
    ]
    out = run(messages, window_size=1)
    assert out == [messages[0], *messages[3:]]


def test_messages_before_the_first_user_message_form_the_first_turn() -> None:
    messages = [system(), assistant("Hello! How can I help?"), *chat(2)[1:]]
    assert turn_count(messages) == 3
    assert run(messages, window_size=3) == messages
    assert questions(run(messages, window_size=2)) == ["question 1", "question 2"]
    assert "Hello! How can I help?" not in [m["content"] for m in run(messages, window_size=2)]


def test_only_leading_system_messages_are_kept_apart_a_later_one_belongs_to_its_turn() -> None:
    messages = [
        system("rules"),
        user("q1"),
        system("note about q1"),
        assistant("a1"),
        user("q2"),
        assistant("a2"),
    ]
    assert [m["content"] for m in run(messages, window_size=1)] == ["rules", "q2", "a2"]


def test_an_annotated_task_starts_a_turn_and_an_annotated_observation_does_not() -> None:
    messages = [
        system(),
        user("task"),
        assistant("thought"),
        user("env output", message_type="observation"),
        assistant("delegated", message_type="task"),
        assistant("working"),
    ]
    assert run(messages, window_size=1) == [messages[0], messages[3], messages[4], messages[5]]


def test_the_newest_user_message_stays_when_an_annotated_task_after_it_starts_the_newest_turn() -> None:
    messages = [
        system(),
        user("old"),
        assistant("a"),
        user("newest user"),
        assistant("sub-task", message_type="task"),
    ]
    out = run(messages, window_size=1)
    assert out == [messages[0], messages[3], messages[4]]


def test_reused_call_ids_stay_paired() -> None:
    first = action(call("bash", call_id="call_0"))
    second = action(call("bash", call_id="call_0"))
    messages = [system(), user("q1"), first, result(first, "a"), user("q2"), second, result(second, "b")]
    out = run(messages, window_size=1)
    assert out == [messages[0], *messages[4:]]
    assert broken_invariants(messages, out) == []


def test_text_part_user_messages_start_turns() -> None:
    parts = [{"type": "text", "text": "look at this"}, {"type": "image_url", "image_url": {"url": "data:,"}}]
    messages = [system(), user("q1"), assistant("a1"), {"role": "user", "content": parts}, assistant("a2")]
    assert run(messages, window_size=1) == [messages[0], *messages[3:]]


def test_unknown_fields_are_kept_and_the_input_is_not_mutated() -> None:
    messages = [
        system(x_vendor=1),
        user("q1"),
        assistant("a1"),
        user("q2", name="alice"),
        assistant("a2", refusal=None),
    ]
    snapshot = copy.deepcopy(messages)
    out = run(messages, window_size=1)
    assert messages == snapshot
    assert out[0] is messages[0] and out[1] is messages[3] and out[2] is messages[4]


def test_step_moves_the_window_in_blocks() -> None:
    for turns in range(7, 20):
        kept = turn_count(run(chat(turns), window_size=6, step=3))
        assert 4 <= kept <= 6
        assert (turns - kept) % 3 == 0


def dropped_turns(messages: list[Message], out: list[Message]) -> int:
    return turn_count(messages) - turn_count(out)


def test_step_keeps_the_same_prefix_across_consecutive_requests() -> None:
    messages = chat(30)
    counts: list[int] = []
    breaks: list[int] = []
    previous: list[Message] | None = None
    for length in range(2, len(messages) + 1):
        out = run(messages[:length], window_size=6, step=3)
        counts.append(dropped_turns(messages[:length], out))
        if previous is not None and out[: len(previous)] != previous:
            breaks.append(length)
        previous = out
    assert all(count % 3 == 0 for count in counts)
    assert breaks == [i + 2 for i in range(1, len(counts)) if counts[i] != counts[i - 1]]
    assert len(breaks) == 8  # turns 7, 10, ..., 28 each push the window one block on


def test_with_step_one_the_window_moves_on_every_new_turn() -> None:
    messages = chat(10)
    starts = {questions(run(messages[: 1 + 4 * n], window_size=3))[0] for n in range(3, 11)}
    assert len(starts) == 8


def test_budget_is_none() -> None:
    assert window().budget() is None


@pytest.mark.parametrize("options", [{"window_size": 0}, {"step": 0}, {"window_size": 3, "step": 4}])
def test_invalid_options_are_config_errors(options: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        SlidingWindow(type="sliding_window", **options)


def test_a_step_larger_than_the_window_is_explained() -> None:
    with pytest.raises(ValidationError, match=r"step \(4\) must be <= window_size \(3\)"):
        SlidingWindow(type="sliding_window", window_size=3, step=4)


@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.stem)
@pytest.mark.parametrize("window_size, step", [(1, 1), (3, 1), (5, 2)], ids=["1", "3", "5-step2"])
def test_corpus_output_keeps_the_invariants(path: Path, window_size: int, step: int) -> None:
    messages = corpus_body(path.name)["messages"]
    snapshot = copy.deepcopy(messages)
    out = run(messages, window_size, step)
    assert broken_invariants(messages, out) == []
    assert messages == snapshot
    assert out[: leading_system_count(messages)] == messages[: leading_system_count(messages)]
    newest_user = newest_user_index(messages)
    assert newest_user is None or any(m is messages[newest_user] for m in out)
    before, after = turn_count(messages), turn_count(out)
    assert after == before if before <= window_size else window_size - step + 1 <= after <= window_size


# --- trigger: cost (issue 18) -----------------------------------------------------------------------


def test_with_free_cache_writes_the_cost_trigger_keeps_the_newest_window_size_turns() -> None:
    messages = [system()]
    for k in range(6):
        messages += [user(f"task {k} " + "word " * 400), assistant(f"done {k}")]
    free = FilterContext(tokens=TokenCounters(), pricing=Pricing(name="free", read=1.0, write=1.0))
    cost = SlidingWindow(type="sliding_window", window_size=2, trigger="cost")
    assert cost.apply(messages, free) == SlidingWindow(type="sliding_window", window_size=2).apply(
        messages, free
    )


def test_the_cost_trigger_keeps_old_turns_whose_dropping_does_not_repay_the_rewrite() -> None:
    # three short old turns, then long ones: dropping the short ones would save a few tokens per
    # request and rewrite the long ones in the cache
    messages = [system()]
    for k in range(6):
        messages += [user(f"task {k}" + (" word" * 1000 if k >= 3 else "")), assistant(f"done {k}")]
    ctx = FilterContext(tokens=TokenCounters(), pricing=ANTHROPIC)
    assert (
        SlidingWindow(type="sliding_window", window_size=2, trigger="cost").apply(messages, ctx) == messages
    )


def test_step_and_the_cost_trigger_are_not_combined() -> None:
    with pytest.raises(ValidationError, match="set one of them"):
        SlidingWindow(type="sliding_window", window_size=4, step=2, trigger="cost")
