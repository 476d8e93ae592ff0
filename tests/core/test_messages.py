"""history_proxy/core/messages.py: turns, groups, message types, annotations, text helpers and the invariants."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from history_proxy.core.invariants import (
    broken_invariants,
    cache_mark_count,
    invariant_errors,
    invariants_hold,
    tool_pair_errors,
)
from history_proxy.core.messages import (
    Message,
    classify,
    current_turn_start,
    group_spans,
    groups,
    has_text,
    image_count,
    is_action,
    is_turn_start,
    keep_spans,
    leading_system_count,
    map_text,
    newest_user_index,
    strip_annotations,
    tags_of,
    text_of,
    tool_call_ids,
    tool_call_names,
    turn_spans,
)
from tests.factories import action, assistant, call, exchange, parallel, result, system, user
from tests.strategies import PROPERTY_SETTINGS, conversations

# --- turns ------------------------------------------------------------------------------------


def test_every_user_message_starts_a_turn_and_the_leading_system_forms_a_preamble() -> None:
    messages = [system(), user("a"), assistant("b"), *exchange(), user("c"), assistant("d")]
    assert turn_spans(messages) == [(0, 1), (1, 5), (5, 7)]
    assert current_turn_start(messages) == 5


def test_a_conversation_opening_with_a_user_message_has_no_preamble() -> None:
    assert turn_spans([user("a"), assistant("b"), user("c")]) == [(0, 2), (2, 3)]


def test_messages_before_the_first_user_message_form_the_preamble_turn() -> None:
    messages = [system(), assistant("hello"), user("task")]
    assert turn_spans(messages) == [(0, 2), (2, 3)]


def test_a_task_annotation_starts_a_turn_on_any_role() -> None:
    handoff = assistant("over to you", message_type="task")
    messages = [user("a"), assistant("b"), handoff, assistant("c")]
    assert is_turn_start(handoff)
    assert turn_spans(messages) == [(0, 2), (2, 4)]
    assert current_turn_start(messages) == 2


def test_a_user_message_annotated_as_observation_does_not_start_a_turn() -> None:
    observation = user("output of ls", message_type="observation")
    messages = [system(), user("task"), assistant("ls"), observation]
    assert not is_turn_start(observation)
    assert turn_spans(messages) == [(0, 1), (1, 4)]


def test_turn_spans_of_an_empty_list_are_empty_and_current_turn_starts_at_zero() -> None:
    assert turn_spans([]) == []
    assert current_turn_start([]) == 0


def test_turn_spans_honour_a_start_and_end_window() -> None:
    messages = [system(), user("a"), assistant("b"), user("c"), assistant("d")]
    assert turn_spans(messages, 1, 4) == [(1, 3), (3, 4)]


# --- groups -----------------------------------------------------------------------------------


def test_parallel_calls_and_all_their_results_form_one_group() -> None:
    messages = [user(), *parallel("bash", "search", "view_file"), assistant("done")]
    assert group_spans(messages) == [(0, 1), (1, 5), (5, 6)]
    assert [len(g) for g in groups(messages)] == [1, 4, 1]


def test_a_stray_tool_message_is_a_group_alone() -> None:
    stray = {"role": "tool", "tool_call_id": "call_x", "content": "orphan"}
    messages = [user(), stray, assistant("ok")]
    assert group_spans(messages) == [(0, 1), (1, 2), (2, 3)]


def test_a_trailing_unanswered_action_is_a_group_alone() -> None:
    messages = [user(), action()]
    assert group_spans(messages) == [(0, 1), (1, 2)]


def test_assistant_text_with_tool_calls_owns_the_results_that_follow() -> None:
    act = action(call("bash"), text="Let me look.")
    messages = [user(), act, result(act)]
    assert group_spans(messages) == [(0, 1), (1, 3)]


def test_a_turn_never_starts_inside_a_group() -> None:
    act = action(call("bash"))
    messages = [user("a"), act, result(act), user("b")]
    assert [a for a, _ in turn_spans(messages)] == [0, 3]


def test_keep_spans_concatenates_the_chosen_spans_in_order() -> None:
    messages = [user("a"), assistant("b"), user("c"), assistant("d")]
    assert keep_spans(messages, [(0, 1), (2, 4)]) == [messages[0], messages[2], messages[3]]


# --- classify -----------------------------------------------------------------------------------


def test_message_types_are_inferred_from_roles_and_tool_calls() -> None:
    act, out = exchange("bash")
    messages = [system(), user(), act, out, assistant("text")]
    assert classify(messages) == ["system", "task", "action", "observation", "conversation"]


def test_a_completion_tool_call_and_its_results_are_final() -> None:
    act = action(call("final_answer"), call("bash"))
    messages = [
        user(),
        act,
        result(act["tool_calls"][0]),
        result(act["tool_calls"][1]),
        *exchange("bash"),
    ]
    assert classify(messages) == ["task", "final", "final", "final", "action", "observation"]


def test_completion_tools_are_configurable() -> None:
    act, out = exchange("wrap_up")
    assert classify([act, out], completion_tools={"wrap_up"}) == ["final", "final"]
    assert classify([act, out]) == ["action", "observation"]


def test_an_annotation_overrides_the_inferred_type() -> None:
    messages = [
        assistant("phase 1 result", message_type="synthesis", phase_id=1),
        user("shared", message_type="global_observation"),
    ]
    assert classify(messages) == ["synthesis", "global_observation"]


def test_results_after_a_final_group_are_not_final() -> None:
    final_act, final_out = exchange("submit")
    messages = [final_act, final_out, assistant("after"), *exchange("bash")]
    assert classify(messages) == ["final", "final", "conversation", "action", "observation"]


# --- annotations ------------------------------------------------------------------------------


def test_strip_annotations_removes_only_annotation_keys_and_leaves_the_input_alone() -> None:
    annotated = user("a", tags=["keep_output"], message_type="task", phase_id=2, agent="alice", name="bob")
    plain = assistant("b")
    messages = [annotated, plain]
    before = copy.deepcopy(messages)
    stripped = strip_annotations(messages)
    assert stripped == [{"role": "user", "content": "a", "name": "bob"}, plain]
    assert stripped[1] is plain
    assert messages == before


def test_tags_of_reads_the_tags_annotation_as_a_set() -> None:
    assert tags_of(user(tags=["keep_output", "x"])) == {"keep_output", "x"}
    assert tags_of(user()) == frozenset()
    assert tags_of(user(tags="keep_output")) == frozenset()


# --- text and tool-call helpers ----------------------------------------------------------------


def test_text_of_joins_text_parts_and_ignores_images_and_null() -> None:
    parts = [
        {"type": "text", "text": "one"},
        {"type": "image_url", "image_url": {"url": "data:"}},
        {"type": "text", "text": "two"},
    ]
    assert text_of("plain") == "plain"
    assert text_of(parts) == "one\ntwo"
    assert text_of(None) == ""
    assert image_count(parts) == 1
    assert image_count("plain") == 0


def test_has_text_is_false_for_blank_or_missing_content() -> None:
    assert has_text(assistant("hi"))
    assert not has_text(assistant("  \n"))
    assert not has_text(assistant(None))
    assert not has_text({"role": "assistant", "content": [{"type": "text", "text": " "}]})


def test_map_text_changes_strings_and_text_parts_only_and_returns_new_objects() -> None:
    parts: list[dict[str, Any]] = [
        {"type": "text", "text": "abc", "cache_control": {"type": "ephemeral"}},
        {"type": "image_url"},
    ]
    changed = map_text(parts, str.upper)
    assert changed == [
        {"type": "text", "text": "ABC", "cache_control": {"type": "ephemeral"}},
        {"type": "image_url"},
    ]
    assert parts[0]["text"] == "abc"
    assert map_text("abc", str.upper) == "ABC"
    assert map_text(None, str.upper) is None


def test_tool_call_helpers_read_names_and_ids_in_order() -> None:
    act = action(call("bash", call_id="c1"), call("search", call_id="c2"))
    assert is_action(act)
    assert tool_call_names(act) == ["bash", "search"]
    assert tool_call_ids(act) == ["c1", "c2"]
    assert not is_action(assistant("text"))
    assert not is_action({"role": "assistant", "content": "x", "tool_calls": []})


def test_leading_system_count_counts_system_and_developer_messages() -> None:
    messages = [system(), {"role": "developer", "content": "d"}, user(), system("mid")]
    assert leading_system_count(messages) == 2
    assert leading_system_count([user()]) == 0


def test_newest_user_index_finds_the_last_user_message() -> None:
    assert newest_user_index([user("a"), assistant(), user("b"), *exchange()]) == 2
    assert newest_user_index([system(), assistant()]) is None


# --- invariants -------------------------------------------------------------------------------


def test_a_valid_conversation_has_no_invariant_errors() -> None:
    act = action(call("bash", call_id="a"), call("search", call_id="b"))
    messages = [
        system(),
        user(),
        act,
        result(act["tool_calls"][1]),  # parallel results may come in any order
        result(act["tool_calls"][0]),
        assistant("done"),
        user("next"),
        action(call("bash", call_id="a")),  # ids may repeat across turns; a trailing action may be unanswered
    ]
    assert invariant_errors(messages) == {}


def test_an_empty_list_breaks_non_empty() -> None:
    assert invariant_errors([]) == {"non_empty": ["the message list is empty"]}


def test_a_tool_message_without_a_preceding_call_is_reported() -> None:
    errors = invariant_errors([user(), {"role": "tool", "tool_call_id": "x", "content": "?"}])
    assert list(errors) == ["tool_pairs"]
    assert "messages[1]" in errors["tool_pairs"][0]


def test_a_tool_message_answering_an_unknown_id_is_reported() -> None:
    act = action(call(call_id="a"))
    errors = tool_pair_errors([user(), act, {"role": "tool", "tool_call_id": "b", "content": "?"}])
    assert errors == ["messages[2]: tool_call_id 'b' answers no call of messages[1]"]


def test_a_call_answered_twice_is_reported() -> None:
    act = action(call(call_id="a"))
    errors = tool_pair_errors([act, result(act), result(act)])
    assert len(errors) == 1 and "messages[2]" in errors[0]


def test_a_call_left_unanswered_before_the_next_message_is_reported() -> None:
    act = action(call(call_id="a"), call(call_id="b"))
    errors = tool_pair_errors([user(), act, result(act["tool_calls"][0]), user("next")])
    assert errors == ["messages[1]: tool calls ['b'] not answered before messages[3]"]


def test_a_tool_message_after_a_user_message_is_not_an_answer() -> None:
    act = action(call(call_id="a"))
    errors = tool_pair_errors([act, user(), result(act)])
    assert len(errors) == 2


def test_an_assistant_message_with_neither_content_nor_calls_is_reported() -> None:
    errors = invariant_errors([user(), assistant(None), assistant("   ")])
    assert errors == {
        "assistant_content": [
            "messages[1]: assistant message with neither content nor tool_calls",
            "messages[2]: assistant message with neither content nor tool_calls",
        ]
    }


def test_an_assistant_refusal_counts_as_content() -> None:
    assert invariant_errors([user(), {"role": "assistant", "content": None, "refusal": "I can't."}]) == {}


def test_more_than_four_cache_marks_are_reported() -> None:
    mark = {"type": "ephemeral"}
    marked = [user(f"{i}", cache_control=mark) for i in range(3)]
    parts = {"role": "user", "content": [{"type": "text", "text": "a", "cache_control": mark}] * 2}
    assert cache_mark_count([*marked, parts]) == 5
    assert list(invariant_errors([*marked, parts])) == ["cache_marks"]
    assert invariant_errors(marked) == {}


def test_broken_invariants_names_only_what_the_filter_broke() -> None:
    act = action(call(call_id="a"))
    valid = [user(), act, result(act), assistant("ok")]
    assert broken_invariants(valid, valid) == []
    broken = broken_invariants(valid, [user(), act, assistant("ok")])
    assert len(broken) == 1 and broken[0].startswith("tool_pairs: ")
    assert broken_invariants(valid, []) == ["non_empty: the message list is empty"]


def test_an_input_that_already_broke_an_invariant_is_not_held_to_it() -> None:
    stray = [user(), {"role": "tool", "tool_call_id": "x", "content": "?"}]
    assert broken_invariants(stray, stray) == []
    assert broken_invariants(stray, [*stray, assistant(None)]) == [
        "assistant_content: messages[2]: assistant message with neither content nor tool_calls"
    ]


# --- the one-pass check ---------------------------------------------------------------------


def _damaged(messages: list[Message], how: str, at: int) -> list[Message]:
    """``messages`` with one thing a buggy filter might do to it."""
    i = at % len(messages)
    mark = {"type": "ephemeral"}
    if how == "drop":
        return messages[:i] + messages[i + 1 :]
    if how == "duplicate":
        return [*messages[: i + 1], messages[i], *messages[i + 1 :]]
    if how == "blank":
        return [*messages[:i], {**messages[i], "content": "  ", "tool_calls": []}, *messages[i + 1 :]]
    if how == "mark":
        return [{**m, "cache_control": mark} for m in messages]
    return list(reversed(messages))


@PROPERTY_SETTINGS
@given(
    conversations(),
    st.sampled_from(["none", "drop", "duplicate", "blank", "mark", "reverse"]),
    st.integers(min_value=0, max_value=200),
)
def test_invariants_hold_exactly_when_there_are_no_invariant_errors(
    messages: list[Message], how: str, at: int
) -> None:
    changed = messages if how == "none" else _damaged(messages, how, at)
    assert invariants_hold(changed) == (invariant_errors(changed) == {})


def test_invariants_hold_agrees_on_every_hand_made_case() -> None:
    act = action(call(call_id="a"), call(call_id="b"))
    cases = [
        [],
        [user(), act, result(act["tool_calls"][1]), result(act["tool_calls"][0]), assistant("ok")],
        [user(), act, result(act["tool_calls"][0]), user("next")],
        [user(), {"role": "tool", "tool_call_id": "x", "content": "?"}],
        [act, result(act["tool_calls"][0]), result(act["tool_calls"][0])],
        [user(), assistant(None)],
        [user(), {"role": "assistant", "content": [{"type": "text", "text": " "}]}],
        [user(), {"role": "assistant", "content": None, "refusal": "no"}],
        [user(f"{i}", cache_control={"type": "ephemeral"}) for i in range(5)],
        [user(), act],
    ]
    for messages in cases:
        assert invariants_hold(messages) == (invariant_errors(messages) == {}), messages
