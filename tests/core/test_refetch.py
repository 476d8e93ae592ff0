"""Re-fetches (docs/cost.md): the newest step's calls that repeat an earlier call whose output the chain hid."""

from __future__ import annotations

from history_proxy.core.messages import Message
from history_proxy.core.refetch import refetch_count, refetch_notes, refetches
from tests.factories import action, call, result, user


def read(path: str, output: str = "contents", **order: str) -> list[Message]:
    act = action(call("read_file", {"path": path, **order}))
    return [act, result(act, output)]


def elide(messages: list[Message], *indices: int) -> list[Message]:
    return [
        {**m, "content": "Old environment output: (1 lines omitted)"} if i in indices else m
        for i, m in enumerate(messages)
    ]


def test_asking_again_for_an_elided_output_is_one_refetch() -> None:
    messages = [user("go"), *read("a.py"), *read("b.py"), *read("a.py")]
    assert refetches(messages, elide(messages, 2)) == 1
    assert refetch_notes(messages, elide(messages, 2)) == ["refetch:1"]


def test_asking_again_for_an_output_still_shown_is_not_one() -> None:
    messages = [user("go"), *read("a.py"), *read("b.py"), *read("a.py")]
    assert refetches(messages, elide(messages, 4)) == 0
    assert refetch_notes(messages, messages) == []


def test_a_dropped_output_counts_and_arguments_compare_as_json() -> None:
    first = action(call("grep", '{"pattern": "x", "path": "src"}'))
    again = action(call("grep", '{"path":"src","pattern":"x"}'))
    messages = [user("go"), first, result(first, "hits"), *read("b.py"), again, result(again, "hits")]
    dropped = [messages[0], *messages[3:]]
    assert refetches(messages, dropped) == 1


def test_each_parallel_call_of_the_newest_step_is_counted() -> None:
    both = action(call("read_file", {"path": "a.py"}), call("read_file", {"path": "b.py"}))
    messages = [
        user("go"),
        *read("a.py"),
        *read("b.py"),
        both,
        result(both),
        {**result(both), "tool_call_id": both["tool_calls"][1]["id"]},
    ]
    assert refetches(messages, elide(messages, 2, 4)) == 2


def test_only_a_request_that_ends_with_the_steps_results_is_counted() -> None:
    messages = [user("go"), *read("a.py"), *read("a.py"), user("and now?")]
    assert refetches(messages, elide(messages, 2)) == 0


def test_the_note_carries_the_count() -> None:
    assert refetch_count(["identity:role-defaulted", "refetch:3"]) == 3
    assert refetch_count(None) == 0 and refetch_count(["refetch:x"]) == 0
