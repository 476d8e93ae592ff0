"""``tool_result_truncation``: tool results older than the newest ``keep_recent`` and longer than
``max_chars`` are cut to ``max_chars`` plus a notice with the original size."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from history_proxy.core.cost import ANTHROPIC, Pricing
from history_proxy.core.invariants import invariant_errors
from history_proxy.core.messages import Message, leading_system_count, newest_user_index
from history_proxy.core.tokens import TokenCounters
from history_proxy.filters.base import FilterContext
from history_proxy.filters.tool_result_truncation import DEFAULT_NOTICE, ToolResultTruncation
from tests.factories import assistant, corpus_body, corpus_files, exchange, parallel, system, user

CTX = FilterContext(role="worker", model="gpt-4o")
LONG = "x" * 1200


def truncate(messages: list[Message], **params: object) -> list[Message]:
    return ToolResultTruncation.model_validate({"type": "tool_result_truncation", **params}).apply(
        messages, CTX
    )


def tool_contents(messages: list[Message]) -> list[Any]:
    return [m["content"] for m in messages if m["role"] == "tool"]


def test_old_long_results_are_cut_to_max_chars_plus_a_notice_with_the_original_size() -> None:
    messages = [user(), *exchange(output=LONG), *exchange(output="recent 1"), *exchange(output="recent 2")]
    out = truncate(messages)
    cut = out[2]["content"]
    assert cut.startswith("x" * 500)
    assert not cut.startswith("x" * 501)
    assert "original was 1200 chars" in cut
    assert "[TOOL RESULT TRUNCATED at 500 chars" in cut
    assert cut.endswith("Summarize key learnings since you won't see these details again.]")


def test_the_notice_reports_the_original_token_count() -> None:
    output = "word " * 400
    tokens = CTX.tokens.get(model="gpt-4o").text(output)
    out = truncate([user(), *exchange(output=output)], keep_recent=0, max_chars=50)
    assert 390 <= tokens <= 410
    assert f"original was 2000 chars, {tokens} tokens." in out[2]["content"]


def test_the_newest_keep_recent_results_are_untouched_however_long() -> None:
    messages = [user(), *exchange(output=LONG), *exchange(output=LONG), *exchange(output=LONG)]
    out = truncate(messages, keep_recent=2)
    assert out[4] is messages[4] and out[6] is messages[6]
    assert out[2] is not messages[2]


def test_keep_recent_counts_tool_messages_so_parallel_results_count_one_each() -> None:
    messages = [user(), *parallel("a", "b", "c", outputs=[LONG, LONG, LONG])]
    out = truncate(messages, keep_recent=2)
    assert [c == LONG for c in tool_contents(out)] == [False, True, True]
    assert [m.get("tool_call_id") for m in out] == [m.get("tool_call_id") for m in messages]


def test_keep_recent_zero_cuts_every_long_result() -> None:
    messages = [user(), *exchange(output=LONG), *exchange(output=LONG)]
    assert all(not c.startswith("x" * 501) for c in tool_contents(truncate(messages, keep_recent=0)))


def test_results_at_or_under_max_chars_pass_as_the_same_objects() -> None:
    messages = [user(), *exchange(output="x" * 500), *exchange(), *exchange()]
    out = truncate(messages)
    assert all(a is b for a, b in zip(out, messages, strict=True))


def test_only_tool_messages_are_cut_never_user_or_assistant_text() -> None:
    messages = [system(LONG), user(LONG), assistant(LONG), *exchange(output=LONG, text=LONG), user("go")]
    out = truncate(messages, keep_recent=0)
    assert [m["content"] for m in out if m["role"] != "tool"] == [LONG, LONG, LONG, LONG, "go"]


def test_structure_never_changes_only_the_content_of_cut_results() -> None:
    messages = [
        system(),
        user(),
        *parallel("a", "b", outputs=[LONG, LONG]),
        *exchange(output=LONG),
        user("next"),
    ]
    out = truncate(messages, keep_recent=0, max_chars=10)
    assert len(out) == len(messages)
    for before, after in zip(messages, out, strict=True):
        assert {k: v for k, v in before.items() if k != "content"} == {
            k: v for k, v in after.items() if k != "content"
        }


def test_text_parts_are_cut_and_other_parts_kept() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    parts = [
        {"type": "text", "text": "a" * 30},
        image,
        {"type": "text", "text": "b" * 30},
        {"type": "text", "text": "c" * 30},
    ]
    act, res = exchange()
    messages = [user(), act, {**res, "content": parts}]
    out = truncate(messages, keep_recent=0, max_chars=40, notice=" [cut from {original_chars}]")
    assert out[2]["content"] == [parts[0], image, {"type": "text", "text": "b" * 10 + " [cut from 90]"}]
    assert messages[2]["content"] == parts


def test_a_cut_falling_on_a_part_boundary_puts_the_notice_in_the_next_text_part() -> None:
    parts = [{"type": "text", "text": "a" * 40}, {"type": "text", "text": "b" * 40}]
    act, res = exchange()
    out = truncate([user(), act, {**res, "content": parts}], keep_recent=0, max_chars=40, notice="[cut]")
    assert out[2]["content"] == [parts[0], {"type": "text", "text": "[cut]"}]


def test_a_custom_notice_fills_its_placeholders() -> None:
    messages = [user(), *exchange(output=LONG)]
    out = truncate(messages, keep_recent=0, max_chars=3, notice=" <{original_chars} chars, kept {max_chars}>")
    assert out[2]["content"] == "xxx <1200 chars, kept 3>"


def test_a_notice_with_an_unknown_placeholder_is_a_config_error() -> None:
    with pytest.raises(ValidationError, match="original_chars"):
        ToolResultTruncation(type="tool_result_truncation", notice="[cut, was {size}]")


def test_defaults_are_plexus_two_recent_and_500_chars() -> None:
    flt = ToolResultTruncation(type="tool_result_truncation")
    assert (flt.keep_recent, flt.max_chars, flt.notice) == (2, 500, DEFAULT_NOTICE)
    with pytest.raises(ValidationError):
        ToolResultTruncation(type="tool_result_truncation", max_chars=0)
    with pytest.raises(ValidationError):
        ToolResultTruncation(type="tool_result_truncation", keep_recent=-1)


def test_unknown_fields_of_a_cut_result_are_kept() -> None:
    act, res = exchange(output=LONG)
    res = {**res, "name": "bash", "vendor_meta": {"x": 1}, "tags": ["keep_output"]}
    out = truncate([user(), act, res], keep_recent=0)
    assert (
        out[2]["name"] == "bash" and out[2]["vendor_meta"] == {"x": 1} and out[2]["tags"] == ["keep_output"]
    )


def test_cutting_is_deterministic_so_an_aged_result_looks_the_same_on_every_request() -> None:
    grown = [user(), *exchange(output=LONG), *exchange(output=LONG), *exchange(output=LONG)]
    first = truncate(grown)
    second = truncate([*grown, *exchange(output="new")])
    assert second[2] == first[2]


def test_input_is_not_mutated() -> None:
    messages = [user(), *exchange(output=LONG), *exchange(output=LONG), *exchange(output=LONG)]
    snapshot = copy.deepcopy(messages)
    truncate(messages, keep_recent=0)
    assert messages == snapshot


@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.stem)
def test_corpus_output_keeps_the_invariants(path: Path) -> None:
    messages = corpus_body(path.name)["messages"]
    out = truncate(messages, keep_recent=1, max_chars=100)
    assert invariant_errors(out) == invariant_errors(messages) == {}
    assert len(out) == len(messages)
    lead = leading_system_count(messages)
    assert out[:lead] == messages[:lead]
    newest = newest_user_index(messages)
    assert newest is None or out[newest] is messages[newest]


# --- trigger: cost (issue 18) -----------------------------------------------------------------------


def cost_truncate(messages: list[Message], pricing: Pricing = ANTHROPIC, **params: object) -> list[Message]:
    f = ToolResultTruncation.model_validate({"type": "tool_result_truncation", "trigger": "cost", **params})
    return f.apply(messages, FilterContext(model="gpt-4o", tokens=TokenCounters(), pricing=pricing))


def test_with_free_cache_writes_the_cost_trigger_cuts_like_every() -> None:
    messages = [user(), *[m for k in range(6) for m in exchange(output=f"{k} " + LONG)]]
    free = Pricing(name="free", read=1.0, write=1.0)
    assert cost_truncate(messages, free) == truncate(messages)
    assert cost_truncate(messages, free, keep_recent=0) == truncate(messages, keep_recent=0)


def test_the_cost_trigger_leaves_a_short_conversation_alone() -> None:
    messages = [user(), *[m for k in range(4) for m in exchange(output=f"{k} " + LONG)]]
    assert cost_truncate(messages) == messages


def test_the_cost_trigger_cuts_in_a_few_large_steps_and_the_prefix_holds_between_them() -> None:
    from history_proxy.devtools.replay import request_ends

    messages = corpus_body("openhands-codeact-ponylang-ponyc-4588.json")["messages"]
    previous: list[Message] = []
    advances = requests = 0
    for end in request_ends(messages):
        sent = cost_truncate(messages[:end], max_chars=2000)
        requests += 1
        if previous and sent[: len(previous)] != previous:
            advances += 1
        previous = sent
    assert previous != messages[: len(previous)]  # it did cut
    assert 0 < advances < requests / 4
