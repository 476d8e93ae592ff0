"""The Messages context edits emulated with Anthropic's semantics, read like the spec (issue 33, item 2)."""

from __future__ import annotations

import copy
from typing import Any

from history_proxy.surfaces import edit_clear_thinking, edit_clear_tool_uses, edit_compact
from history_proxy.surfaces.context_management import manage, with_beta
from history_proxy.surfaces.edit_common import EditInput

PLACEHOLDER = edit_clear_tool_uses.PLACEHOLDER


def env(input_tokens: int = 0, thinking: bool = True) -> EditInput:
    return EditInput(input_tokens=input_tokens, tokens=lambda text: len(text) // 4, thinking=thinking)


def call(n: int, name: str = "Read", thinking: bool = False, size: int = 40) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if thinking:
        blocks.append({"type": "thinking", "thinking": f"think {n}", "signature": f"sig{n}"})
    blocks.append({"type": "tool_use", "id": f"t{n}", "name": name, "input": {"path": f"/f{n}"}})
    result = {"type": "tool_result", "tool_use_id": f"t{n}", "content": f"result {n} " + "x" * size}
    return [{"role": "assistant", "content": blocks}, {"role": "user", "content": [result]}]


def conversation(*calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "user", "content": "task"}]
    for pair in calls:
        out += pair
    return out


def results(messages: list[dict[str, Any]]) -> list[str]:
    return [
        b["content"]
        for m in messages
        if isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_result"
    ]


def tool_uses(trigger: int = 0, **fields: Any) -> dict[str, Any]:
    return {
        "type": edit_clear_tool_uses.TYPE,
        "trigger": {"type": "input_tokens", "value": trigger},
        **fields,
    }


# --- clear_tool_uses_20250919 ----------------------------------------------------------------------


def test_the_oldest_results_are_cleared_and_the_newest_keep_stay() -> None:
    messages = conversation(*(call(n) for n in range(5)))
    out, applied = edit_clear_tool_uses.apply(
        tool_uses(keep={"type": "tool_uses", "value": 2}), messages, env()
    )
    assert [r == PLACEHOLDER for r in results(out)] == [True, True, True, False, False]
    assert applied == {"type": edit_clear_tool_uses.TYPE, "cleared_tool_uses": 3, "cleared_input_tokens": 36}


def test_call_ids_and_pairs_stay_whole_and_the_input_is_not_changed_in_place() -> None:
    messages = conversation(*(call(n) for n in range(4)))
    before = copy.deepcopy(messages)
    out, _ = edit_clear_tool_uses.apply(tool_uses(), messages, env())
    assert messages == before
    ids = [
        [b.get("id") or b.get("tool_use_id") for b in m["content"]]
        for m in out
        if isinstance(m["content"], list)
    ]
    assert ids == [[f"t{n}"] for n in range(4) for _ in (0, 1)]


def test_nothing_is_cleared_below_the_input_tokens_trigger() -> None:
    messages = conversation(*(call(n) for n in range(5)))
    out, applied = edit_clear_tool_uses.apply(tool_uses(trigger=1000), messages, env(input_tokens=999))
    assert applied is None and out is messages
    _, applied = edit_clear_tool_uses.apply(tool_uses(trigger=1000), messages, env(input_tokens=1000))
    assert applied is not None


def test_the_tool_uses_trigger_counts_the_requests_tool_uses() -> None:
    edit = {
        "type": edit_clear_tool_uses.TYPE,
        "trigger": {"type": "tool_uses", "value": 5},
        "keep": {"type": "tool_uses", "value": 1},
    }
    assert edit_clear_tool_uses.apply(edit, conversation(*(call(n) for n in range(4))), env())[1] is None
    assert edit_clear_tool_uses.apply(edit, conversation(*(call(n) for n in range(5))), env())[1] is not None


def test_the_default_trigger_is_100k_input_tokens() -> None:
    messages = conversation(*(call(n) for n in range(5)))
    edit = {"type": edit_clear_tool_uses.TYPE}
    assert edit_clear_tool_uses.apply(edit, messages, env(input_tokens=99_999))[1] is None
    assert edit_clear_tool_uses.apply(edit, messages, env(input_tokens=100_000))[1] is not None


def test_clear_at_least_is_a_gate_not_a_target() -> None:
    messages = conversation(*(call(n) for n in range(5)))  # 12 tokens a result, 3 clearable
    keep = {"type": "tool_uses", "value": 2}
    gate = {"type": "input_tokens", "value": 37}
    out, applied = edit_clear_tool_uses.apply(tool_uses(keep=keep, clear_at_least=gate), messages, env())
    assert applied is None and out is messages
    gate["value"] = 36
    _, applied = edit_clear_tool_uses.apply(tool_uses(keep=keep, clear_at_least=gate), messages, env())
    assert applied is not None and applied["cleared_input_tokens"] == 36  # all of them, not just 36


