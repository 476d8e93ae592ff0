"""``summarize``: old turns folded into one model-written summary (AgentRoute's HistorySummarize, seed 004)."""

from __future__ import annotations

import asyncio
import copy
import logging
from typing import Any

import pytest
from pydantic import ValidationError

from history_proxy.config.loading import ConfigError, parse_config
from history_proxy.core.invariants import broken_invariants, invariant_errors
from history_proxy.core.messages import Message, leading_system_count, turn_spans
from history_proxy.core.tokens import TokenCounters
from history_proxy.filters.base import FilterContext
from history_proxy.filters.summarize import DEFAULT_SUMMARY_PROMPT, FALLBACK_NOTE, SUMMARY_HEADING, Summarize
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


class FakeSummarizer:
    """Writes ``summary of N messages: <first user text>`` and records what it was asked."""

    def __init__(self, *, fails: bool = False, hangs: bool = False, answer: str | None = None) -> None:
        self.fails = fails
        self.hangs = hangs
        self.answer = answer
        self.calls: list[dict[str, Any]] = []

    async def summarize(
        self, messages: list[Message], *, model: str, upstream: str | None, prompt: str, timeout_s: float
    ) -> str:
        self.calls.append(
            {
                "messages": messages,
                "model": model,
                "upstream": upstream,
                "prompt": prompt,
                "timeout_s": timeout_s,
            }
        )
        if self.hangs:
            await asyncio.Event().wait()
        if self.fails:
            raise ConnectionError("upstream unreachable")
        if self.answer is not None:
            return self.answer
        first_user = next((m["content"] for m in messages if m.get("role") == "user"), "")
        return f"summary of {len(messages)} messages: {first_user}"


def context(summarizer: Any = None, **extra: Any) -> FilterContext:
    fields: dict[str, Any] = {"model": "gpt-4o", "upstream": "main", "tokens": COUNTERS, **extra}
    return FilterContext(summarizer=summarizer or FakeSummarizer(), **fields)


def summarize(**options: Any) -> Summarize:
    return Summarize(type="summarize", **options)


def run(messages: list[Message], ctx: FilterContext | None = None, **options: Any) -> list[Message]:
    return asyncio.run(summarize(**options).apply_async(messages, ctx or context()))


def turn(n: int) -> list[Message]:
    return [user(f"question {n}"), *exchange("get_weather", f"weather {n}"), assistant(f"answer {n}")]


def chat(turns: int) -> list[Message]:
    return [system("You are a planner."), *(m for n in range(1, turns + 1) for m in turn(n))]


def questions(messages: list[Message]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "user"]


def summaries(messages: list[Message]) -> list[str]:
    return [
        m["content"] for m in messages if m["role"] == "system" and m["content"].startswith(SUMMARY_HEADING)
    ]


def turn_count(messages: list[Message]) -> int:
    return len(turn_spans(messages, leading_system_count(messages)))


# --- placement and span ----------------------------------------------------------------------


def test_old_turns_become_one_summary_system_message_right_after_the_leading_system_messages() -> None:
    messages = [system("rules"), system("more rules"), *chat(9)[1:]]
    out = run(messages, keep_recent=4, step=4)
    assert out[0] is messages[0] and out[1] is messages[1]
    assert out[2] == {
        "role": "system",
        "content": f"{SUMMARY_HEADING}\nsummary of 16 messages: question 1",
    }
    assert questions(out) == ["question 5", "question 6", "question 7", "question 8", "question 9"]
    assert out[3:] == messages[2 + 16 :]
    assert all(a is b for a, b in zip(out[3:], messages[18:], strict=True))


def test_the_summarizer_gets_exactly_the_old_turns_with_the_request_model_and_upstream_by_default() -> None:
    fake = FakeSummarizer()
    messages = chat(6)
    run(messages, context(fake), keep_recent=2, step=4)
    (asked,) = fake.calls
    assert asked["messages"] == messages[1:17]
    assert asked["model"] == "gpt-4o" and asked["upstream"] == "main"
    assert asked["prompt"] == DEFAULT_SUMMARY_PROMPT and asked["timeout_s"] == 20.0


def test_model_upstream_and_prompt_from_the_config_are_used_for_the_summary_call() -> None:
    fake = FakeSummarizer()
    run(
        chat(6),
        context(fake),
        keep_recent=2,
        model="gpt-4o-mini",
        upstream="cheap",
        summary_prompt="Bullets.",
    )
    (asked,) = fake.calls
    assert (asked["model"], asked["upstream"], asked["prompt"]) == ("gpt-4o-mini", "cheap", "Bullets.")


