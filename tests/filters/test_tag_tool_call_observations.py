"""``tag_tool_call_observations``: tag the results of calls to named tools."""

from __future__ import annotations

import collections
import copy
from pathlib import Path
from typing import Any

import pytest

from history_proxy.config.loading import ConfigError, load_config, parse_config
from history_proxy.core.invariants import invariant_errors
from history_proxy.core.messages import Message, tool_call_names
from history_proxy.filters.base import FilterContext
from history_proxy.filters.last_n_observations import LastNObservations
from history_proxy.filters.tag_tool_call_observations import TagToolCallObservations
from tests.factories import (
    action,
    call,
    corpus_body,
    corpus_files,
    exchange,
    parallel,
    result,
    role_filters,
    system,
    user,
)

ROOT = Path(__file__).resolve().parents[2]


def tag(messages: list[Message], names: set[str], tags: set[str] | None = None) -> list[Message]:
    extra: dict[str, Any] = {} if tags is None else {"tags": tags}
    return TagToolCallObservations(
        type="tag_tool_call_observations", function_names=frozenset(names), **extra
    ).apply(messages, FilterContext())


def test_results_of_calls_to_the_named_tools_get_the_keep_output_tag() -> None:
    messages = [user(), *exchange("view_file", output="file body"), *exchange("bash", output="ls")]
    out = tag(messages, {"view_file"})
    assert out[2]["tags"] == ["keep_output"]
    assert out[2]["content"] == "file body" and out[2]["tool_call_id"] == messages[2]["tool_call_id"]


def test_the_action_making_the_call_is_tagged_too_as_swe_agent_does() -> None:
    messages = [user(), *exchange("view_file")]
    assert tag(messages, {"view_file"})[1]["tags"] == ["keep_output"]


def test_other_tools_are_left_as_the_same_objects() -> None:
    messages = [user(), *exchange("view_file"), *exchange("bash")]
    out = tag(messages, {"view_file"})
    assert out[0] is messages[0] and out[3] is messages[3] and out[4] is messages[4]


def test_among_parallel_calls_only_the_matching_results_are_tagged() -> None:
    messages = [user(), *parallel("bash", "view_file", "bash")]
    out = tag(messages, {"view_file"})
    assert [m.get("tags") for m in out[2:]] == [None, ["keep_output"], None]


def test_results_are_matched_by_tool_call_id_not_by_position() -> None:
    first, second = call("bash"), call("view_file")
    act = action(first, second)
    messages = [user(), act, result(second, "viewed"), result(first, "ran")]
    out = tag(messages, {"view_file"})
    assert out[2]["tags"] == ["keep_output"] and "tags" not in out[3]


def test_existing_tags_are_kept_and_the_union_is_sorted() -> None:
    messages = [user(), *exchange("view_file")]
    messages[2] = {**messages[2], "tags": ["zeta", "alpha"]}
    assert tag(messages, {"view_file"}, {"keep_output", "beta"})[2]["tags"] == [
        "alpha",
        "beta",
        "keep_output",
        "zeta",
    ]


def test_applying_twice_equals_applying_once_and_keeps_the_tagged_objects() -> None:
    messages = [user(), *exchange("view_file"), *exchange("bash")]
    once = tag(messages, {"view_file"})
    twice = tag(once, {"view_file"})
    assert twice == once and all(a is b for a, b in zip(once, twice, strict=True))


def test_input_is_not_mutated() -> None:
    messages = [user(), *exchange("view_file")]
    snapshot = copy.deepcopy(messages)
    tag(messages, {"view_file"})
    assert messages == snapshot


def test_tagged_results_survive_last_n_observations() -> None:
    messages = [system(), user("template"), *exchange("view_file", output="the file\nbody")]
    for _ in range(6):
        messages += exchange("bash", output="noise")
    tagged = tag(messages, {"view_file"})
    out = LastNObservations(type="last_n_observations", n=2).apply(tagged, FilterContext())
    assert out[3]["content"] == "the file\nbody"
    assert out[5]["content"] == "Old environment output: (1 lines omitted)"


def test_function_names_are_required_and_not_empty() -> None:
    raw: dict[str, Any] = {"upstreams": {"mock": {"base_url": "mock://"}}}
    for chain, error in [
        ({"type": "tag_tool_call_observations"}, "policies.roles.worker[0].function_names: required"),
        (
            {"type": "tag_tool_call_observations", "function_names": []},
            "policies.roles.worker[0].function_names: ",
        ),
    ]:
        with pytest.raises(ConfigError) as caught:
            parse_config({**raw, "policies": {"roles": {"worker": [chain]}}})
        assert caught.value.errors[0].startswith(error)


def test_example_config_enables_the_filter() -> None:
    config = load_config(ROOT / "config" / "examples" / "tag_tool_call_observations.yaml")
    assert any(f.type_name == "tag_tool_call_observations" for f in role_filters(config))
    doc = (ROOT / "docs" / "filters" / "tag_tool_call_observations.md").read_text(encoding="utf-8")
    assert doc.startswith("### tag_tool_call_observations")


@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.name)
def test_corpus_output_keeps_the_invariants_and_tags_every_result_of_the_named_tool(path: Path) -> None:
    messages = corpus_body(path.name)["messages"]
    names = collections.Counter(name for m in messages for name in tool_call_names(m))
    if not names:
        assert tag(messages, {"bash"}) == messages
        return
    name = names.most_common(1)[0][0]
    out = tag(messages, {name})
    assert invariant_errors(out) == {}
    assert [{k: v for k, v in m.items() if k != "tags"} for m in out] == messages
    answered = {
        m["tool_call_id"] for m in out if m.get("role") == "tool" and m.get("tags") == ["keep_output"]
    }
    assert answered, f"no result of {name} tagged"
