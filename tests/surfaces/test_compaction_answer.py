"""The answer of an inline-compacted Responses request: the proxy's ``compaction`` item first, whole or
streamed, however the stream is cut into pieces."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from history_proxy.surfaces.compaction_answer import InlineCompaction

ITEM = {"type": "compaction", "id": "cmp_hpx_1", "encrypted_content": "hpx-compaction-1.abc"}
MESSAGE = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]}


def sse(events: list[dict[str, Any]], numbered: bool = True) -> bytes:
    out = b""
    for n, event in enumerate(events):
        if numbered:
            event = {**event, "sequence_number": n}
        out += f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()
    return out


def upstream_stream(numbered: bool = True) -> bytes:
    response = {"id": "resp_1", "object": "response", "status": "in_progress", "output": []}
    return sse(
        [
            {"type": "response.created", "response": response},
            {"type": "response.in_progress", "response": response},
            {"type": "response.output_item.added", "output_index": 0, "item": {**MESSAGE, "content": []}},
            {"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": "done"},
            {"type": "response.output_item.done", "output_index": 0, "item": MESSAGE},
            {
                "type": "response.completed",
                "response": {**response, "status": "completed", "output": [MESSAGE]},
            },
        ],
        numbered,
    )


def events_of(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in data.split(b"\n") if line.startswith(b"data:")]


def through(rewrite: InlineCompaction, data: bytes, cuts: list[int]) -> bytes:
    out, at = b"", 0
    for cut in sorted(cuts):
        out += rewrite.piece(data[at:cut])
        at = cut
    return out + rewrite.piece(data[at:]) + rewrite.end()


def test_a_stream_gets_the_item_at_index_zero_after_the_opening_events() -> None:
    events = events_of(through(InlineCompaction(ITEM), upstream_stream(), []))
    kinds = [e["type"] for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.output_item.done",
    ]
    assert events[2]["item"] == ITEM and events[2]["output_index"] == 0
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e.get("output_index") for e in events[4:7]] == [1, 1, 1]  # the upstream's message moved up
    assert events[-1]["response"]["output"] == [ITEM, MESSAGE]


@given(st.lists(st.integers(min_value=0, max_value=len(upstream_stream())), max_size=12))
def test_the_rewrite_does_not_depend_on_where_the_stream_is_cut(cuts: list[int]) -> None:
    whole = through(InlineCompaction(ITEM), upstream_stream(), [])
    assert through(InlineCompaction(ITEM), upstream_stream(), cuts) == whole


def test_events_without_sequence_numbers_stay_without_them() -> None:
    events = events_of(through(InlineCompaction(ITEM), upstream_stream(numbered=False), []))
    assert not any("sequence_number" in e for e in events)
    assert events[2]["item"] == ITEM


def test_an_error_before_any_output_is_relayed_without_the_item() -> None:
    data = sse([{"type": "error", "code": "server_error", "message": "overloaded"}])
    assert events_of(through(InlineCompaction(ITEM), data, [])) == events_of(data)


def test_a_stream_with_no_output_gets_the_item_before_its_final_response() -> None:
    response = {"id": "resp_1", "status": "completed", "output": []}
    data = sse(
        [
            {"type": "response.created", "response": response},
            {"type": "response.completed", "response": response},
        ]
    )
    events = events_of(through(InlineCompaction(ITEM), data, []))
    assert [e["type"] for e in events][1:3] == ["response.output_item.added", "response.output_item.done"]
    assert events[-1]["response"]["output"] == [ITEM]


def test_a_whole_answer_lists_the_item_first_and_anything_else_is_left_as_it_came() -> None:
    answer = json.dumps({"id": "resp_1", "object": "response", "output": [MESSAGE]}).encode()
    assert json.loads(InlineCompaction(ITEM).whole(answer))["output"] == [ITEM, MESSAGE]
    assert InlineCompaction(ITEM).whole(b"not json") == b"not json"