def test_default_prompt_asks_for_concise_bullets_that_keep_names_numbers_and_decisions() -> None:
    prompt = DEFAULT_SUMMARY_PROMPT.lower()
    assert "3-5" in prompt and "bullet" in prompt
    assert all(word in prompt for word in ("names", "numbers", "decisions", "speculate"))


def test_a_history_of_keep_recent_turns_or_fewer_is_unchanged_and_costs_no_call() -> None:
    fake = FakeSummarizer()
    messages = chat(4)
    for keep_recent in (4, 5, 100):
        out = run(messages, context(fake), keep_recent=keep_recent, step=1)
        assert out == messages and out is not messages
        assert all(a is b for a, b in zip(out, messages, strict=True))
    assert fake.calls == []


def test_keep_recent_zero_summarizes_every_turn_but_the_one_holding_the_newest_user_message() -> None:
    messages = chat(5)
    out = run(messages, keep_recent=0, step=1)
    assert summaries(out) == [f"{SUMMARY_HEADING}\nsummary of 16 messages: question 1"]
    assert questions(out) == ["question 5"]
    assert invariant_errors(out) == {}


def test_keep_recent_zero_without_any_user_message_summarizes_everything_after_the_system_prompt() -> None:
    messages = [system(), *exchange("ls"), assistant("listed")]
    out = run(messages, keep_recent=0, step=1)
    assert out == [messages[0], {"role": "system", "content": f"{SUMMARY_HEADING}\nsummary of 3 messages:"}]


def test_the_summarized_span_advances_only_in_blocks_of_step_turns() -> None:
    spans = []
    for turns in range(1, 20):
        out = run(chat(turns), keep_recent=4, step=4)
        spans.append(turns - turn_count(out))
    assert spans == [0] * 7 + [4] * 4 + [8] * 4 + [12] * 4


def test_older_turns_not_yet_in_a_full_block_stay_verbatim() -> None:
    messages = chat(10)  # 6 candidates older than the newest 4: one block of 4 summarized, 2 kept
    out = run(messages, keep_recent=4, step=4)
    assert questions(out) == [f"question {n}" for n in range(5, 11)]


def test_consecutive_requests_of_a_growing_conversation_share_the_prefix_until_the_next_block() -> None:
    full = chat(16)
    fake = FakeSummarizer()
    previous: list[Message] | None = None
    changed_at = []
    for length in range(2, len(full) + 1):
        out = run(full[:length], context(fake), keep_recent=2, step=3)
        if previous is not None and out[: min(len(previous), 2)] != previous[: min(len(previous), 2)]:
            changed_at.append(turn_count(full[:length]))
        previous = out
    assert changed_at == [5, 8, 11, 14]  # span = (turns - keep_recent) // step * step
    # only four distinct spans are ever asked for: the cache (history_proxy.summaries.cache) makes that four calls
    assert len({len(c["messages"]) for c in fake.calls}) == 4


def test_the_newest_user_message_is_never_summarized_away() -> None:
    messages = [
        system(),
        *turn(1),
        *turn(2),
        user("newest user"),
        assistant("sub-task one", message_type="task"),
        assistant("sub-task two", message_type="task"),
    ]
    out = run(messages, keep_recent=0, step=1)
    assert questions(out) == ["newest user"]
    assert out[-3:] == messages[-3:]
    assert summaries(out) == [f"{SUMMARY_HEADING}\nsummary of 8 messages: question 1"]


def test_tool_pairs_stay_whole_in_the_summary_span_and_after_it() -> None:
    fake = FakeSummarizer()
    messages = [
        system(),
        user("q1"),
        *parallel("search", "fetch"),
        assistant("a1"),
        user("q2"),
        *parallel("a", "b", "c"),
        user("q3"),
        *exchange("bash"),
    ]
    out = run(messages, context(fake), keep_recent=1, step=1)
    assert fake.calls[0]["messages"] == messages[1:11]
    assert out[2:] == messages[11:]
    assert broken_invariants(messages, out) == []


def test_the_input_is_not_mutated_and_fields_the_filter_does_not_own_are_kept() -> None:
    messages = [
        system(x_vendor=1),
        *chat(6)[1:],
        user("q7", name="alice"),
        assistant("a7", refusal=None, reasoning_content="thinking"),
    ]
    snapshot = copy.deepcopy(messages)
    out = run(messages, keep_recent=2, step=1)
    assert messages == snapshot
    assert out[0] is messages[0] and out[-2] is messages[-2] and out[-1] is messages[-1]


