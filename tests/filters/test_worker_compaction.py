"""``worker_compaction``: ``tool_result_truncation``, and old assistant messages that are only tool
calls (no text) are removed with all their results, except the newest one."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from history_proxy.core.cost import ANTHROPIC, Pricing
from history_proxy.core.invariants import invariant_errors
from history_proxy.core.messages import Message, has_text, is_action, leading_system_count, newest_user_index
from history_proxy.core.tokens import TokenCounters
from history_proxy.devtools.replay import request_ends
from history_proxy.filters.base import FilterContext
from history_proxy.filters.worker_compaction import WorkerCompaction
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

CTX = FilterContext(role="worker", model="gpt-4o")
LONG = "y" * 900


def compact(messages: list[Message], **params: object) -> list[Message]:
    return WorkerCompaction.model_validate({"type": "worker_compaction", **params}).apply(messages, CTX)


def test_old_tool_call_only_actions_are_removed_with_their_results() -> None:
    first, second, newest = exchange("ls", "a"), exchange("cat", "b"), exchange("grep", "c")
    messages = [system(), user(), *first, *second, *newest]
    out = compact(messages)
    assert out == [messages[0], messages[1], *newest]


def test_the_newest_tool_call_only_action_is_kept_even_when_text_follows() -> None:
    old, newest = exchange("ls"), exchange("cat")
    messages = [user(), *old, *newest, assistant("Here is what I found."), user("thanks, continue")]
    out = compact(messages)
    assert out == [messages[0], *newest, *messages[-2:]]


def test_actions_with_text_are_kept_whatever_their_age() -> None:
    reasoned = exchange("ls", text="Let me look around first.")
    messages = [user(), *reasoned, *exchange("cat"), *exchange("grep")]
    out = compact(messages)
    assert out[1:3] == reasoned
    assert sum(1 for m in out if is_action(m)) == 2


def test_parallel_tool_calls_are_removed_as_one_group_with_every_result() -> None:
    group = parallel("read_a", "read_b", "read_c")
    messages = [user(), *group, *exchange("final_step")]
    out = compact(messages)
    assert out == [messages[0], *messages[-2:]]
    assert invariant_errors(out) == {}


def test_a_trailing_unanswered_action_stays_as_the_input_had_it() -> None:
    pending = action(call("deploy"))
    messages = [user(), *exchange("build"), pending]
    out = compact(messages)
    assert out == [messages[0], pending]
    assert invariant_errors(out) == {}


def test_results_left_after_removal_are_truncated_as_tool_result_truncation_does() -> None:
    kept = exchange("ls", output=LONG, text="listing")
    messages = [
        user(),
        *kept,
        *exchange("cat", output="one"),
        assistant("noted"),
        *exchange("grep", output="two"),
    ]
    out = compact(messages, keep_recent=1, max_chars=100)
    assert out[2]["content"].startswith("y" * 100) and "original was 900 chars" in out[2]["content"]
    assert out[-1] is messages[-1]


def test_keep_recent_is_counted_after_the_removal() -> None:
    reasoned = exchange("ls", output=LONG, text="listing")
    messages = [user(), *reasoned, *exchange("cat", output=LONG), *exchange("grep", output=LONG)]
    out = compact(messages, keep_recent=2)
    assert [m["content"] == LONG for m in out if m["role"] == "tool"] == [True, True]


def test_leading_system_and_newest_user_message_are_kept() -> None:
    messages = [system("rules"), user("old task"), *exchange(), user("new task"), *exchange(), *exchange()]
    out = compact(messages)
    assert out[0] is messages[0]
    assert any(m is messages[newest_user_index(messages) or 0] for m in out)


def test_unknown_fields_of_kept_messages_are_kept() -> None:
    act = action(call("ls"), reasoning_content="thinking...", vendor={"id": 7})
    res = result(act, LONG, name="ls")
    out = compact([user(), act, res], keep_recent=0)
    assert out[1] is act
    assert out[2]["name"] == "ls" and out[2]["tool_call_id"] == res["tool_call_id"]


def test_nothing_to_compact_passes_the_same_objects() -> None:
    messages = [system(), user(), *exchange(text="doing it"), assistant("done")]
    out = compact(messages)
    assert all(a is b for a, b in zip(out, messages, strict=True)) and len(out) == len(messages)


def test_input_is_not_mutated() -> None:
    messages = [
        user(),
        *exchange(output=LONG),
        *parallel("a", "b", outputs=[LONG, LONG]),
        *exchange(output=LONG),
    ]
    snapshot = copy.deepcopy(messages)
    compact(messages, keep_recent=0)
    assert messages == snapshot


@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.stem)
def test_corpus_output_keeps_the_invariants(path: Path) -> None:
    messages = corpus_body(path.name)["messages"]
    out = compact(messages, keep_recent=1, max_chars=100)
    assert invariant_errors(out) == invariant_errors(messages) == {}
    lead = leading_system_count(messages)
    assert out[:lead] == messages[:lead]
    newest = newest_user_index(messages)
    assert newest is None or any(m is messages[newest] for m in out)
    bare = [m for m in out if is_action(m) and not has_text(m)]
    assert len(bare) <= 1


# --- trigger: cost (issue 18) -----------------------------------------------------------------------

FREE = Pricing(name="free", read=1.0, write=1.0)
"""A provider whose cache writes cost no more than reads: every advance is free."""


def cost_compact(
    messages: list[Message], ctx: FilterContext | None = None, **params: object
) -> list[Message]:
    f = WorkerCompaction.model_validate({"type": "worker_compaction", "trigger": "cost", **params})
    return f.apply(messages, ctx or FilterContext(model="gpt-4o", tokens=TokenCounters(), pricing=ANTHROPIC))


def mixed_history(output: str) -> list[Message]:
    """Tool-call-only actions, actions with text and a parallel action, every result long."""
    messages = [system(), user("the task")]
    for k in range(4):
        messages += exchange("ls", output=f"{k} {output}")
        messages += exchange("cat", output=f"{k} {output}", text=f"reading {k}")
    messages += parallel("a", "b", "c", outputs=[f"p{k} {output}" for k in range(3)])
    return messages


def test_with_free_cache_writes_the_cost_trigger_compacts_like_every() -> None:
    messages = mixed_history(LONG)
    free = FilterContext(model="gpt-4o", tokens=TokenCounters(), pricing=FREE)
    for end in request_ends(messages):
        assert cost_compact(messages[:end], free) == compact(messages[:end])


def test_the_cost_trigger_leaves_a_short_conversation_alone() -> None:
    messages = mixed_history(LONG)[:8]
    assert compact(messages) != messages
    assert cost_compact(messages) == messages


def test_before_the_model_s_window_it_compacts_whatever_the_cost() -> None:
    messages = mixed_history(LONG)[:8]  # ~740 tokens, ~500 compacted
    small = FilterContext(model="gpt-4o", tokens=TokenCounters(), pricing=ANTHROPIC, window=800, reserve=200)
    assert cost_compact(messages, small) == compact(messages)


def test_results_after_the_newest_tool_call_only_action_wait_for_the_next_one() -> None:
    """The compaction is a prefix: a result after the kept newest call-only action is not cut before
    that action goes (every-request cuts it at once with keep_recent 0)."""
    messages = [user(), *exchange("ls", output=LONG), *exchange("cat", output=LONG, text="reading")]
    free = FilterContext(model="gpt-4o", tokens=TokenCounters(), pricing=FREE)
    every = compact(messages, keep_recent=0)
    assert every[4] != messages[4]
    assert cost_compact(messages, free, keep_recent=0) == [*every[:3], *messages[3:]]


def test_the_boundary_only_moves_forward_and_the_prefix_holds_between_moves() -> None:
    """Replayed request by request, each sent request repeats the previous one except at an advance,
    and an advance never brings back what an earlier one compacted."""
    messages = corpus_body("openhands-codeact-ponylang-ponyc-4588.json")["messages"]
    previous: list[Message] = []
    advances = requests = 0
    compacted: list[int] = []  # messages removed plus results cut
    for end in request_ends(messages):
        sent = cost_compact(messages[:end], max_chars=2000)
        assert not invariant_errors(sent)
        requests += 1
        compacted.append(end - len(sent) + sum("TRUNCATED" in str(m["content"]) for m in sent))
        if previous and sent[: len(previous)] != previous:
            advances += 1
        previous = sent
    assert compacted == sorted(compacted) and compacted[-1] > 0  # nothing compacted ever comes back
    assert previous != messages  # it did compact
    assert 0 < advances < requests / 4  # a few large steps, not a move per request


def test_every_replica_agrees_the_answer_depends_on_the_request_alone() -> None:
    messages = corpus_body("openhands-codeact-ponylang-ponyc-4588.json")["messages"]
    assert cost_compact(messages) == cost_compact(copy.deepcopy(messages))
