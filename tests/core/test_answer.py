"""history_proxy.core.answer: an answer's id, model, finish reasons and output tokens, in each API's shape."""

from __future__ import annotations

import json
from typing import Any

import pytest

from history_proxy.core.answer import AnswerFacts
from history_proxy.core.usage import UsageTap


def read(*answers: Any) -> AnswerFacts:
    facts = AnswerFacts()
    for answer in answers:
        facts.read(answer)
    return facts


def test_a_chat_completion_gives_its_id_model_reasons_and_completion_tokens() -> None:
    answer = {
        "id": "chatcmpl-1",
        "model": "gpt-4o-2024-08-06",
        "choices": [{"index": 0, "finish_reason": "tool_calls"}, {"index": 1, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 7},
    }
    assert read(answer) == AnswerFacts("chatcmpl-1", "gpt-4o-2024-08-06", ["tool_calls", "stop"], 7)


def test_a_responses_answer_finishes_with_its_status() -> None:
    answer = {
        "id": "resp_1",
        "object": "response",
        "model": "gpt-4o",
        "status": "incomplete",
        "usage": {"output_tokens": 3},
    }
    assert read(answer) == AnswerFacts("resp_1", "gpt-4o", ["incomplete"], 3)


def test_a_messages_stream_takes_the_id_from_message_start_and_the_reason_from_message_delta() -> None:
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "model": "claude-x",
            "stop_reason": None,
            "usage": {"input_tokens": 5, "output_tokens": 1},
        },
    }
    delta = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 12}}
    assert read(start, delta) == AnswerFacts("msg_1", "claude-x", ["end_turn"], 12)


def test_events_that_are_not_the_answer_do_not_name_it() -> None:
    block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "id": "not-it"}}
    assert read(block, {"type": "ping"}, "text", None) == AnswerFacts()


def sse(*events: Any) -> bytes:
    return b"".join(b"data: " + json.dumps(event).encode() + b"\n\n" for event in events)


@pytest.mark.parametrize("compact", [True, False])
def test_the_tap_reads_a_chat_streams_finish_reason_and_usage_chunks(compact: bool) -> None:
    tap = UsageTap()
    chunks = [
        {
            "id": "c1",
            "model": "m",
            "choices": [{"delta": {"content": "hi"}, "finish_reason": None}],
            "usage": None,
        },
        {"id": "c1", "model": "m", "choices": [{"delta": {}, "finish_reason": "length"}], "usage": None},
        {"id": "c1", "model": "m", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4}},
    ]
    body = sse(*chunks)
    body = body.replace(b'": ', b'":') if compact else body  # OpenAI's JSON is compact
    for cut in range(0, len(body), 17):  # pieces split anywhere
        tap.feed(body[cut : cut + 17])
    tap.feed(b"data: [DONE]\n\n")
    usage = tap.close()
    assert usage is not None and usage.input_tokens == 9
    assert tap.facts == AnswerFacts("c1", "m", ["length"], 4)
