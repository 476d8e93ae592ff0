"""``manager_digest``: optional replacement system prompt; an overview system message (counts, then
one-line digests of the recent messages); the newest assistant message and everything after it
verbatim; a closing instruction system message."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from pydantic import ValidationError

from history_proxy.core.invariants import invariant_errors
from history_proxy.core.messages import Message, leading_system_count, newest_user_index
from history_proxy.filters.base import FilterContext
from history_proxy.filters.manager_digest import DEFAULT_INSTRUCTION, ManagerDigest, recent_for_budget
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

CTX = FilterContext(role="manager")


def manage(messages: list[Message], **params: object) -> list[Message]:
    return ManagerDigest.model_validate({"type": "manager_digest", **params}).apply(messages, CTX)


def overview_lines(message: Message) -> list[str]:
    assert message["role"] == "system"
    return str(message["content"]).splitlines()


def test_output_is_system_overview_newest_assistant_then_the_closing_instruction() -> None:
    messages = [system("rules"), user("task"), *exchange("ls"), assistant("I listed the files.")]
    out = manage(messages)
    assert [m["role"] for m in out] == ["system", "system", "user", "assistant", "system"]
    assert out[0] is messages[0]
    assert out[2] is messages[1] and out[3] is messages[-1]
    assert out[-1] == {"role": "system", "content": DEFAULT_INSTRUCTION}


def test_the_overview_counts_messages_tool_results_and_ai_responses_in_plexus_format() -> None:
    messages = [system(), user("task"), *parallel("a", "b"), assistant("done")]
    lines = overview_lines(manage(messages)[1])
    assert lines[0] == "📊 CONVERSATION OVERVIEW: 6 messages (2 tool results, 2 AI responses)"
    assert lines[1] == ""
    assert lines[2] == "📋 RECENT CONVERSATION (5 messages):"


def test_recent_lines_use_plexus_formats() -> None:
    act = action(call("grep"), text="Searching now")
    messages = [
        system("rules"),
        user("u" * 200),
        system("s" * 100),
        act,
        result(act, "first line\nsecond line\nthird line\nfourth line"),
        assistant("a" * 250),
        user("next"),
    ]
    lines = overview_lines(manage(messages)[1])[3:]
    assert lines == [
        "   [1] User: " + "u" * 150 + "...",
        "   [2] System: " + "s" * 80 + "...",
        "   [3] Assistant: Searching now [Tools: grep]",
        "   [4] Tool Result: first line second line third line",
        "   [5] Assistant: " + "a" * 200 + "...",
        "   [6] User: next",
    ]


def test_tool_call_only_messages_show_their_tools() -> None:
    messages = [user(), *exchange("deploy", "ok"), assistant("deployed")]
    assert "   [1] Assistant: [Tools: deploy]" in overview_lines(manage(messages)[0])


@pytest.mark.parametrize(("budget", "recent"), [(None, 8), (1999, 3), (2000, 5), (4999, 5), (5000, 8)])
def test_recent_is_chosen_3_5_or_8_by_the_token_budget_as_plexus_does(
    budget: int | None, recent: int
) -> None:
    assert recent_for_budget(budget) == recent
    messages = [user(f"q{i}") if i % 2 == 0 else assistant(f"a{i}") for i in range(20)]
    params = {} if budget is None else {"max_tokens": budget}
    lines = overview_lines(manage(messages, **params)[0])
    assert lines[2] == f"📋 RECENT CONVERSATION ({recent} messages):"
    assert len(lines) == 3 + recent


def test_a_fixed_recent_overrides_the_automatic_choice() -> None:
    messages = [user(f"q{i}") for i in range(6)] + [assistant("a")]
    lines = overview_lines(manage(messages, recent=2)[0])
    assert lines[3:] == ["   [5] User: q5", "   [6] Assistant: a"]


def test_recent_and_max_tokens_together_are_a_config_error() -> None:
    with pytest.raises(ValidationError, match="not both"):
        ManagerDigest(type="manager_digest", recent=3, max_tokens=1000)
    with pytest.raises(ValidationError):
        ManagerDigest(type="manager_digest", recent=0)


def test_leading_system_messages_are_not_digested_in_the_overview() -> None:
    messages = [system("rules"), user("task"), assistant("done")]
    lines = overview_lines(manage(messages)[1])
    assert lines[2:] == [
        "📋 RECENT CONVERSATION (2 messages):",
        "   [1] User: task",
        "   [2] Assistant: done",
    ]


def test_a_system_prompt_replaces_the_leading_system_messages() -> None:
    messages = [system("worker rules"), system("more worker rules"), user("task"), assistant("done")]
    out = manage(messages, system_prompt="You supervise a coding agent.")
    assert out[0] == {"role": "system", "content": "You supervise a coding agent."}
    assert all("worker rules" not in str(m["content"]) for m in out)


def test_the_newest_assistant_message_and_everything_after_it_are_kept_verbatim() -> None:
    messages = [
        system(),
        user("task"),
        assistant("plan"),
        assistant("result"),
        user("thanks"),
        user("and next?"),
    ]
    out = manage(messages)
    assert out[2:5] == messages[3:] and all(a is b for a, b in zip(out[2:5], messages[3:], strict=True))


def test_an_action_keeps_all_its_results_so_no_call_is_left_unanswered() -> None:
    group = parallel("read_a", "read_b")
    messages = [system(), user("task"), *exchange("ls"), *group]
    out = manage(messages)
    assert out[3:6] == group
    assert out[-1]["content"] == DEFAULT_INSTRUCTION
    assert invariant_errors(out) == {}


def test_a_trailing_unanswered_action_stays_last_after_the_instruction() -> None:
    pending = action(call("deploy"), call("notify"))
    messages = [system(), user("ship it"), *exchange("build"), pending]
    out = manage(messages)
    assert out[-1] is pending
    assert out[-2]["content"] == DEFAULT_INSTRUCTION
    assert invariant_errors(out) == {}


def test_a_partly_answered_trailing_action_stays_last_with_its_results() -> None:
    pending = action(call("deploy", call_id="d1"), call("notify", call_id="n1"))
    answered = result(pending, "deployed")
    out = manage([user("ship it"), pending, answered])
    assert out[-2:] == [pending, answered]
    assert invariant_errors(out) == {}


def test_the_newest_user_message_is_kept_when_it_is_older_than_the_newest_assistant() -> None:
    task = user("the real task")
    messages = [system(), user("old"), assistant("old reply"), task, *exchange("ls"), *exchange("cat")]
    out = manage(messages)
    assert out[2] is task
    assert messages[2] not in out[2:]


def test_without_any_assistant_message_the_newest_user_message_is_the_tail() -> None:
    messages = [system(), user("first"), user("second")]
    out = manage(messages)
    assert [m["role"] for m in out] == ["system", "system", "user", "system"]
    assert out[2] is messages[-1]


def test_overview_lines_are_one_line_each() -> None:
    messages = [user("multi\nline\ntask"), assistant("reply\nwith\nlines")]
    lines = overview_lines(manage(messages)[0])
    assert lines[3:] == ["   [0] User: multi line task", "   [1] Assistant: reply with lines"]


def test_a_custom_instruction_closes_the_request() -> None:
    out = manage([user(), assistant()], instruction="Decide whether the worker should stop.")
    assert out[-1] == {"role": "system", "content": "Decide whether the worker should stop."}


def test_unknown_fields_of_kept_messages_are_kept() -> None:
    newest = assistant("done", reasoning_content="why", vendor={"k": 1})
    out = manage([system("s", name="root"), user("task"), newest])
    assert out[0]["name"] == "root" and any(m is newest for m in out)


def test_input_is_not_mutated() -> None:
    messages = [system(), user("q"), *parallel("a", "b"), assistant("x"), user("r"), *exchange()]
    snapshot = copy.deepcopy(messages)
    manage(messages, system_prompt="manager")
    assert messages == snapshot


@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.stem)
def test_corpus_output_keeps_the_invariants(path: Path) -> None:
    messages = corpus_body(path.name)["messages"]
    lead = leading_system_count(messages)
    newest = newest_user_index(messages)
    for params in ({}, {"max_tokens": 1000, "system_prompt": "You supervise the agent."}):
        out = manage(messages, **params)
        assert invariant_errors(out) == invariant_errors(messages) == {}
        if not params:
            assert all(a is b for a, b in zip(out[:lead], messages[:lead], strict=True))
        assert newest is None or any(m is messages[newest] for m in out)
        assert out[-1]["role"] == "system" or out[-1] is messages[-1]