# --- failures -------------------------------------------------------------------------------


def test_a_failing_summary_call_drops_the_old_turns_like_truncate_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ctx = context(FakeSummarizer(fails=True), role="planner")
    messages = chat(9)
    with caplog.at_level(logging.WARNING, logger="history_proxy.summarize"):
        out = run(messages, ctx, keep_recent=4, step=4)
    assert out == [messages[0], *messages[17:]]
    assert questions(out) == [f"question {n}" for n in range(5, 10)]
    assert ctx.notes == [FALLBACK_NOTE]
    (record,) = caplog.records
    assert record.levelno == logging.WARNING and "ConnectionError" in record.getMessage()
    assert "question" not in record.getMessage() and "weather" not in record.getMessage()


def test_a_summary_slower_than_timeout_s_falls_back_without_waiting_longer() -> None:
    ctx = context(FakeSummarizer(hangs=True))
    messages = chat(6)
    out = run(messages, ctx, keep_recent=2, step=4, timeout_s=0.05)
    assert questions(out) == ["question 5", "question 6"]
    assert ctx.notes == [FALLBACK_NOTE]


@pytest.mark.parametrize("answer", ["", "   \n"])
def test_an_empty_summary_counts_as_a_failure(answer: str) -> None:
    ctx = context(FakeSummarizer(answer=answer))
    out = run(chat(6), ctx, keep_recent=2, step=4)
    assert summaries(out) == [] and ctx.notes == [FALLBACK_NOTE]


def test_without_a_summarizer_the_old_turns_are_dropped() -> None:
    ctx = FilterContext(model="gpt-4o", tokens=COUNTERS)
    messages = chat(6)
    assert run(messages, ctx, keep_recent=2, step=4) == [messages[0], *messages[17:]]
    assert ctx.notes == [FALLBACK_NOTE]
    sync_ctx = FilterContext(model="gpt-4o", tokens=COUNTERS)
    assert summarize(keep_recent=2).apply(messages, sync_ctx) == [messages[0], *messages[17:]]


def test_the_fallback_keeps_the_newest_turn_and_whole_tool_groups() -> None:
    messages = [system(), *exchange("ls"), assistant("listed")]  # one preamble turn, no user message
    ctx = context(FakeSummarizer(fails=True))
    assert run(messages, ctx, keep_recent=0, step=1) == messages
    first = action(call("bash"), call("grep"))
    messages = [
        system(),
        user("q1"),
        first,
        result(first["tool_calls"][0]),
        result(first["tool_calls"][1]),
        user("q2"),
        assistant("a2"),
    ]
    out = run(messages, context(FakeSummarizer(fails=True)), keep_recent=0, step=1)
    assert out == [messages[0], messages[5], messages[6]]


# --- config and corpus ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"keep_recent": -1},
        {"step": 0},
        {"timeout_s": 0},
        {"model": ""},
        {"summary_prompt": ""},
        {"keep_last": 3},
    ],
)
def test_invalid_options_are_config_errors(options: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        summarize(**options)


def test_an_upstream_the_config_does_not_name_is_a_config_error() -> None:
    raw: dict[str, Any] = {
        "upstreams": {"main": {"base_url": "mock://"}},
        "policies": {"roles": {"planner": [{"type": "summarize", "upstream": "cheap"}]}},
    }
    with pytest.raises(ConfigError) as caught:
        parse_config(raw, env={})
    assert caught.value.errors == [
        "policies: roles.planner[0].upstream names unknown upstream 'cheap'; known upstreams: main"
    ]
    raw["upstreams"]["cheap"] = {"base_url": "mock://"}
    assert parse_config(raw, env={}).policies


def test_defaults_follow_agentroute_keep_recent_4() -> None:
    f = summarize()
    assert (f.keep_recent, f.step, f.timeout_s, f.model, f.upstream) == (4, 4, 20.0, None, None)
    assert f.budget() is None and f.cache_friendly


@pytest.mark.parametrize("fails", [False, True], ids=["summarized", "fallback"])
def test_every_corpus_conversation_keeps_the_invariants(fails: bool) -> None:
    files = corpus_files()
    assert files
    for path in files:
        body = corpus_body(path.name)
        messages = body["messages"]
        snapshot = copy.deepcopy(messages)
        for options in ({}, {"keep_recent": 0, "step": 1}, {"keep_recent": 2, "step": 3}):
            ctx = context(FakeSummarizer(fails=fails), model=body["model"])
            out = run(messages, ctx, **options)
            assert broken_invariants(messages, out) == [], f"{path.name} {options}"
            assert out and messages == snapshot
