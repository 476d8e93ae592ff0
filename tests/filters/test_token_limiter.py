"""``token_limiter``: drops whole groups, oldest first, until the request fits ``limit`` (AgentKit's TokenLimiter)."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from history_proxy.core.invariants import broken_invariants
from history_proxy.core.messages import Message, group_spans, leading_system_count, newest_user_index
from history_proxy.core.tokens import TokenCounters
from history_proxy.filters.base import FilterContext
from history_proxy.filters.token_limiter import TokenLimiter
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


def limiter(limit: int, **options: Any) -> TokenLimiter:
    return TokenLimiter(type="token_limiter", limit=limit, **options)


def run(messages: list[Message], limit: int, **options: Any) -> list[Message]:
    return limiter(limit, **options).apply(messages, CTX)


def contents(messages: list[Message]) -> list[Any]:
    return [m.get("content") for m in messages]


def conversation(exchanges: int, output: str = "word " * 40) -> list[Message]:
    """A system prompt, one task and ``exchanges`` tool calls with results of about 40 tokens each."""
    return [
        system("You are a coding agent."),
        user("Fix the bug."),
        *(m for _ in range(exchanges) for m in exchange("bash", output)),
    ]


def pinned_minimum(messages: list[Message], keep_system: bool = True) -> list[Message]:
    """What the limiter never drops: leading system, newest user message, newest group."""
    lead = leading_system_count(messages) if keep_system else 0
    last = group_spans(messages)[-1]
    newest_user = newest_user_index(messages)
    keep = set(range(lead)) | set(range(*last)) | ({newest_user} if newest_user is not None else set())
    return [m for i, m in enumerate(messages) if i in keep]


def test_a_request_within_the_limit_is_unchanged() -> None:
    messages = conversation(3)
    out = run(messages, TOKENS.messages(messages))
    assert out == messages and out is not messages
    assert all(a is b for a, b in zip(out, messages, strict=True))


def test_oldest_groups_are_dropped_first_until_the_request_fits() -> None:
    messages = [
        system(),
        user("task"),
        assistant("first"),
        assistant("second"),
        assistant("third"),
        assistant("fourth"),
    ]
    limit = TOKENS.messages(messages) - TOKENS.message(messages[2])
    assert contents(run(messages, limit)) == [messages[0]["content"], "task", "second", "third", "fourth"]
    limit -= 1
    assert contents(run(messages, limit)) == [messages[0]["content"], "task", "third", "fourth"]


def test_the_result_is_the_longest_suffix_of_groups_that_fits_the_openai_count() -> None:
    messages = conversation(10)
    assert TOKENS.messages(messages) > 550
    for limit in (200, 333, 450, 550):
        out = run(messages, limit)
        assert TOKENS.messages(out) <= limit < TOKENS.messages(messages)
        first_kept = len(messages) - (len(out) - 2)
        one_group_more = [*out[:2], *messages[first_kept - 2 : first_kept], *out[2:]]
        assert TOKENS.messages(one_group_more) > limit


def test_a_tool_call_and_all_its_results_are_dropped_together() -> None:
    group = parallel("read", "grep", "ls", outputs=["r" * 400, "g" * 400, "l" * 400])
    messages = [user("task"), *group, assistant("looked"), assistant("next")]
    out = run(messages, TOKENS.messages(messages) - 10)
    assert contents(out) == ["task", "looked", "next"]


def test_leading_system_messages_are_kept() -> None:
    messages = [system("rules"), {"role": "developer", "content": "more rules"}, *conversation(8)[1:]]
    out = run(messages, 150)
    assert out[:2] == messages[:2]


def test_keep_system_false_lets_the_system_prompt_go_first() -> None:
    messages = [system("rules " * 50), user("task"), assistant("a"), assistant("b")]
    out = run(messages, TOKENS.messages(messages) - 10, keep_system=False)
    assert contents(out) == ["task", "a", "b"]


def test_newest_group_is_kept_when_it_alone_exceeds_the_limit() -> None:
    messages = [system(), user("task"), assistant("older"), *exchange("bash", "huge output " * 500)]
    out = run(messages, 50)
    assert out == [messages[0], messages[1], messages[3], messages[4]]


def test_newest_user_message_is_kept_even_when_older_groups_after_it_go() -> None:
    messages = [system(), user("old task"), assistant("old"), user("new task"), *conversation(6)[2:]]
    out = run(messages, 120)
    assert "new task" in contents(out)
    assert "old task" not in contents(out)
    assert out == pinned_minimum(messages)


def test_only_the_pinned_messages_are_left_when_they_alone_are_over_the_limit() -> None:
    messages = [system("rules " * 200), user("task " * 200), assistant("a"), assistant("b " * 200)]
    assert run(messages, 10) == [messages[0], messages[1], messages[3]]


def test_the_list_is_never_empty_even_without_system_or_user_messages() -> None:
    messages = exchange("bash", "x " * 500)
    assert run(messages, 1) == messages
    assert run(messages, 1, keep_system=False) == messages


def test_encoding_decides_the_count() -> None:
    russian = "Привет, как дела? " * 20
    messages = [user("task"), assistant(russian), assistant("end")]
    cl100k = COUNTERS.get(encoding="cl100k_base").messages(messages)
    o200k = COUNTERS.get(encoding="o200k_base").messages(messages)
    assert o200k < cl100k
    assert run(messages, o200k, encoding="o200k_base") == messages
    assert run(messages, o200k, encoding="cl100k_base") == [messages[0], messages[2]]


def test_auto_encoding_follows_the_request_model() -> None:
    messages = [user("task"), assistant("Привет, как дела? " * 20), assistant("end")]
    o200k = COUNTERS.get(encoding="o200k_base").messages(messages)
    gpt4 = FilterContext(model="gpt-4", tokens=COUNTERS)
    assert limiter(o200k).apply(messages, CTX) == messages
    assert limiter(o200k).apply(messages, gpt4) == [messages[0], messages[2]]


def test_approximate_tokenizer_counts_characters_over_four() -> None:
    messages = [user("abcd" * 10), assistant("x" * 400), assistant("y")]
    approximate = COUNTERS.get(tokenizer="approximate")
    assert approximate.messages(messages) == 3 + (3 + 1 + 10) + (3 + math.ceil(9 / 4) + 100) + (3 + 3 + 1)
    within = approximate.messages(messages)
    assert run(messages, within, tokenizer="approximate") == messages
    assert run(messages, within - 1, tokenizer="approximate") == [messages[0], messages[2]]


def test_text_part_content_is_counted() -> None:
    parts = [{"type": "text", "text": "word " * 100}, {"type": "image_url", "image_url": {"url": "data:,"}}]
    messages = [user("task"), {"role": "assistant", "content": parts}, assistant("ok")]
    without_parts = TOKENS.messages([messages[0], messages[2]])
    assert run(messages, without_parts + 50) == [messages[0], messages[2]]
    assert run(messages, without_parts + 110) == messages


def test_reused_call_ids_keep_each_result_with_its_own_call() -> None:
    first = action(call("bash", call_id="call_0"))
    second = action(call("bash", call_id="call_0"))
    messages = [
        user("task"),
        first,
        result(first, "a " * 300),
        second,
        result(second, "b"),
        assistant("done"),
    ]
    out = run(messages, TOKENS.messages(messages) - 10)
    assert out == [messages[0], second, messages[4], messages[5]]
    assert broken_invariants(messages, out) == []


def test_unknown_fields_are_kept_and_kept_messages_are_the_input_objects() -> None:
    messages = [
        system(x_vendor=1),
        user("task", name="alice"),
        assistant("old " * 100),
        assistant("new", reasoning_content="because", refusal=None),
    ]
    out = run(messages, TOKENS.messages(messages) - 10)
    assert out == [messages[0], messages[1], messages[3]]
    assert all(any(k is m for m in messages) for k in out)


def test_input_is_not_mutated() -> None:
    messages = conversation(8)
    snapshot = copy.deepcopy(messages)
    run(messages, 200, step=3)
    assert messages == snapshot


def test_step_drops_groups_in_blocks() -> None:
    messages = [system(), user("task"), *(assistant(f"message {i}") for i in range(10))]
    one_over = TOKENS.messages(messages) - 1
    assert len(run(messages, one_over)) == len(messages) - 1
    assert len(run(messages, one_over, step=4)) == len(messages) - 4


def test_step_never_drops_the_pinned_messages() -> None:
    messages = [system(), user("task"), assistant("a " * 100), assistant("b"), assistant("c")]
    out = run(messages, TOKENS.messages(messages) - 1, step=10)
    assert out == [messages[0], messages[1], messages[4]]


def dropped_groups(messages: list[Message], out: list[Message]) -> int:
    kept = {id(m) for m in out}
    return sum(1 for a, _ in group_spans(messages) if id(messages[a]) not in kept)


def grow(filter_: TokenLimiter, messages: list[Message]) -> tuple[list[int], list[int]]:
    """Send every prefix of a growing conversation; the dropped group counts and where the kept prefix broke."""
    counts: list[int] = []
    breaks: list[int] = []
    previous: list[Message] | None = None
    for length in range(2, len(messages) + 1):
        out = filter_.apply(messages[:length], CTX)
        counts.append(dropped_groups(messages[:length], out))
        if previous is not None and out[: len(previous)] != previous:
            breaks.append(length)
        previous = out
    return counts, breaks


def test_step_keeps_the_same_prefix_across_consecutive_requests() -> None:
    messages = conversation(40)
    counts, breaks = grow(limiter(600, step=4), messages)
    assert all(count % 4 == 0 for count in counts)
    changes = [i for i in range(1, len(counts)) if counts[i] != counts[i - 1]]
    assert [i + 2 for i in changes] == breaks
    _, every_request = grow(limiter(600, step=1), messages)
    assert len(breaks) >= 5
    assert len(breaks) <= math.ceil(len(every_request) / 4)


def test_budget_is_the_limit() -> None:
    assert limiter(16000).budget() == 16000


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"limit": 0},
        {"limit": 100, "step": 0},
        {"limit": 100, "encoding": "p50k_base"},
        {"limit": 100, "tokenizer": "x"},
    ],
)
def test_invalid_options_are_config_errors(options: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        TokenLimiter(type="token_limiter", **options)


@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.stem)
@pytest.mark.parametrize(
    "options",
    [
        {"limit": 3000},
        {"limit": 6000, "step": 4},
        {"limit": 2000, "tokenizer": "approximate", "keep_system": False},
    ],
    ids=["3000", "6000-step4", "2000-approximate-no-system"],
)
def test_corpus_output_keeps_the_invariants_and_fits_the_limit(path: Path, options: dict[str, Any]) -> None:
    messages = corpus_body(path.name)["messages"]
    snapshot = copy.deepcopy(messages)
    filter_ = TokenLimiter(type="token_limiter", **options)
    out = filter_.apply(messages, CTX)
    assert broken_invariants(messages, out) == []
    assert messages == snapshot
    counter = COUNTERS.get(model="gpt-4o", tokenizer=filter_.tokenizer)
    keep_system = filter_.keep_system
    limit = filter_.limit
    assert isinstance(limit, int)  # every option above is a token count, not a share of the window
    assert counter.messages(out) <= limit or out == pinned_minimum(messages, keep_system)
    assert all(m in out for m in pinned_minimum(messages, keep_system))
