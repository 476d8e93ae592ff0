"""An emulated request's answer carries applied_edits as Anthropic's does: the body, or the final message_delta."""

from __future__ import annotations

import json

from history_proxy.surfaces.context_answer import AppliedEdits, Compacted, OriginalTokens, paused

APPLIED = {"applied_edits": [{"type": "clear_thinking_20251015", "cleared_thinking_turns": 1}]}
STREAM = (
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"m"}}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"text_delta","text":"message_delta in text"}}\n\n'
    b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"}}\n\n'
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
)


def events(data: bytes) -> list[dict[str, object]]:
    return [json.loads(line[5:]) for line in data.split(b"\n") if line.startswith(b"data:")]


def test_a_whole_message_gets_the_field_and_an_error_does_not() -> None:
    rewrite = AppliedEdits(APPLIED)
    answer = json.loads(rewrite.whole(b'{"type":"message","content":[]}'))
    assert answer["context_management"] == APPLIED
    error = b'{"type":"error","error":{"type":"overloaded_error"}}'
    assert rewrite.whole(error) == error and rewrite.whole(b"not json") == b"not json"


def test_a_stream_cut_anywhere_gets_the_field_in_its_message_delta_only() -> None:
    for size in (1, 7, 50, len(STREAM)):
        rewrite = AppliedEdits(APPLIED)
        out = (
            b"".join(rewrite.piece(STREAM[i : i + size]) for i in range(0, len(STREAM), size)) + rewrite.end()
        )
        found = events(out)
        assert [e["type"] for e in found] == [e["type"] for e in events(STREAM)]
        assert [e.get("context_management") for e in found] == [None, None, APPLIED, None]
        assert found[1] == events(STREAM)[1]  # a text that mentions message_delta is left alone


def test_count_tokens_gets_the_original_count() -> None:
    assert json.loads(OriginalTokens(900).whole(b'{"input_tokens":600}')) == {
        "input_tokens": 600,
        "context_management": {"original_input_tokens": 900},
    }
    unchanged = json.loads(OriginalTokens(None).whole(b'{"input_tokens":600}'))
    assert unchanged["context_management"] == {"original_input_tokens": 600}


def test_a_compacted_stream_opens_with_the_block_and_shifts_every_later_block() -> None:
    block = {"type": "compaction", "content": "summary"}
    text_start = (
        b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
        b'"content_block":{"type":"text","text":""}}\n\n'
    )
    stream = STREAM.replace(b"event: content_block_delta", text_start + b"event: content_block_delta")
    for size in (3, len(stream)):
        rewrite = Compacted(APPLIED, block)
        out = (
            b"".join(rewrite.piece(stream[i : i + size]) for i in range(0, len(stream), size)) + rewrite.end()
        )
        found = events(out)
        assert [(e["type"], e.get("index")) for e in found] == [
            ("message_start", None),
            ("content_block_start", 0),
            ("content_block_stop", 0),
            ("content_block_start", 1),
            ("content_block_delta", 1),
            ("message_delta", None),
            ("message_stop", None),
        ]
        assert found[1]["content_block"] == block and found[5]["context_management"] == APPLIED


def test_a_paused_compaction_is_answered_with_the_block_alone() -> None:
    block = {"type": "compaction", "content": "summary"}
    whole, kind = paused({"model": "claude-x"}, block, APPLIED)
    answer = json.loads(whole)
    assert (
        kind == "application/json" and answer["content"] == [block] and answer["stop_reason"] == "compaction"
    )
    streamed, kind = paused({"model": "claude-x", "stream": True}, block, APPLIED)
    assert kind == "text/event-stream"
    assert [e["type"] for e in events(streamed)] == [
        "message_start",
        "content_block_start",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
