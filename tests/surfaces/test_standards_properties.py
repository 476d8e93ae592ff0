"""Properties of the OpenAI standards' adapters: every request they write stays valid.

Breakpoints (:mod:`history_proxy.surfaces.breakpoints`) over generated chat conversations and Responses
bodies with random client breakpoints and random slots; compaction (:mod:`history_proxy.surfaces.compaction`)
over generated Responses bodies with proxy handles and OpenAI items placed where a compacted history
has them (before a user message), for each mode.
"""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from history_proxy.config.models import CacheControlSlot
from history_proxy.core.invariants import invariant_errors
from history_proxy.core.messages import Message
from history_proxy.surfaces import breakpoints, compaction
from tests.strategies import PROPERTY_SETTINGS, conversations
from tests.surface_bodies import plain_chat, responses_body, responses_errors

SLOTS = st.builds(
    CacheControlSlot,
    last_n_messages=st.integers(0, 5),
    last_n_messages_offset=st.integers(0, 3),
    tagged_roles=st.lists(st.sampled_from(["user", "tool", "system", "assistant"]), max_size=3, unique=True),
    part=st.sampled_from(["last", "first"]),
)


def with_client_marks(items: list[Any], chosen: list[int]) -> list[Any]:
    """``items`` with the client's breakpoint on the first list part of the chosen user messages."""
    out = list(items)
    for n in chosen:
        item = out[n % len(out)] if out else None
        content = item.get("content") if isinstance(item, dict) else None
        if isinstance(item, dict) and item.get("role") == "user" and isinstance(content, list) and content:
            first = {**content[0], breakpoints.BREAKPOINT: dict(breakpoints.EXPLICIT)}
            out[n % len(out)] = {**item, "content": [first, *content[1:]]}
    return out


def total_marks(body: dict[str, Any], key: str) -> int:
    return breakpoints.client_marks(body, key)


@PROPERTY_SETTINGS
@given(conversations(), SLOTS, st.lists(st.integers(0, 40), max_size=5))
def test_chat_breakpoints_keep_the_request_valid_and_within_four_writes(
    messages: list[Message], slot: CacheControlSlot, chosen: list[int]
) -> None:
    body = {"model": "gpt-5.6-sol", "messages": with_client_marks(plain_chat(messages), chosen)}
    before = copy.deepcopy(body)
    out = breakpoints.place(body, slot, "messages")
    assert body == before  # input not mutated
    assert invariant_errors(out["messages"]) == invariant_errors(body["messages"])
    client = total_marks(body, "messages")
    assert total_marks(out, "messages") <= max(client, breakpoints.MAX_WRITES - 1)
    assert breakpoints.place(out, slot, "messages") == out  # placing twice is placing once
    assert [m.get("role") for m in out["messages"]] == [m.get("role") for m in body["messages"]]
    assert breakpoints.BREAKPOINT not in json.dumps(breakpoints.strip(out, "messages"))


@PROPERTY_SETTINGS
@given(conversations(), SLOTS, st.lists(st.integers(0, 40), max_size=5))
def test_responses_breakpoints_keep_the_request_valid(
    messages: list[Message], slot: CacheControlSlot, chosen: list[int]
) -> None:
    body = responses_body(plain_chat(messages))
    body["input"] = with_client_marks(body["input"], chosen)
    out = breakpoints.place(body, slot, "input")
    assert responses_errors(out) == responses_errors(body)
    assert total_marks(out, "input") <= max(total_marks(body, "input"), breakpoints.MAX_WRITES - 1)
    for item in out["input"]:
        if breakpoints.BREAKPOINT in json.dumps(item):
            assert item.get("role") in breakpoints.MARKABLE_ROLES


class Store:
    """Handles in a dict, by tenant."""

    def __init__(self) -> None:
        self.held: dict[tuple[str | None, str], str] = {}

    async def keep(self, tenant: str | None, handle: str, summary: str) -> None:
        self.held[(tenant, handle)] = summary

    async def find(self, tenant: str | None, handle: str) -> str | None:
        return self.held.get((tenant, handle))


OURS = {"type": "compaction", "id": "cmp_hpx_1", "encrypted_content": compaction.HANDLE_PREFIX + "abc"}
THEIRS = {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAAB-openai"}


@PROPERTY_SETTINGS
@given(
    conversations(),
    st.lists(st.tuples(st.integers(0, 60), st.booleans()), max_size=4),
    st.sampled_from(["native", "emulate", "strip"]),
    st.booleans(),
)
def test_compaction_items_are_prepared_into_a_valid_request_for_every_mode(
    messages: list[Message], placed: list[tuple[int, bool]], mode: compaction.Mode, known: bool
) -> None:
    body = responses_body(plain_chat(messages))
    items: list[Any] = body["input"]
    for at, ours in placed:  # before a user message: where a compacted history has one
        users = [n for n, item in enumerate(items) if item.get("role") == "user"]
        if users:
            items.insert(users[at % len(users)], dict(OURS if ours else THEIRS))
    store = Store()
    if known:
        store.held[(None, OURS["encrypted_content"])] = "the summary"
    body["context_management"] = [{"type": "compaction", "compact_threshold": 1000}]
    before = copy.deepcopy(body)
    prepared = asyncio.run(compaction.prepare(body, mode, None, store))
    out = prepared.body
    assert body == before
    assert responses_errors(out) == []
    assert compaction.HANDLE_PREFIX not in json.dumps(out)  # a handle never leaves the proxy
    foreign = [item for item in out["input"] if item.get("type") == "compaction"]
    assert foreign == ([THEIRS] * len(foreign) if mode == "native" else [])
    assert ("context_management" in out) == (mode == "native")
    assert prepared.threshold == (1000 if mode == "emulate" else None)
    assert [i for i in out["input"] if i.get("role") == "user"][-1] == [
        i for i in items if i.get("role") == "user"
    ][-1]
