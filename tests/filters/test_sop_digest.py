"""``sop_digest``: the newest group verbatim; every older message folded into one system message of
one-line digests (Plexus formats, stage tags) after the leading system."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from history_proxy.core.invariants import invariant_errors
from history_proxy.core.messages import Message, group_spans, leading_system_count, newest_user_index
from history_proxy.filters.base import FilterContext
from history_proxy.filters.sop_digest import SopDigest
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

CTX = FilterContext(role="sop")


def digest(messages: list[Message], **params: object) -> list[Message]:
    return SopDigest.model_validate({"type": "sop_digest", **params}).apply(messages, CTX)


def digest_lines(out: list[Message], at: int = 1) -> list[str]:
    assert out[at]["role"] == "system"
    return str(out[at]["content"]).splitlines()[1:]


def test_older_messages_fold_into_one_system_message_after_the_leading_system() -> None:
    messages = [system("rules"), user("task"), assistant("on it"), user("more"), assistant("final answer")]
    out = digest(messages)
    assert out[0] is messages[0]
    assert [m["role"] for m in out] == ["system", "system", "user", "assistant"]
    assert out[-1] is messages[-1]
    assert digest_lines(out) == ["[1] User: task", "[2] Assistant: on it"]


def test_digest_lines_use_plexus_formats() -> None:
    act = action(call("grep"), call("cat"))
    messages = [
        system("rules"),
        user("Find the failing test in the repository and explain why it fails right now please"),
        system("You are test role."),
        assistant("I will look at the code base and then report back to you"),
        act,
        result(act["tool_calls"][0], "match"),
        result(act["tool_calls"][1], "file"),
        user("latest"),
        assistant("done"),
    ]
    lines = digest_lines(digest(messages))
    assert lines == [
        "[1] User: Find the failing test in the repository and explain why it f...",
        "[2] System: Initial setup and role definition",
        "[3] Assistant: I will look at the code base and then re...",
        "[4] Assistant: Used tools: grep, cat",
        "[5] Tool Result: <data returned>",
        "[6] Tool Result: <data returned>",
    ]


@pytest.mark.parametrize(
    ("text", "tag"),
    [
        ("Let me write the YAML configuration", "HYPOTHESIS_STAGE"),
        ("The root cause is a race", "SYNTHESIS_STAGE"),
        ("Examining the feedback items", "EXPLORATION_STAGE"),
        ("A hypothesis about the pattern", "HYPOTHESIS_STAGE"),
    ],
)
def test_assistant_lines_carry_plexus_stage_tags(text: str, tag: str) -> None:
    messages = [user(), assistant(text), *exchange("search", text=text), user("next")]
    lines = digest_lines(digest(messages), at=0)
    assert lines[1].endswith(f" [{tag}]")
    assert lines[2] == f"[2] Assistant: Used tools: search [{tag}]"


def test_preview_lengths_follow_user_chars_and_assistant_chars() -> None:
    messages = [user("abcdefghij"), assistant("0123456789"), user("newest")]
    lines = digest_lines(digest(messages, user_chars=4, assistant_chars=3), at=0)
    assert lines == ["[0] User: abcd...", "[1] Assistant: 012..."]


def test_every_digest_line_is_one_line() -> None:
    messages = [user("line one\nline two\n\n  line three"), assistant("a\nb"), user("now")]
    lines = digest_lines(digest(messages), at=0)
    assert lines == ["[0] User: line one line two line three", "[1] Assistant: a b"]


def test_the_newest_action_group_is_kept_verbatim_with_all_its_results() -> None:
    group = parallel("read_a", "read_b")
    messages = [system(), user("task"), *exchange("ls"), *group]
    out = digest(messages)
    assert out[-3:] == group and all(a is b for a, b in zip(out[-3:], group, strict=True))
    assert invariant_errors(out) == {}


def test_a_trailing_tool_result_is_never_orphaned() -> None:
    act, res = exchange("bash", "output")
    out = digest([system(), user(), *exchange("ls"), act, res])
    assert out[-2:] == [act, res]
    assert invariant_errors(out) == {}


def test_a_trailing_unanswered_action_stays_last_as_the_input_had_it() -> None:
    pending = action(call("deploy"))
    out = digest([user(), *exchange("build"), pending])
    assert out[-1] is pending
    assert invariant_errors(out) == {}


def test_the_newest_user_message_is_kept_verbatim_before_the_newest_group() -> None:
    task = user("fix the bug")
    messages = [
        system(),
        user("old"),
        assistant("ok"),
        task,
        *exchange("ls"),
        *exchange("cat"),
        assistant("found it"),
    ]
    out = digest(messages)
    assert [m["role"] for m in out] == ["system", "system", "user", "assistant"]
    assert out[2] is task and out[3] is messages[-1]
    assert "fix the bug" not in str(out[1]["content"])
    assert "[4] Assistant: Used tools: ls" in digest_lines(out)


def test_nothing_older_than_the_newest_group_passes_unchanged() -> None:
    messages = [system(), user("only task")]
    out = digest(messages)
    assert out == messages and all(a is b for a, b in zip(out, messages, strict=True))


def test_empty_and_tool_call_only_messages_have_readable_lines() -> None:
    act = action(call("ls"))
    messages = [user(""), act, result(act, ""), user("now")]
    assert digest_lines(digest(messages), at=0) == [
        "[0] User: <empty>",
        "[1] Assistant: Used tools: ls",
        "[2] Tool Result: <empty>",
    ]


def test_text_parts_are_digested_by_their_text() -> None:
    parts: list[dict[str, Any]] = [
        {"type": "text", "text": "look at"},
        {"type": "image_url", "image_url": {"url": "x"}},
    ]
    lines = digest_lines(digest([user(parts), user("now")]), at=0)
    assert lines == ["[0] User: look at"]


def test_unknown_fields_of_kept_messages_are_kept() -> None:
    newest = assistant("done", reasoning_content="why", refusal=None, vendor={"k": 1})
    out = digest([system("s", name="root"), user("task"), assistant("a"), newest])
    assert out[0]["name"] == "root" and out[-1] is newest


def test_limits_default_to_plexus_60_and_40_and_must_be_positive() -> None:
    flt = SopDigest(type="sop_digest")
    assert (flt.user_chars, flt.assistant_chars) == (60, 40)
    with pytest.raises(ValidationError):
        SopDigest(type="sop_digest", user_chars=0)


def test_input_is_not_mutated() -> None:
    messages = [system(), user("q"), *parallel("a", "b"), assistant("x"), user("r"), *exchange()]
    snapshot = copy.deepcopy(messages)
    digest(messages)
    assert messages == snapshot


@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.stem)
def test_corpus_output_keeps_the_invariants(path: Path) -> None:
    messages = corpus_body(path.name)["messages"]
    out = digest(messages)
    assert invariant_errors(out) == invariant_errors(messages) == {}
    lead = leading_system_count(messages)
    assert all(a is b for a, b in zip(out[:lead], messages[:lead], strict=True))
    newest = newest_user_index(messages)
    assert newest is None or any(m is messages[newest] for m in out)
    start, _ = group_spans(messages)[-1]
    assert all(a is b for a, b in zip(out[-(len(messages) - start) :], messages[start:], strict=True))
    assert sum(1 for m in out[lead:] if m["role"] == "system") <= 1
