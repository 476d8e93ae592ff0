"""A rebuilt Messages request stays valid for Anthropic when a filter emptied some of its text."""

from __future__ import annotations

from typing import Any

from history_proxy.surfaces.messages_valid import REMOVED, valid_for_messages


def body(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "claude-x", "messages": list(messages)}


def test_empty_text_blocks_and_emptied_messages_are_removed_and_the_last_user_message_stays() -> None:
    sent = body(
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "secret"}]},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [{"type": "text", "text": "secret"}]},
    )
    rebuilt = body(
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": " "}]},
        sent["messages"][1],
    )
    out = valid_for_messages(sent, rebuilt)["messages"]
    assert out[0]["content"] == [{"type": "text", "text": "a"}]
    assert out[1] is sent["messages"][1]
    assert out[-1] == {"role": "user", "content": [{"type": "text", "text": REMOVED}]}


def test_a_tool_result_left_empty_keeps_its_block_and_its_pairing() -> None:
    use = {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}
    result = {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": ""}]}
    sent = body({"role": "user", "content": "go"}, use, {"role": "user", "content": [result]})
    rebuilt = body(sent["messages"][0], use, {"role": "user", "content": [result]})
    out = valid_for_messages(sent, rebuilt)["messages"]
    assert out[2]["content"][0]["tool_use_id"] == "t"
    assert out[2]["content"][0]["content"] == [{"type": "text", "text": REMOVED}]


def test_messages_the_chain_left_as_they_came_are_never_touched() -> None:
    sent = body(
        {"role": "user", "content": [{"type": "text", "text": ""}]}, {"role": "assistant", "content": "x"}
    )
    rebuilt = body(*sent["messages"])
    assert valid_for_messages(sent, rebuilt)["messages"] == sent["messages"]
    assert valid_for_messages(sent, sent) is sent
