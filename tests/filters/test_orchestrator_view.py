"""``orchestrator_view``: previous turns as conversation only (newest N messages), current turn verbatim."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from pydantic import ValidationError

from history_proxy.core.invariants import invariant_errors
from history_proxy.core.messages import Message, newest_user_index
from history_proxy.filters._views import view_turn
from history_proxy.filters.base import FilterContext
from history_proxy.filters.orchestrator_view import OrchestratorView
from tests.factories import action, assistant, call, corpus_body, corpus_files, exchange, result, system, user

CTX = FilterContext(role="orchestrator")


def view(messages: list[Message], n: int = 8, ctx: FilterContext = CTX) -> list[Message]:
    return OrchestratorView(type="orchestrator_view", max_conversation_turns=n).apply(messages, ctx)


def contents(messages: list[Message]) -> list[object]:
    return [m.get("content") for m in messages]


def test_previous_turns_are_reduced_to_user_messages_and_assistant_text() -> None:
    messages = [
        system("plan"),
        user("first question"),
        *exchange("search", output="raw search dump"),
        system("re-injected prompt"),
        assistant("first answer"),
        user("second question"),
    ]
    out = view(messages)
    assert contents(out) == ["plan", "first question", "first answer", "second question"]
    assert all(m["role"] != "tool" and "tool_calls" not in m for m in out)


def test_completion_signals_of_previous_turns_never_reach_the_orchestrator() -> None:
    finish = action(call("final_answer", {"answer": "42"}), text="I am done: 42")
    messages = [
        user("task one"),
        finish,
        result(finish, "submitted"),
        assistant("phase summary", message_type="synthesis", phase_id=1),
        assistant("all done", message_type="final"),
        user("task two"),
    ]
    out = view(messages)
    assert contents(out) == ["task one", "task two"]


def test_custom_completion_tools_count_as_completion_signals() -> None:
    finish = action(call("report_back"), text="reporting")
    messages = [user("task one"), finish, result(finish), user("task two")]
    ctx = FilterContext(role="orchestrator", completion_tools=frozenset({"report_back"}))
    assert contents(view(messages, ctx=ctx)) == ["task one", "task two"]


def test_assistant_text_beside_tool_calls_is_kept_without_the_calls() -> None:
    talk = action(call("search"), text="Let me look that up.", name="planner", reasoning_content="hmm")
    messages = [user("q1"), talk, result(talk), user("q2")]
    out = view(messages)
    kept = out[1]
    assert kept == {
        "role": "assistant",
        "content": "Let me look that up.",
        "name": "planner",
        "reasoning_content": "hmm",
    }
    assert "tool_calls" in talk, "the input message must not change"


def test_the_newest_max_conversation_turns_messages_are_kept() -> None:
    history = [m for k in range(5) for m in (user(f"q{k}"), assistant(f"a{k}"))]
    out = view([system(), *history, user("now")], n=3)
    assert contents(out) == ["You are a helpful agent.", "q0", "a3", "q4", "a4", "now"], (
        "q0: the task statement"
    )


def test_the_limit_counts_messages_after_traces_are_removed() -> None:
    messages = [user("q0"), *exchange(), *exchange(), assistant("a0"), user("q1"), *exchange(), user("now")]
    assert contents(view(messages, n=2)) == ["q0", "a0", "q1", "now"]


def test_the_current_turn_is_kept_verbatim() -> None:
    finish = action(call("final_answer"), text=None)
    current = [
        user("now"),
        *exchange("bash", output="trace"),
        system("mid-turn note"),
        finish,
        result(finish),
    ]
    out = view([user("before"), assistant("earlier"), *current], n=1)
    assert out[2:] == current
    assert all(a is b for a, b in zip(out[2:], current, strict=True))


def test_leading_system_messages_are_kept_even_with_a_tiny_window() -> None:
    lead = [system("one"), {"role": "developer", "content": "two"}]
    messages = [*lead, *(m for k in range(4) for m in (user(f"q{k}"), assistant(f"a{k}"))), user("now")]
    out = view(messages, n=1)
    assert out[:2] == lead
    assert contents(out) == ["one", "two", "q0", "a3", "now"]


def test_the_first_user_message_is_not_kept_twice_when_the_window_holds_it() -> None:
    messages = [user("q0"), assistant("a0"), user("now")]
    assert contents(view(messages, n=8)) == ["q0", "a0", "now"]


def test_a_named_user_message_is_a_peer_agents_turn_in_the_conversation_not_a_new_turn() -> None:
    messages = [
        user("Plan the launch.", name="user"),
        *exchange("search", output="raw"),
        user("Here is my research.", name="researcher"),
    ]
    assert view(messages) == messages, "one turn: the task and everything since, verbatim"


def test_with_first_user_the_whole_conversation_is_the_current_turn() -> None:
    messages = [system(), user("q0"), *exchange(), assistant("a0"), user("observation"), *exchange()]
    out = OrchestratorView(type="orchestrator_view", turns="first_user").apply(messages, CTX)
    assert out == messages


def test_annotated_observations_of_previous_turns_are_dropped() -> None:
    messages = [user("task"), assistant("ls"), user("file listing", message_type="observation"), user("next")]
    assert contents(view(messages)) == ["task", "ls", "next"]


def test_newest_user_message_is_kept_when_an_annotated_task_starts_the_current_turn() -> None:
    messages = [
        user("q0"),
        assistant("a0"),
        user("the request"),
        assistant("a1"),
        assistant("sub-task", message_type="task"),
    ]
    out = view(messages, n=1)
    assert contents(out) == ["the request", "a1", "sub-task"]


def test_a_single_turn_conversation_passes_unchanged() -> None:
    messages = [system(), user(), *exchange(), assistant("done")]
    out = view(messages)
    assert out == messages and out is not messages


def test_max_conversation_turns_defaults_to_eight_and_must_be_positive() -> None:
    assert OrchestratorView(type="orchestrator_view").max_conversation_turns == 8
    with pytest.raises(ValidationError):
        OrchestratorView(type="orchestrator_view", max_conversation_turns=0)


def test_input_is_not_mutated() -> None:
    messages = [system(), user("q1"), *exchange(text="thinking"), assistant("a1"), user("q2"), *exchange()]
    snapshot = copy.deepcopy(messages)
    view(messages, n=1)
    assert messages == snapshot


@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.stem)
def test_corpus_output_keeps_the_invariants(path: Path) -> None:
    messages = corpus_body(path.name)["messages"]
    turn = view_turn(messages, "every_user")
    lead, current = turn.lead, turn.start
    newest = newest_user_index(messages)
    for n in (1, 8):
        out = view(messages, n=n)
        assert invariant_errors(out) == invariant_errors(messages) == {}
        assert out[:lead] == messages[:lead]
        assert newest is None or any(m is messages[newest] for m in out)
        head = len(out) - (len(messages) - current)
        assert out[head:] == messages[current:], "the current turn is kept verbatim"
        history = out[lead:head]
        assert len(history) <= n + len(turn.anchor)
        assert all(any(m is messages[i] for m in history) for i in turn.anchor), "the task statement"
        assert all(m["role"] in ("user", "assistant") and "tool_calls" not in m for m in history)
