"""``truncate``: leading system plus the newest turns that fit ``max_tokens`` (AgentRoute's HistoryTruncate)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from history_proxy.core.invariants import broken_invariants
from history_proxy.core.messages import Message, leading_system_count, newest_user_index, turn_spans
from history_proxy.core.tokens import TokenCounters
from history_proxy.filters.base import FilterContext
from history_proxy.filters.truncate import Truncate
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

COUNTERS = TokenCounters()
CTX = FilterContext(model="gpt-4o", tokens=COUNTERS)
TOKENS = COUNTERS.get(model="gpt-4o")


def truncate(max_tokens: int, step: int = 1) -> Truncate:
    return Truncate(type="truncate", max_tokens=max_tokens, step=step)


def run(messages: list[Message], max_tokens: int, step: int = 1, ctx: FilterContext = CTX) -> list[Message]:
    return truncate(max_tokens, step).apply(messages, ctx)


def turn(n: int, output: str = "weather report " * 10) -> list[Message]:
    return [user(f"question {n}"), *exchange("get_weather", output), assistant(f"answer {n}")]


def chat(turns: int) -> list[Message]:
    return [system("You are a research assistant."), *(m for n in range(1, turns + 1) for m in turn(n))]


def turn_count(messages: list[Message]) -> int:
    return len(turn_spans(messages, leading_system_count(messages)))


def questions(messages: list[Message]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "user"]


def newest_turn_only(messages: list[Message]) -> list[Message]:
    lead = leading_system_count(messages)
    spans = turn_spans(messages, lead)
    start = spans[-1][0] if spans else len(messages)  # only system messages: no turn to keep
    newest_user = newest_user_index(messages)
    pinned = [messages[newest_user]] if newest_user is not None and lead <= newest_user < start else []
    return [*messages[:lead], *pinned, *messages[start:]]


def test_a_history_within_the_budget_is_unchanged() -> None:
    messages = chat(4)
    out = run(messages, TOKENS.messages(messages))
    assert out == messages and out is not messages
    assert all(a is b for a, b in zip(out, messages, strict=True))


def test_oldest_turns_are_dropped_first_until_the_history_fits() -> None:
    messages = chat(6)
    for limit in range(150, TOKENS.messages(messages), 37):
        out = run(messages, limit)
        assert TOKENS.messages(out) <= limit
        kept = questions(out)
        assert kept == [f"question {n}" for n in range(7 - len(kept), 7)]
        one_turn_more = [messages[0], *messages[1 + 4 * (6 - len(kept) - 1) :]]
        assert TOKENS.messages(one_turn_more) > limit


def test_system_messages_are_counted_first_and_always_kept() -> None:
    messages = [system("rules " * 100), *chat(3)[1:]]
    system_only = TOKENS.messages(messages[:1])
    out = run(messages, system_only + 10)
    assert out[0] is messages[0]
    assert questions(out) == ["question 3"]


def test_the_newest_turn_is_kept_even_when_it_alone_exceeds_the_budget() -> None:
    messages = [*chat(2), *turn(3, output="a very long tool output " * 500)]
    out = run(messages, 100)
    assert out == [messages[0], *messages[-4:]]


def test_a_whole_turn_goes_with_its_parallel_tool_calls() -> None:
    messages = [
        system(),
        user("old"),
        *parallel("a", "b", outputs=["x " * 200, "y " * 200]),
        user("new"),
        assistant("z"),
    ]
    out = run(messages, TOKENS.messages(messages) - 1)
    assert out == [messages[0], messages[-2], messages[-1]]


def test_tokens_are_counted_in_the_request_models_encoding() -> None:
    russian = "Привет, как дела? " * 20
    messages = [system(), user("old"), assistant(russian), user("new"), assistant("ok")]
    o200k = COUNTERS.get(encoding="o200k_base").messages(messages)
    assert COUNTERS.get(encoding="cl100k_base").messages(messages) > o200k
    assert run(messages, o200k) == messages
    gpt4 = FilterContext(model="gpt-4", tokens=COUNTERS)
    assert run(messages, o200k, ctx=gpt4) == [messages[0], messages[3], messages[4]]


def test_text_part_content_is_counted() -> None:
    parts = [{"type": "text", "text": "word " * 100}, {"type": "image_url", "image_url": {"url": "data:,"}}]
    messages = [system(), {"role": "user", "content": parts}, assistant("a"), user("new"), assistant("b")]
    newest = TOKENS.messages([messages[0], *messages[3:]])
    assert run(messages, newest + 50) == [messages[0], *messages[3:]]
    assert run(messages, newest + 120) == messages


def test_reused_call_ids_stay_paired() -> None:
    first = action(call("bash", call_id="call_0"))
    second = action(call("bash", call_id="call_0"))
    messages = [
        system(),
        user("q1"),
        first,
        result(first, "a " * 300),
        user("q2"),
        second,
        result(second, "b"),
    ]
    out = run(messages, 100)
    assert out == [messages[0], *messages[4:]]
    assert broken_invariants(messages, out) == []


def test_the_newest_user_message_stays_when_an_annotated_task_after_it_starts_the_newest_turn() -> None:
    messages = [system(), user("old " * 100), user("newest user"), assistant("sub-task", message_type="task")]
    assert run(messages, 40) == [messages[0], messages[2], messages[3]]


def test_unknown_fields_are_kept_and_the_input_is_not_mutated() -> None:
    messages = [
        system(x_vendor=1),
        user("q1 " * 100),
        assistant("a1"),
        user("q2", name="alice"),
        assistant("a2", refusal=None),
    ]
    snapshot = copy.deepcopy(messages)
    out = run(messages, 60)
    assert messages == snapshot
    assert out == [messages[0], messages[3], messages[4]]
    assert out[1] is messages[3] and out[2] is messages[4]


def test_step_drops_turns_in_blocks_but_never_the_newest_turn() -> None:
    messages = chat(10)
    one_over = TOKENS.messages(messages) - 1
    assert turn_count(run(messages, one_over)) == 9
    assert turn_count(run(messages, one_over, step=4)) == 6
    assert turn_count(run(messages, 1, step=4)) == 1


def test_step_keeps_the_same_prefix_across_consecutive_requests() -> None:
    messages = chat(30)
    counts: list[int] = []
    breaks: list[int] = []
    previous: list[Message] | None = None
    for length in range(2, len(messages) + 1):
        out = run(messages[:length], 800, step=3)
        assert TOKENS.messages(out) <= 800
        counts.append(turn_count(messages[:length]) - turn_count(out))
        if previous is not None and out[: len(previous)] != previous:
            breaks.append(length)
        previous = out
    assert all(count % 3 == 0 for count in counts)
    assert breaks == [i + 2 for i in range(1, len(counts)) if counts[i] != counts[i - 1]]
    every_request = {questions(run(messages[: 1 + 4 * n], 800))[0] for n in range(1, 31)}
    assert 4 <= len(breaks) <= len(every_request) / 3 + 1


def test_budget_is_max_tokens() -> None:
    assert truncate(100_000).budget() == 100_000


@pytest.mark.parametrize("options", [{}, {"max_tokens": 0}, {"max_tokens": 100, "step": 0}])
def test_invalid_options_are_config_errors(options: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        Truncate(type="truncate", **options)


@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.stem)
@pytest.mark.parametrize("max_tokens, step", [(2000, 1), (6000, 3)], ids=["2000", "6000-step3"])
def test_corpus_output_keeps_the_invariants_and_fits_the_budget(
    path: Path, max_tokens: int, step: int
) -> None:
    body = corpus_body(path.name)
    messages = body["messages"]
    snapshot = copy.deepcopy(messages)
    ctx = FilterContext(model=body["model"], tokens=COUNTERS)
    out = run(messages, max_tokens, step, ctx=ctx)
    assert broken_invariants(messages, out) == []
    assert messages == snapshot
    assert out[: leading_system_count(messages)] == messages[: leading_system_count(messages)]
    assert COUNTERS.get(model=body["model"]).messages(out) <= max_tokens or out == newest_turn_only(messages)
    assert all(any(m is k for k in out) for m in newest_turn_only(messages))
