"""``tool_call_filter``: removes the named tool calls and all their results (AgentKit's ToolCallFilter)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from history_proxy.core.invariants import broken_invariants, invariant_errors
from history_proxy.core.messages import Message, NotApplicable
from history_proxy.filters.base import FilterContext
from history_proxy.filters.tool_call_filter import ToolCallFilter
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


def run(messages: list[Message], **options: Any) -> list[Message]:
    return ToolCallFilter(type="tool_call_filter", **options).apply(messages, FilterContext(model="gpt-4o"))


def roles(messages: list[Message]) -> list[str]:
    return [m["role"] for m in messages]


def names_called(messages: list[Message]) -> list[str]:
    return [c["function"]["name"] for m in messages for c in m.get("tool_calls") or []]


def test_without_options_every_tool_call_and_result_is_removed() -> None:
    messages = [
        system(),
        user("task"),
        *exchange("search", "found"),
        *exchange("bash", "ran"),
        assistant("done"),
    ]
    assert run(messages) == [messages[0], messages[1], messages[-1]]


def test_exclude_removes_only_the_named_tools() -> None:
    messages = [
        user("task"),
        *exchange("debug_log", "noise"),
        *exchange("search", "found"),
        assistant("done"),
    ]
    out = run(messages, exclude=["debug_log"])
    assert out == [messages[0], messages[3], messages[4], messages[5]]


def test_include_keeps_only_the_named_tools() -> None:
    messages = [user("task"), *exchange("debug_log"), *exchange("search", "found"), *exchange("bash")]
    out = run(messages, include=["search"])
    assert names_called(out) == ["search"]
    assert [m["content"] for m in out if m["role"] == "tool"] == ["found"]


def test_an_empty_exclude_list_removes_nothing_and_an_empty_include_list_removes_everything() -> None:
    messages = [user("task"), *exchange("search"), assistant("done")]
    assert run(messages, exclude=[]) == messages
    assert run(messages, include=[]) == [messages[0], messages[-1]]


def test_exclude_and_include_together_are_a_config_error() -> None:
    with pytest.raises(ValidationError, match="give exclude or include, not both"):
        ToolCallFilter(type="tool_call_filter", exclude=["a"], include=["b"])


def test_one_call_of_a_parallel_group_is_removed_with_its_result_and_the_others_stay() -> None:
    messages = [user("task"), *parallel("search", "debug_log", "fetch", outputs=["s", "d", "f"])]
    out = run(messages, exclude=["debug_log"])
    assert names_called(out) == ["search", "fetch"]
    assert [m["content"] for m in out if m["role"] == "tool"] == ["s", "f"]
    assert invariant_errors(out) == {}


def test_an_assistant_message_left_without_calls_keeps_its_text() -> None:
    act = action(call("search"), text="Let me look that up.", name="researcher", reasoning_content="why")
    messages = [user("task"), act, result(act, "found")]
    out = run(messages)
    assert out == [
        messages[0],
        {
            "role": "assistant",
            "content": "Let me look that up.",
            "name": "researcher",
            "reasoning_content": "why",
        },
    ]


def test_an_assistant_message_left_without_calls_and_without_text_disappears() -> None:
    messages = [user("task"), *exchange("search", text=None), assistant("done")]
    assert roles(run(messages)) == ["user", "assistant"]


def test_persist_results_leaves_a_note_naming_the_removed_tool() -> None:
    messages = [user("task"), *exchange("search_tool", "found"), assistant("done")]
    out = run(messages, persist_results=True)
    assert out[1] == {"role": "assistant", "content": "Used **search_tool** tool"}
    assert roles(out) == ["user", "assistant", "assistant"]


def test_persist_results_lists_several_removed_tools_in_call_order() -> None:
    messages = [user("task"), *parallel("search", "fetch", "bash")]
    out = run(messages, persist_results=True)
    assert out[1]["content"] == "Used tools: search, fetch, bash"


def test_persist_results_appends_the_note_to_the_assistant_text_on_a_new_line() -> None:
    act = action(call("search"), text="Looking it up.")
    out = run([user("task"), act, result(act)], persist_results=True)
    assert out[1]["content"] == "Looking it up.\nUsed **search** tool"


def test_persist_results_notes_only_the_removed_calls_when_some_remain() -> None:
    messages = [user("task"), *parallel("search", "debug_log", "fetch")]
    out = run(messages, exclude=["debug_log"], persist_results=True)
    assert out[1]["content"] == "Used **debug_log** tool"
    assert names_called(out) == ["search", "fetch"]
    assert invariant_errors(out) == {}


def test_persist_results_in_include_mode_notes_what_was_hidden() -> None:
    messages = [user("task"), *parallel("search", "debug_log", "fetch")]
    out = run(messages, include=["search"], persist_results=True)
    assert out[1]["content"] == "Used tools: debug_log, fetch"
    assert names_called(out) == ["search"]


def test_a_note_joins_text_part_content_as_one_more_text_part() -> None:
    parts = [{"type": "text", "text": "Looking it up."}]
    act = action(call("search"), text=None)
    act["content"] = parts
    out = run([user("task"), act, result(act)], persist_results=True)
    assert out[1]["content"] == [*parts, {"type": "text", "text": "Used **search** tool"}]
    assert act["content"] is parts and len(parts) == 1


def test_text_part_content_counts_as_text_when_calls_are_removed() -> None:
    act = action(call("search"), text=None)
    act["content"] = [{"type": "text", "text": "Looking it up."}]
    out = run([user("task"), act, result(act)])
    assert out[1] == {"role": "assistant", "content": [{"type": "text", "text": "Looking it up."}]}


def test_a_reused_call_id_pairs_each_result_with_the_nearest_preceding_call() -> None:
    first = action(call("search", call_id="call_0"))
    second = action(call("bash", call_id="call_0"))
    messages = [
        user("task"),
        first,
        result(first, "search out"),
        user("again"),
        second,
        result(second, "bash out"),
    ]
    out = run(messages, exclude=["search"])
    assert out == [messages[0], messages[3], second, messages[5]]
    out = run(messages, exclude=["bash"])
    assert out == messages[:4]


def test_a_trailing_call_without_results_yet_is_removed_cleanly() -> None:
    messages = [user("task"), action(call("debug_log"), call("search"))]
    out = run(messages, exclude=["debug_log"])
    assert names_called(out) == ["search"]
    assert invariant_errors(out) == {}


def test_unknown_fields_are_kept_on_rewritten_and_untouched_messages() -> None:
    calls = [call("search"), call("debug_log")]
    act = action(*calls, text="hm", refusal=None, x_vendor={"a": 1}, agent="coder")
    messages = [user("task", x_trace="t1"), act, result(calls[0], "s", name="search"), result(calls[1], "d")]
    out = run(messages, exclude=["debug_log"])
    assert out[0] is messages[0]
    assert {k: v for k, v in out[1].items() if k != "tool_calls"} == {
        k: v for k, v in act.items() if k != "tool_calls"
    }
    assert out[2] is messages[2]


def test_unchanged_messages_are_the_input_objects_and_the_input_is_not_mutated() -> None:
    messages = [
        system(),
        user("task"),
        *parallel("search", "debug_log"),
        *exchange("bash"),
        assistant("done"),
    ]
    snapshot = copy.deepcopy(messages)
    out = run(messages, exclude=["debug_log"], persist_results=True)
    assert messages == snapshot
    assert out[0] is messages[0] and out[1] is messages[1] and out[-1] is messages[-1]
    assert out is not messages


def test_a_request_holding_only_removed_calls_cannot_be_filtered() -> None:
    messages = exchange("search")
    with pytest.raises(NotApplicable, match="nothing would be left"):
        run(messages)
    assert run(messages, persist_results=True) == [{"role": "assistant", "content": "Used **search** tool"}]


def test_the_filter_is_idempotent() -> None:
    messages = [user("task"), *parallel("search", "debug_log"), *exchange("debug_log"), assistant("done")]
    once = run(messages, exclude=["debug_log"])
    assert run(once, exclude=["debug_log"]) == once


@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.stem)
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"persist_results": True},
        {"exclude": ["think", "browser_get_state"]},
        {"include": ["execute_bash"]},
    ],
    ids=["all", "all-persist", "exclude", "include"],
)
def test_corpus_output_keeps_the_invariants(path: Path, options: dict[str, Any]) -> None:
    messages = corpus_body(path.name)["messages"]
    snapshot = copy.deepcopy(messages)
    try:
        out = run(messages, **options)
    except NotApplicable:
        assert all(m["role"] in ("assistant", "tool") for m in messages)
        return
    assert broken_invariants(messages, out) == []
    assert messages == snapshot
    removed = set(names_called(messages)) - set(names_called(out))
    if "include" in options:
        assert set(names_called(out)) <= set(options["include"])
    elif "exclude" in options:
        assert not set(names_called(out)) & set(options["exclude"])
        assert removed <= set(options["exclude"])
    else:
        assert names_called(out) == [] and all(m["role"] != "tool" for m in out)
    assert [m for m in out if m["role"] in ("system", "user")] == [
        m for m in messages if m["role"] in ("system", "user")
    ]
