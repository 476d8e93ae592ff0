"""``worker_view``: the current turn only, without other agents' traces and completion signals."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from proxy.core.invariants import invariant_errors
from proxy.core.messages import Message, leading_system_count, newest_user_index
from proxy.filters._views import current_turn_bounds, producing_agent
from proxy.filters.base import FilterContext
from proxy.filters.worker_view import WorkerView
from tests.factories import action, assistant, call, corpus_body, corpus_files, exchange, result, system, user

AUTOGEN_FILES = [p for p in corpus_files() if p.name.startswith("autogen-")]


def view(messages: list[Message], agent: str | None = "coder", include_global: bool = True) -> list[Message]:
    ctx = FilterContext(role="worker", agent=agent)
    return WorkerView(type="worker_view", include_global=include_global).apply(messages, ctx)


def contents(messages: list[Message]) -> list[object]:
    return [m.get("content") for m in messages]


def test_worker_sees_only_the_current_turn() -> None:
    messages = [
        system("work"),
        user("old task"),
        *exchange(output="old trace"),
        assistant("old"),
        user("new task"),
    ]
    assert contents(view(messages)) == ["work", "new task"]


def test_other_agents_traces_are_hidden() -> None:
    mine = exchange("bash", output="my output", agent="coder")
    theirs = exchange("search", output="their output", agent="researcher")
    messages = [
        user("task"),
        *mine,
        *theirs,
        assistant("their note", agent="researcher"),
        assistant("mine", agent="coder"),
    ]
    out = view(messages)
    assert contents(out) == ["task", None, "my output", "mine"]
    assert invariant_errors(out) == {}


def test_an_assistant_name_identifies_the_agent_as_in_autogen_transcripts() -> None:
    theirs = action(call("search"), name="WebSearchAgent")
    messages = [
        user("task"),
        theirs,
        result(theirs, "results"),
        assistant("summary", name="WebSearchAgent"),
        assistant("plan", name="coder"),
    ]
    assert contents(view(messages)) == ["task", "plan"]


def test_a_parallel_group_of_another_agent_is_dropped_as_a_whole() -> None:
    calls = [call("read"), call("grep"), call("ls")]
    theirs = action(*calls, agent="researcher")
    messages = [user("task"), theirs, *(result(c, "out") for c in calls), assistant("mine", agent="coder")]
    assert view(messages) == [messages[0], messages[-1]]


def test_global_observations_of_other_agents_are_kept_with_their_whole_group() -> None:
    calls = [call("broadcast"), call("read")]
    theirs = action(*calls, agent="researcher")
    group = [
        theirs,
        result(calls[0], "for everyone", message_type="global_observation"),
        result(calls[1], "private"),
    ]
    note = assistant("team notice", agent="researcher", message_type="global_observation")
    messages = [user("task"), *group, note]
    assert view(messages) == messages
    assert view(messages, include_global=False) == [messages[0]]


def test_completion_signals_are_dropped() -> None:
    finish = action(call("final_answer", {"answer": "x"}), text="done", agent="coder")
    messages = [
        user("task"),
        *exchange(agent="coder"),
        finish,
        result(finish),
        assistant("over", message_type="final"),
    ]
    out = view(messages)
    assert out == messages[:3]


def test_everything_of_the_current_turn_is_kept_when_no_agent_name_is_given() -> None:
    messages = [
        user("old"),
        assistant("old answer"),
        user("task"),
        *exchange(agent="researcher"),
        assistant("note", name="planner"),
        assistant("mine", agent="coder"),
    ]
    assert view(messages, agent=None) == messages[2:]


def test_the_task_message_is_kept_even_when_another_agent_wrote_it() -> None:
    messages = [system(), user("delegated task", agent="planner"), assistant("their step", agent="planner")]
    assert contents(view(messages)) == ["You are a helpful agent.", "delegated task"]


def test_an_annotated_task_starts_the_current_turn() -> None:
    messages = [
        user("goal"),
        assistant("plan"),
        assistant("subtask for coder", message_type="task"),
        *exchange(),
    ]
    out = view(messages)
    assert contents(out[1:]) == ["subtask for coder", None, "ok"]
    assert out[0] is messages[0], "the newest user message is kept"


def test_kept_messages_are_the_input_objects() -> None:
    messages = [system(), user("task"), *exchange(agent="coder")]
    out = view(messages)
    assert all(a is b for a, b in zip(out, messages, strict=True))


def test_input_is_not_mutated() -> None:
    messages = [system(), user("t"), *exchange(agent="researcher"), assistant("x", name="coder"), user("u")]
    snapshot = copy.deepcopy(messages)
    view(messages)
    assert messages == snapshot


@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.stem)
def test_corpus_output_keeps_the_invariants(path: Path) -> None:
    messages = corpus_body(path.name)["messages"]
    lead, current = current_turn_bounds(messages)
    out = view(messages, agent=None)
    assert invariant_errors(out) == invariant_errors(messages) == {}
    assert out[: leading_system_count(messages)] == messages[:lead]
    newest = newest_user_index(messages)
    assert newest is None or any(m is messages[newest] for m in out)
    assert all(any(m is kept for kept in messages[current:]) for m in out[lead:])


@pytest.mark.parametrize("path", AUTOGEN_FILES, ids=lambda p: p.stem)
def test_autogen_worker_sees_only_its_own_traces(path: Path) -> None:
    messages = corpus_body(path.name)["messages"]
    agents = sorted({m["name"] for m in messages if m.get("role") == "assistant" and "name" in m})
    assert len(agents) >= 2
    for agent in agents:
        out = view(messages, agent=agent)
        assert invariant_errors(out) == {}
        assert {producing_agent(m) for m in out if m.get("role") == "assistant"} == {agent}
        assert out[0] is messages[0], "the task message is kept"
