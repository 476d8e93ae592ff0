"""``cache_control``: prompt-cache marks on the newest eligible messages, at most 4 per request."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from history_proxy.config.loading import load_config
from history_proxy.core.invariants import cache_mark_count, invariant_errors
from history_proxy.core.messages import Message
from history_proxy.filters.base import FilterContext
from history_proxy.filters.cache_control import CacheControl
from tests.factories import assistant, corpus_body, corpus_files, exchange, role_filters, system, user

ROOT = Path(__file__).resolve().parents[2]
EPHEMERAL = {"type": "ephemeral"}


def mark(messages: list[Message], **params: Any) -> list[Message]:
    return CacheControl(type="cache_control", **params).apply(messages, FilterContext())


def marked_positions(messages: list[Message]) -> list[int]:
    return [i for i, m in enumerate(messages) if cache_mark_count([m])]


def test_the_newest_two_user_or_tool_messages_are_marked_on_their_last_part() -> None:
    messages = [system(), user("task"), *exchange(output="out"), assistant("thinking"), user("more")]
    out = mark(messages)
    assert marked_positions(out) == [3, 5]
    assert out[5]["content"] == [{"type": "text", "text": "more", "cache_control": EPHEMERAL}]


def test_the_mark_goes_on_the_last_part_or_with_part_first_on_the_first() -> None:
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assert mark([user(parts)], part="last")[0]["content"] == [
        parts[0],
        {**parts[1], "cache_control": EPHEMERAL},
    ]
    assert mark([user(parts)], part="first")[0]["content"] == [
        {**parts[0], "cache_control": EPHEMERAL},
        parts[1],
    ]


def test_a_tool_message_carries_the_mark_itself_as_swe_agent_places_it() -> None:
    messages = [user("task"), *exchange(output="out")]
    tool = mark(messages, last_n_messages=1)[2]
    assert tool["cache_control"] == EPHEMERAL
    assert tool["content"] == [{"type": "text", "text": "out"}]
    assert tool["tool_call_id"] == messages[2]["tool_call_id"]


def test_ttl_one_hour_is_added_to_the_mark() -> None:
    out = mark([user("task")], ttl="1h")
    assert out[0]["content"][-1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}


def test_the_offset_skips_the_newest_messages_of_every_role() -> None:
    messages = [user("a"), user("b"), assistant("c"), user("d")]
    assert marked_positions(mark(messages, last_n_messages=1, last_n_messages_offset=2)) == [1]
    assert marked_positions(mark(messages, last_n_messages=2, last_n_messages_offset=1)) == [0, 1]


def test_only_tagged_roles_are_marked() -> None:
    messages = [system("s"), user("u"), assistant("a")]
    assert marked_positions(mark(messages, tagged_roles=["system", "assistant"], last_n_messages=5)) == [0, 2]


def test_empty_or_null_content_is_not_eligible() -> None:
    messages = [user("task"), *exchange(output=""), user(""), user([])]
    out = mark(messages, last_n_messages=1)
    assert marked_positions(out) == [0]
    assert out[2] is messages[2] and out[3] is messages[3]


def test_the_clients_own_marks_are_kept_and_count_towards_four() -> None:
    client = {"type": "text", "text": "big doc", "cache_control": {"type": "ephemeral", "ttl": "1h"}}
    messages = [system([client]), system([client]), system([client]), user("a"), user("b")]
    out = mark(messages)
    assert cache_mark_count(out) == 4
    assert marked_positions(out) == [0, 1, 2, 4]
    assert out[0] is messages[0]


def test_no_mark_is_placed_when_the_client_already_has_four() -> None:
    client = {"type": "text", "text": "doc", "cache_control": {"type": "ephemeral", "ttl": "1h"}}
    messages = [system([client]) for _ in range(4)] + [user("a")]
    assert mark(messages) == messages


def test_a_message_the_client_marked_counts_as_marked() -> None:
    client_marked = user([{"type": "text", "text": "b", "cache_control": {"type": "ephemeral", "ttl": "1h"}}])
    messages = [user("a"), user("z"), client_marked]
    out = mark(messages, last_n_messages=2)
    assert out[2] is client_marked
    assert marked_positions(out) == [1, 2]


def test_marks_from_an_earlier_pass_are_removed() -> None:
    messages = [user("a"), *exchange(output="x"), user("b")]
    first = mark(messages, last_n_messages=2)
    again = mark(first, last_n_messages=1)
    assert marked_positions(again) == [3]
    assert "cache_control" not in again[2]
    assert again[2]["content"] == [{"type": "text", "text": "x"}]


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"last_n_messages": 1},
        {"part": "first"},
        {"ttl": "1h"},
        {"last_n_messages": 4, "last_n_messages_offset": 1},
    ],
)
def test_applying_twice_equals_applying_once(params: dict[str, Any]) -> None:
    client = {"type": "text", "text": "doc", "cache_control": {"type": "ephemeral", "ttl": "1h"}}
    messages = [system([client]), user("task"), *exchange(output="x"), *exchange(output="y"), user("b")]
    once = mark(messages, **params)
    assert mark(once, **params) == once


def test_last_n_messages_zero_only_removes_our_own_marks() -> None:
    client = {"type": "text", "text": "doc", "cache_control": {"type": "ephemeral", "ttl": "1h"}}
    messages = mark([system([client]), user("a"), user("b")])
    out = mark(messages, last_n_messages=0)
    assert marked_positions(out) == [0]


def test_input_is_not_mutated_and_unmarked_messages_are_the_same_objects() -> None:
    messages = [system(), user("a"), *exchange(output="x"), user("b")]
    snapshot = copy.deepcopy(messages)
    out = mark(messages)
    assert messages == snapshot
    assert out[0] is messages[0] and out[1] is messages[1] and out[2] is messages[2]


def test_every_placed_mark_is_its_own_dict() -> None:
    out = mark([user("a"), user("b")])
    assert out[0]["content"][0]["cache_control"] is not out[1]["content"][0]["cache_control"]


def test_example_config_enables_the_filter() -> None:
    config = load_config(ROOT / "config" / "examples" / "cache_control.yaml")
    assert config.cache_control is not None
    assert any(f.type_name == "cache_control" for f in role_filters(config))
    doc = (ROOT / "docs" / "filters" / "cache_control.md").read_text(encoding="utf-8")
    assert doc.startswith("### cache_control")


@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.name)
def test_corpus_output_keeps_the_invariants_and_is_idempotent(path: Path) -> None:
    messages = corpus_body(path.name)["messages"]
    snapshot = copy.deepcopy(messages)
    for params in [{}, {"last_n_messages": 4, "part": "first"}, {"last_n_messages": 9, "ttl": "1h"}]:
        out = mark(messages, **params)
        assert messages == snapshot
        assert invariant_errors(out) == {}
        eligible = any(m["role"] in ("user", "tool") for m in messages)
        assert (1 if eligible else 0) <= cache_mark_count(out) <= 4
        assert mark(out, **params) == out
