"""``worker_view``: the task and what followed, without other agents' traces and completion signals."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from history_proxy.core.invariants import invariant_errors
from history_proxy.core.messages import Message, classify, leading_system_count, newest_user_index
from history_proxy.filters._views import TurnPattern, Turns, producing_agent, view_turn
from history_proxy.filters.base import FilterContext
from history_proxy.filters.worker_view import WorkerView
from tests.factories import action, assistant, call, corpus_body, corpus_files, exchange, result, system, user

AUTOGEN_FILES = [p for p in corpus_files() if p.name.startswith("autogen-")]


def view(
    messages: list[Message],
    agent: str | None = "coder",
    include_global: bool = True,
    turns: Turns = "first_user",
    notes: list[str] | None = None,
) -> list[Message]:
    ctx = FilterContext(role="worker", agent=agent, notes=notes if notes is not None else [])
    return WorkerView(type="worker_view", include_global=include_global, turns=turns).apply(messages, ctx)


def contents(messages: list[Message]) -> list[object]:
    return [m.get("content") for m in messages]


def test_by_default_a_later_user_message_is_not_a_new_task_so_the_task_and_everything_since_stay() -> None:
    messages = [
        system("work"),
        user("the task"),
        *exchange(output="trace"),
        assistant("thinking"),
        user("Analyze the tool result. If requirements are met, provide the Final Answer."),
    ]
    assert view(messages) == messages


def test_with_every_user_the_worker_sees_the_current_turn_and_the_first_task_statement() -> None:
    messages = [
        system("work"),
        user("old task"),
        *exchange(output="old trace"),
        assistant("old"),
        user("new task"),
    ]
    assert contents(view(messages, turns="every_user")) == ["work", "old task", "new task"]


def test_a_pattern_names_the_framework_task_prefix() -> None:
    messages = [
        system("work"),
        user("Current Task: first"),
        *exchange(output="first trace"),
        user("Observation: 42"),
        *exchange(output="more"),
        user("Current Task: second"),
        *exchange(output="second trace"),
    ]
    out = view(messages, turns=TurnPattern(pattern=r"^Current Task:"))
    assert contents(out)[:3] == ["work", "Current Task: first", "Current Task: second"]
    assert out[3:] == messages[-2:]


def test_a_pattern_that_matches_nothing_keeps_everything_from_the_first_user_message() -> None:
    messages = [system("work"), user("task"), *exchange(), user("observation")]
    assert view(messages, turns=TurnPattern(pattern="^NEVER")) == messages


def test_a_named_user_message_is_a_peers_message_not_a_new_task() -> None:
    messages = [
        system("review code"),
        user("Write a slugify function.", name="user"),
        assistant("def slugify(...): ...", name="coder"),
        user("Please add type hints.", name="reviewer"),
    ]
    assert view(messages, agent="coder", turns="every_user") == messages


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
    assert contents(out) == ["task", None, "my output", "their note", "mine"], (
        "their words stay, not their trace"
    )
    assert invariant_errors(out) == {}


def test_another_agents_action_keeps_its_text_without_calls_or_results() -> None:
    theirs = action(call("search"), text="I will search.", agent="researcher")
    messages = [user("task"), theirs, result(theirs, "results"), assistant("mine", agent="coder")]
    out = view(messages)
    assert contents(out) == ["task", "I will search.", "mine"]
    assert "tool_calls" not in out[1]
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
    assert contents(view(messages)) == ["task", "summary", "plan"]


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
    notes: list[str] = []
    assert view(messages, agent=None, notes=notes) == messages
    assert notes == ["worker_view:agent_unknown"]


def test_the_task_message_is_kept_even_when_another_agent_wrote_it() -> None:
    messages = [system(), user("delegated task", agent="planner"), assistant("their step", agent="planner")]
    assert view(messages) == messages, (
        "the task, and the planner's plain words: conversation the worker needs"
    )


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
    turn = view_turn(messages, "first_user")
    lead, current = turn.lead, turn.start
    out = view(messages, agent=None)
    assert invariant_errors(out) == invariant_errors(messages) == {}
    assert out[: leading_system_count(messages)] == messages[:lead]
    newest = newest_user_index(messages)
    assert newest is None or any(m is messages[newest] for m in out)
    assert all(any(m is kept for kept in messages[current:]) for m in out[lead:])
    kinds = classify(messages)
    since = [m for i, m in enumerate(messages[current:], current) if kinds[i] != "final"]
    assert out == messages[:lead] + since, "with no agent name a worker loses nothing but completion signals"


@pytest.mark.parametrize("path", AUTOGEN_FILES, ids=lambda p: p.stem)
def test_autogen_worker_sees_only_its_own_traces(path: Path) -> None:
    messages = corpus_body(path.name)["messages"]
    agents = sorted({m["name"] for m in messages if m.get("role") == "assistant" and "name" in m})
    assert len(agents) >= 2
    for agent in agents:
        out = view(messages, agent=agent)
        assert invariant_errors(out) == {}
        actions = [m for m in out if m.get("role") == "assistant" and m.get("tool_calls")]
        assert {producing_agent(m) for m in actions} <= {agent}, "only its own execution traces"
        own_calls = {c["id"] for m in actions for c in m["tool_calls"]}
        assert all(m["tool_call_id"] in own_calls for m in out if m.get("role") == "tool")
        spoken = [
            m
            for m in messages
            if m.get("role") == "assistant" and m.get("content") and m.get("name") != agent
        ]
        assert all(any(o.get("content") == m["content"] for o in out) for m in spoken), "peers' words stay"
        assert out[0] is messages[0], "the task message is kept"
