"""``manager_view``: leading system, the previous phase's syntheses, then the current turn verbatim."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from history_proxy.core.invariants import invariant_errors
from history_proxy.core.messages import Message, leading_system_count, newest_user_index
from history_proxy.filters._views import Turns, view_turn
from history_proxy.filters.base import FilterContext
from history_proxy.filters.manager_view import ManagerView
from tests.factories import action, assistant, call, corpus_body, corpus_files, exchange, result, system, user


def view(
    messages: list[Message],
    phase: str | None = "2",
    previous_phase_id: int | str | None = None,
    notes: list[str] | None = None,
    turns: Turns = "first_user",
) -> list[Message]:
    ctx = FilterContext(role="manager", phase=phase, notes=notes if notes is not None else [])
    return ManagerView(type="manager_view", previous_phase_id=previous_phase_id, turns=turns).apply(
        messages, ctx
    )


def task(text: str) -> Message:
    return user(text, message_type="task")


def synthesis(text: str, phase_id: int | str, **extra: object) -> Message:
    return assistant(text, message_type="synthesis", phase_id=phase_id, **extra)


def phased_history() -> list[Message]:
    return [
        system("manage"),
        task("phase 0 work"),
        *exchange("bash", output="phase 0 trace"),
        synthesis("phase 0 summary", 0),
        task("phase 1 work"),
        assistant("worker chatter"),
        synthesis("phase 1 summary", 1),
        assistant("a final word", message_type="final", phase_id=1),
        task("phase 2 work"),
    ]


def contents(messages: list[Message]) -> list[object]:
    return [m.get("content") for m in messages]


def test_manager_sees_only_the_previous_phase_syntheses() -> None:
    assert contents(view(phased_history(), phase="2")) == ["manage", "phase 1 summary", "phase 2 work"]


def test_phase_one_sees_the_phase_zero_synthesis() -> None:
    assert contents(view(phased_history(), phase="1")) == ["manage", "phase 0 summary", "phase 2 work"]


def test_phase_zero_sees_no_synthesis() -> None:
    assert contents(view(phased_history(), phase="0")) == ["manage", "phase 2 work"]


def test_phase_ids_compare_as_text() -> None:
    messages = [task("w"), synthesis("as text", "1"), synthesis("as number", 1), task("now")]
    assert contents(view(messages, phase="2")) == ["as text", "as number", "now"]


def test_without_a_phase_header_the_previous_phase_is_the_newest_synthesis_phase_with_a_note() -> None:
    notes: list[str] = []
    assert contents(view(phased_history(), phase=None, notes=notes)) == [
        "manage",
        "phase 1 summary",
        "phase 2 work",
    ]
    assert notes == ["manager_view:phase_inferred"]


def test_a_phase_that_is_not_an_integer_is_a_hint_not_an_error() -> None:
    notes: list[str] = []
    assert contents(view(phased_history(), phase="design", notes=notes)) == [
        "manage",
        "phase 1 summary",
        "phase 2 work",
    ]
    assert notes == ["manager_view:phase_not_integer", "manager_view:phase_inferred"]


def test_with_no_phase_and_no_synthesis_the_manager_keeps_system_and_current_turn_with_a_note() -> None:
    notes: list[str] = []
    messages = [system("manage"), user("Current Task: plan the article"), *exchange("delegate_work")]
    assert view(messages, phase=None, notes=notes) == messages
    assert notes == ["manager_view:phase_unknown"]


def test_configured_previous_phase_needs_no_header_and_wins_over_it() -> None:
    assert contents(view(phased_history(), phase=None, previous_phase_id=0)) == [
        "manage",
        "phase 0 summary",
        "phase 2 work",
    ]
    assert contents(view(phased_history(), phase="2", previous_phase_id="0")) == [
        "manage",
        "phase 0 summary",
        "phase 2 work",
    ]


def test_current_turn_is_kept_verbatim() -> None:
    current = [
        user("phase 2 work"),
        *exchange("bash", output="trace"),
        synthesis("phase 2 draft", 2),
        assistant("ok"),
    ]
    messages = [*phased_history()[:-1], *current]
    out = view(messages, phase="2")
    assert out[-len(current) :] == current
    assert all(a is b for a, b in zip(out[-len(current) :], current, strict=True))


def test_a_synthesis_with_tool_calls_keeps_only_its_text() -> None:
    with_calls = action(call("handoff"), text="phase 1 summary", message_type="synthesis", phase_id=1)
    only_calls = action(call("handoff"), message_type="synthesis", phase_id=1)
    messages = [task("w"), with_calls, result(with_calls), only_calls, result(only_calls), task("now")]
    out = view(messages, phase="2")
    assert contents(out) == ["phase 1 summary", "now"]
    assert "tool_calls" not in out[0] and out[0]["phase_id"] == 1
    assert "tool_calls" in with_calls
    assert invariant_errors(out) == {}


def test_tool_messages_annotated_synthesis_are_not_shown_without_their_call() -> None:
    act = action(call("summarize"))
    messages = [task("w"), act, result(act, "summary", message_type="synthesis", phase_id=1), task("now")]
    assert contents(view(messages, phase="2")) == ["now"]


def test_without_annotations_the_manager_keeps_its_task_and_everything_since_by_default() -> None:
    messages = [system(), user("old"), *exchange(), assistant("old answer"), user("now"), *exchange()]
    assert view(messages, phase="3") == messages


def test_with_every_user_the_manager_sees_system_first_task_and_current_turn() -> None:
    messages = [system(), user("old"), *exchange(), assistant("old answer"), user("now"), *exchange()]
    assert view(messages, phase="3", turns="every_user") == [messages[0], messages[1], *messages[-3:]]


def test_input_is_not_mutated() -> None:
    messages = phased_history()
    snapshot = copy.deepcopy(messages)
    view(messages)
    assert messages == snapshot


@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.stem)
def test_corpus_output_keeps_the_invariants(path: Path) -> None:
    messages = corpus_body(path.name)["messages"]
    turn = view_turn(messages, "first_user")
    lead, current = turn.lead, turn.start
    out = view(messages, phase="1")
    assert invariant_errors(out) == invariant_errors(messages) == {}
    assert out[: leading_system_count(messages)] == messages[:lead]
    newest = newest_user_index(messages)
    assert newest is None or any(m is messages[newest] for m in out)
    assert out[lead:] == messages[current:], "no syntheses are annotated, so only the current turn follows"