def test_excluded_tools_are_never_cleared_nor_counted_against_keep() -> None:
    messages = conversation(call(0, "Bash"), call(1, "Read"), call(2, "Bash"), call(3, "Read"))
    edit = tool_uses(keep={"type": "tool_uses", "value": 1}, exclude_tools=["Bash"])
    out, applied = edit_clear_tool_uses.apply(edit, messages, env())
    assert [r == PLACEHOLDER for r in results(out)] == [False, True, False, False]
    assert applied is not None and applied["cleared_tool_uses"] == 1


def test_clear_tool_inputs_empties_the_inputs_too_but_not_in_the_current_turn_with_thinking() -> None:
    messages = conversation(call(0), call(1), call(2, thinking=True))
    edit = tool_uses(keep={"type": "tool_uses", "value": 0}, clear_tool_inputs=True)
    out, _ = edit_clear_tool_uses.apply(edit, messages, env())
    inputs = [
        b["input"] for m in out if m["role"] == "assistant" for b in m["content"] if b["type"] == "tool_use"
    ]
    assert inputs == [{}, {}, {"path": "/f2"}]  # the current turn's call sits beside a signed thinking block


def test_a_result_cleared_before_is_not_cleared_or_counted_again() -> None:
    messages = conversation(*(call(n) for n in range(4)))
    once, first = edit_clear_tool_uses.apply(tool_uses(), messages, env())
    again, second = edit_clear_tool_uses.apply(tool_uses(), once, env())
    assert first is not None and second is None and again is once


# --- clear_thinking_20251015 -----------------------------------------------------------------------


def two_turns() -> list[dict[str, Any]]:
    answer = {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "done", "signature": "s"}, {"type": "text", "text": "Answer."}
    ]}  # fmt: skip
    return [
        *conversation(call(0, thinking=True), call(1, thinking=True)),
        answer,
        {"role": "user", "content": "next task"},
        *call(2, thinking=True),
    ]


def thinking_kept(messages: list[dict[str, Any]]) -> list[bool]:
    return [any(b["type"] == "thinking" for b in m["content"]) for m in messages if m["role"] == "assistant"]


def test_thinking_of_all_but_the_newest_turn_is_cleared_by_default() -> None:
    out, applied = edit_clear_thinking.apply({"type": edit_clear_thinking.TYPE}, two_turns(), env())
    assert thinking_kept(out) == [False, False, False, True]
    assert applied is not None and applied["cleared_thinking_turns"] == 3


def test_keep_all_clears_nothing_and_keep_n_keeps_the_newest_n() -> None:
    messages = two_turns()
    assert (
        edit_clear_thinking.apply({"type": edit_clear_thinking.TYPE, "keep": "all"}, messages, env())[1]
        is None
    )
    keep = {"type": edit_clear_thinking.TYPE, "keep": {"type": "thinking_turns", "value": 2}}
    assert thinking_kept(edit_clear_thinking.apply(keep, messages, env())[0]) == [False, False, True, True]


def test_the_current_turns_signed_thinking_is_never_removed_whatever_keep_says() -> None:
    messages = conversation(call(0, thinking=True), call(1, thinking=True))  # one task's tool loop
    keep = {"type": edit_clear_thinking.TYPE, "keep": {"type": "thinking_turns", "value": 0}}
    out, applied = edit_clear_thinking.apply(keep, messages, env())
    assert applied is None and out is messages


