"""Never stricter than the upstream, proven by hypothesis on ``/v1/messages`` (docs/surfaces.md).

Generated conversations (and Claude Code's recorded requests) are written as Messages requests, then
hypothesis inserts what the adapter does not know at random places: messages of other roles (a
mid-conversation ``system`` message, a role invented later), blocks of unknown types, and unknown
fields on messages and blocks. Through every filter case of :mod:`tests.support.filter_cases` and random
chains:

- every message of another role comes out exactly once, unchanged, in its place among the kept ones;
- every unknown block and field that comes out is unchanged, in the order it came;
- with the messages of other roles set aside, the request is still one the Messages API accepts;
- the client's request is never edited in place.
"""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from history_proxy.core.messages import Message
from history_proxy.errors import InvalidRequestError
from history_proxy.filters import Filter
from history_proxy.surfaces.shape import shape
from tests.strategies import conversations
from tests.support.filter_cases import CASES
from tests.support.surface_chains import IDENTITY, SETTINGS, in_order, pipeline_for
from tests.surface_bodies import anthropic_chat, messages_body, messages_errors

FIXTURE = Path(__file__).resolve().parent / "corpus" / "messages" / "claude-code-2.1.332.json"
PINNED_ROLES = ("system", "critic_2031")
UNKNOWN_BLOCK = "block_from_the_future"
UNKNOWN_FIELD = "field_from_the_future"


def is_tool_use_message(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return (
        message.get("role") == "assistant"
        and isinstance(content, list)
        and any(b.get("type") == "tool_use" for b in content)
    )


@st.composite
def with_unknowns(draw: st.DrawFn, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with unknown messages, blocks and fields at places hypothesis picks (each tagged ``n``)."""
    body = copy.deepcopy(body)
    messages: list[dict[str, Any]] = body["messages"]
    for n in range(draw(st.integers(0, 4))):  # blocks and fields inside the messages
        i = draw(st.integers(0, len(messages) - 1))
        message = messages[i]
        if draw(st.booleans()):
            message[UNKNOWN_FIELD] = {"n": n}
            continue
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
        if not blocks:
            continue
        if draw(st.booleans()):  # a field on a block
            b = draw(st.integers(0, len(blocks) - 1))
            blocks[b] = {**blocks[b], UNKNOWN_FIELD: n}
        else:
            results = sum(1 for b in blocks if b.get("type") == "tool_result")  # they stay first
            at = draw(st.integers(results, len(blocks)))
            blocks.insert(at, {"type": UNKNOWN_BLOCK, "n": n, "payload": {"deep": [n]}})
        message["content"] = blocks
    for n in range(draw(st.integers(0, 3))):  # messages of other roles, never between a call and its results
        places = [i for i in range(len(messages) + 1) if i == 0 or not is_tool_use_message(messages[i - 1])]
        at = draw(st.sampled_from(places))
        role = draw(st.sampled_from(PINNED_ROLES))
        content = draw(st.sampled_from([f"note {n}", [{"type": "text", "text": f"note {n}"}]]))
        messages.insert(at, {"role": role, "content": content, "pinned": n})
    return body


def blocks_where(messages: list[dict[str, Any]], test: Any) -> list[Any]:
    return [
        b
        for m in messages
        if isinstance(m.get("content"), list)
        for b in m["content"]
        if isinstance(b, dict) and test(b)
    ]


def unknown_blocks(messages: list[dict[str, Any]]) -> list[Any]:
    """The blocks of a type the adapter does not know (kept whole: never edited)."""
    return blocks_where(messages, lambda b: b.get("type") == UNKNOWN_BLOCK)


def block_fields(messages: list[dict[str, Any]]) -> list[Any]:
    """The unknown fields on known blocks (kept with the block, whose text a filter may rewrite)."""
    return [b[UNKNOWN_FIELD] for b in blocks_where(messages, lambda b: UNKNOWN_FIELD in b)]


def check(chain: list[Filter], body: dict[str, Any]) -> None:
    snapshot = copy.deepcopy(body)
    pipeline = pipeline_for(chain)
    try:
        sent = asyncio.run(shape("messages", pipeline, body, IDENTITY, "u")).body
    except InvalidRequestError:
        return  # what the chat chain refuses too (a filter that cannot apply): not this module's subject
    assert body == snapshot, "the client's request was changed in place"
    names = [f.type_name for f in chain]
    original = snapshot["messages"]
    pinned = [m for m in original if "pinned" in m]
    assert [m for m in sent["messages"] if "pinned" in m] == pinned, names  # all, unchanged
    assert in_order(sent["messages"], original), names
    assert in_order(unknown_blocks(sent["messages"]), unknown_blocks(original)), names
    assert all(b in unknown_blocks(original) for b in unknown_blocks(sent["messages"])), names
    assert in_order(block_fields(sent["messages"]), block_fields(original)), names
    fields = [m[UNKNOWN_FIELD] for m in original if UNKNOWN_FIELD in m]
    assert all(m[UNKNOWN_FIELD] in fields for m in sent["messages"] if UNKNOWN_FIELD in m), names
    rest = {**sent, "messages": [m for m in sent["messages"] if m["role"] in ("user", "assistant")]}
    assert messages_errors(rest) == [], f"{names}: {messages_errors(rest)}"


def generated_bodies() -> st.SearchStrategy[dict[str, Any]]:
    def body(chat: list[Message], extras: list[int]) -> dict[str, Any]:
        return messages_body(anthropic_chat(chat), extras)

    return st.builds(body, conversations(), st.lists(st.integers(0, 3), min_size=1, max_size=4))


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in CASES])
@SETTINGS
@given(data=st.data())
def test_every_filter_keeps_what_it_does_not_know_unchanged_and_in_place(
    case: Any, data: st.DataObject
) -> None:
    body = data.draw(generated_bodies().filter(lambda b: bool(b["messages"])))
    check([case.filter], data.draw(with_unknowns(body)))


@SETTINGS
@given(
    chain=st.lists(st.sampled_from([case.filter for case in CASES]), min_size=2, max_size=4), data=st.data()
)
def test_random_chains_keep_what_they_do_not_know_unchanged_and_in_place(
    chain: list[Filter], data: st.DataObject
) -> None:
    body = data.draw(generated_bodies().filter(lambda b: bool(b["messages"])))
    check(chain, data.draw(with_unknowns(body)))


@pytest.mark.parametrize("request_index", range(5))
@SETTINGS
@given(
    chain=st.lists(st.sampled_from([case.filter for case in CASES]), min_size=1, max_size=3), data=st.data()
)
def test_claude_codes_requests_keep_what_the_adapter_does_not_know(
    request_index: int, chain: list[Filter], data: st.DataObject
) -> None:
    body = json.loads(FIXTURE.read_text(encoding="utf-8"))["requests"][request_index]["body"]
    check(chain, data.draw(with_unknowns(body)))
