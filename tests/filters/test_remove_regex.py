"""``remove_regex``: delete regex matches (DOTALL, in order) from all but the newest ``keep_last`` messages."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from history_proxy.config.loading import ConfigError, load_config, parse_config
from history_proxy.core.invariants import invariant_errors
from history_proxy.core.messages import Message
from history_proxy.filters.base import FilterContext
from history_proxy.filters.remove_regex import PLACEHOLDER, RemoveRegex
from tests.factories import action, assistant, corpus_body, corpus_files, exchange, role_filters, system, user

ROOT = Path(__file__).resolve().parents[2]


def strip(messages: list[Message], **params: Any) -> list[Message]:
    return RemoveRegex(type="remove_regex", **params).apply(messages, FilterContext())


def test_the_default_removes_diff_blocks_across_lines() -> None:
    messages = [user("before <diff>\n- a\n+ b\n</diff> after"), user("next")]
    assert strip(messages)[0]["content"] == "before  after"


def test_the_default_pattern_is_greedy_as_in_swe_agent() -> None:
    messages = [user("a <diff>1</diff> b <diff>2</diff> c")]
    assert strip(messages)[0]["content"] == "a  c"


def test_patterns_apply_in_the_order_given() -> None:
    assert strip([user("abc")], remove=["b", "ac"])[0]["content"] == ""
    assert strip([user("abc")], remove=["ac", "b"])[0]["content"] == "ac"


def test_the_newest_keep_last_messages_are_unchanged() -> None:
    messages = [user("x secret"), assistant("y secret"), user("z secret")]
    out = strip(messages, remove=[" secret"], keep_last=2)
    assert out[0]["content"] == "x"
    assert out[1] is messages[1] and out[2] is messages[2]


def test_keep_last_counts_every_role() -> None:
    messages = [user("old secret"), *exchange(output="tool secret"), user("new secret")]
    out = strip(messages, remove=[" secret"], keep_last=2)
    assert [m["content"] for m in out] == ["old", None, "tool secret", "new secret"]


def test_keep_last_beyond_the_list_changes_nothing() -> None:
    messages = [user("a secret")]
    assert strip(messages, remove=["secret"], keep_last=5) == messages


def test_only_text_parts_of_list_content_are_edited() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,secretAAAA"}}
    messages = [
        user([{"type": "text", "text": "a secret", "cache_control": {"type": "ephemeral"}}, image]),
        user(),
    ]
    out = strip(messages, remove=[" ?secret"])
    assert out[0]["content"] == [{"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}}, image]


def test_tool_calls_and_other_fields_are_not_touched() -> None:
    act = action(text="calling secret", name="agent-secret")
    out = strip([user(), act], remove=["secret"])
    assert out[1]["tool_calls"] == act["tool_calls"] and out[1]["name"] == "agent-secret"
    assert out[1]["content"] == "calling "


def test_an_action_whose_text_becomes_empty_keeps_its_tool_calls() -> None:
    act = action(text="<diff>x</diff>")
    out = strip([user(), act], keep_last=0)
    assert out[1]["content"] == "" and out[1]["tool_calls"] == act["tool_calls"]
    assert invariant_errors(out) == {}


def test_an_assistant_message_made_only_of_matches_keeps_a_placeholder_not_the_match() -> None:
    secret = "sk-" + "a1B2c3D4e5" * 3
    messages = [user(), assistant(secret), user("next")]
    out = strip(messages, remove=["sk-[A-Za-z0-9]{20,}"])
    assert out[1] == {"role": "assistant", "content": PLACEHOLDER}
    assert invariant_errors(out) == {}
    assert messages[1]["content"] == secret  # the input is not edited in place


def test_a_placeholder_replaces_each_emptied_text_part_and_leaves_the_rest() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    parts = [{"type": "text", "text": "<diff>x</diff>", "cache_control": {"type": "ephemeral"}}, image]
    out = strip([user(), {"role": "assistant", "content": parts}, user("next")])
    assert out[1]["content"] == [
        {"type": "text", "text": PLACEHOLDER, "cache_control": {"type": "ephemeral"}},
        image,
    ]
    assert invariant_errors(out) == {}


def test_an_assistant_message_keeping_some_text_gets_no_placeholder() -> None:
    parts = [{"type": "text", "text": "<diff>x</diff>"}, {"type": "text", "text": "kept"}]
    out = strip([user(), {"role": "assistant", "content": parts}, user("next")])
    assert out[1]["content"] == [{"type": "text", "text": ""}, {"type": "text", "text": "kept"}]


def test_a_user_message_may_become_empty() -> None:
    assert strip([user("<diff>x</diff>"), user("next")])[0]["content"] == ""


def test_null_content_is_left_alone_and_unmatched_messages_are_the_same_objects() -> None:
    messages = [system(), user("nothing to remove"), *exchange()]
    snapshot = copy.deepcopy(messages)
    out = strip(messages)
    assert all(a is b for a, b in zip(out, messages, strict=True))
    assert messages == snapshot


def test_input_is_not_mutated_when_text_changes() -> None:
    messages = [user([{"type": "text", "text": "<diff>x</diff>y"}]), user("<diff>z</diff>")]
    snapshot = copy.deepcopy(messages)
    strip(messages)
    assert messages == snapshot


def test_an_invalid_regex_is_a_config_error_naming_the_pattern() -> None:
    raw = {
        "upstreams": {"mock": {"base_url": "mock://"}},
        "policies": {"roles": {"worker": [{"type": "remove_regex", "remove": ["ok", "(unclosed"]}]}},
    }
    with pytest.raises(ConfigError) as caught:
        parse_config(raw)
    [error] = caught.value.errors
    assert error.startswith("policies.roles.worker[0].remove: invalid regex '(unclosed'")


def test_keep_last_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        RemoveRegex(type="remove_regex", keep_last=-1)


def test_example_config_enables_the_filter() -> None:
    config = load_config(ROOT / "config" / "examples" / "remove_regex.yaml")
    assert any(f.type_name == "remove_regex" for f in role_filters(config))
    doc = (ROOT / "docs" / "filters" / "remove_regex.md").read_text(encoding="utf-8")
    assert doc.startswith("### remove_regex")


@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.name)
def test_corpus_output_keeps_the_invariants_even_when_every_character_is_removed(path: Path) -> None:
    messages = corpus_body(path.name)["messages"]
    snapshot = copy.deepcopy(messages)
    cases: list[dict[str, Any]] = [
        {"remove": [".*"]},
        {"remove": [r"\d+", "<diff>.*</diff>"], "keep_last": 3},
    ]
    for params in cases:
        out = strip(messages, **params)
        assert messages == snapshot
        assert invariant_errors(out) == {}
        assert [m["role"] for m in out] == [m["role"] for m in messages]
    emptied = strip(messages, remove=[".*"])
    assert all(
        m["content"] == "" for m in emptied if m["role"] != "assistant" and isinstance(m["content"], str)
    )