def test_an_assistant_message_of_thinking_alone_stays_whole() -> None:
    alone = {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s"}]}
    messages = [
        {"role": "user", "content": "a"},
        alone,
        {"role": "user", "content": "b"},
        *call(0, thinking=True),
    ]
    keep = {"type": edit_clear_thinking.TYPE, "keep": {"type": "thinking_turns", "value": 0}}
    out, applied = edit_clear_thinking.apply(keep, messages, env())
    assert out[1] is alone and applied is None


# --- the modes -------------------------------------------------------------------------------------


KEEP_ONE = tool_uses(keep={"type": "tool_uses", "value": 1})


def body(**extra: Any) -> dict[str, Any]:
    return {
        "model": "claude-x",
        "max_tokens": 10,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "messages": two_turns(),
        "context_management": {"edits": [{"type": edit_clear_thinking.TYPE}, KEEP_ONE]},
        **extra,
    }


def test_native_forwards_the_field_as_it_came_and_merges_the_beta() -> None:
    request = body()
    managed = manage(request, "native", lambda _: env())
    assert managed.body is request and managed.applied is None and managed.beta == "merge"


def test_native_leaves_out_only_a_clear_thinking_anthropic_would_refuse_without_thinking() -> None:
    request = body()
    del request["thinking"]
    managed = manage(request, "native", lambda _: env())
    assert managed.body["context_management"] == {"edits": [KEEP_ONE]}
    request["context_management"] = {"edits": [{"type": edit_clear_thinking.TYPE}]}
    assert "context_management" not in manage(request, "native", lambda _: env()).body


def test_emulate_applies_the_edits_in_order_and_removes_the_field() -> None:
    managed = manage(body(), "emulate", lambda _: env())
    assert "context_management" not in managed.body and managed.beta == "remove"
    assert [e["type"] for e in managed.applied or []] == [edit_clear_thinking.TYPE, edit_clear_tool_uses.TYPE]


def test_emulate_skips_edits_it_does_not_know_and_strip_applies_nothing() -> None:
    request = body(context_management={"edits": [{"type": "clear_everything_20990101"}]})
    emulated = manage(request, "emulate", lambda _: env())
    assert emulated.applied == [] and emulated.body["messages"] is request["messages"]
    stripped = manage(body(), "strip", lambda _: env())
    assert stripped.applied is None and "context_management" not in stripped.body
    assert stripped.body["messages"] == two_turns()


def test_a_request_without_the_field_is_handed_back_untouched() -> None:
    request = {"model": "claude-x", "messages": []}
    assert manage(request, "emulate", lambda _: env()).body is request


def test_the_beta_is_merged_once_and_removed_alone() -> None:
    beta = "context-management-2025-06-27"
    assert with_beta([("anthropic-beta", "a,b")], "merge") == [("anthropic-beta", f"a,b,{beta}")]
    assert with_beta([("x", "1")], "merge") == [("x", "1"), ("anthropic-beta", beta)]
    assert with_beta([("anthropic-beta", f"a,{beta}")], "merge") == [("anthropic-beta", f"a,{beta}")]
    assert with_beta([("anthropic-beta", f"a, {beta}")], "remove") == [("anthropic-beta", "a")]
    assert with_beta([("anthropic-beta", beta)], "remove") == []


# --- compact_20260112 ------------------------------------------------------------------------------


def compaction(text: str = "the summary") -> dict[str, Any]:
    return {"type": "compaction", "content": text}


def test_everything_before_the_newest_compaction_block_is_replaced_by_its_summary() -> None:
    messages = [
        {"role": "user", "content": "old task"},
        {"role": "assistant", "content": [compaction("first")]},
        {"role": "user", "content": "more"},
        {"role": "assistant", "content": [compaction("second"), {"type": "text", "text": "Answer."}]},
        {"role": "user", "content": "Go on."},
    ]
    out = edit_compact.expanded(messages)
    assert out == [
        {"role": "user", "content": [{"type": "text", "text": edit_compact.OPENING + "second"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Answer."}]},
        {"role": "user", "content": "Go on."},
    ]


def test_a_block_alone_joins_its_summary_to_the_next_user_message() -> None:
    messages = [{"role": "assistant", "content": [compaction()]}, {"role": "user", "content": "Go on."}]
    assert edit_compact.expanded(messages) == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": edit_compact.OPENING + "the summary"},
                {"type": "text", "text": "Go on."},
            ],
        }
    ]


def test_a_request_without_compaction_blocks_is_handed_back() -> None:
    messages = conversation(call(0))
    assert edit_compact.expanded(messages) is messages


def test_compaction_is_due_past_its_trigger_and_never_under_50k() -> None:
    edit = {"type": edit_compact.TYPE, "trigger": {"type": "input_tokens", "value": 1000}}
    assert not edit_compact.due(edit, env(input_tokens=49_999))
    assert edit_compact.due(edit, env(input_tokens=50_000))
    assert not edit_compact.due({"type": edit_compact.TYPE}, env(input_tokens=149_999))
    assert edit_compact.due({"type": edit_compact.TYPE}, env(input_tokens=150_000))


def test_a_due_compaction_is_handed_back_for_the_summary_and_strip_still_expands_blocks() -> None:
    request = body(context_management={"edits": [{"type": edit_compact.TYPE}]})
    assert manage(request, "emulate", lambda _: env(input_tokens=200_000)).compact == {
        "type": edit_compact.TYPE
    }
    assert manage(request, "emulate", lambda _: env(input_tokens=1_000)).compact is None
    with_block = body(
        messages=[{"role": "assistant", "content": [compaction()]}, {"role": "user", "content": "x"}]
    )
    stripped = manage(with_block, "strip", lambda _: env())
    assert "compaction" not in str(stripped.body["messages"])
