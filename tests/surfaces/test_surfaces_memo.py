"""The view memo (``history_proxy.surfaces.memo``): a conversation sent turn by turn is shaped exactly as without it.

An agent resends its history with every call; the memo lets a Responses or Messages request convert
only the natives its conversation's previous request did not have. It must never show: the body sent
and the chain's figures are the same with and without it, whatever changed between two requests (a
new step, an edited earlier message, a moved cache mark), and the chain never changes a remembered
view message in place.
"""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.bodies import replay_prefixes
from history_proxy.config.models import Config
from history_proxy.core.identity import Identity
from history_proxy.core.messages import Message
from history_proxy.core.tokens import TokenCounters
from history_proxy.pipeline.run import Pipeline
from history_proxy.surfaces import messages as anthropic
from history_proxy.surfaces import responses
from history_proxy.surfaces.memo import Conversation, Remembered, ViewMemo, conversation_key, matched
from history_proxy.surfaces.shape import SurfaceName, shape
from tests.factories import corpus_files
from tests.strategies import PROPERTY_SETTINGS, conversations
from tests.surface_bodies import anthropic_chat, messages_body, plain_chat, responses_body

WHO = Identity(role="worker", agent="coder")
CHAINS: dict[str, list[dict[str, Any]]] = {
    "worker": [
        {"type": "worker_view"},
        {"type": "last_n_observations", "n": 2},
        {"type": "token_limiter", "limit": 3000, "step": 2},
    ],
    "redact": [
        {"type": "remove_regex", "remove": ["[0-9]{3,}"]},
        {"type": "tool_call_filter", "exclude": ["ls"]},
    ],
    "passthrough": [{"type": "passthrough"}],
}
PIPELINES = {
    name: Pipeline(
        Config.model_validate(
            {
                "upstreams": {"u": {"base_url": "mock://", "cache_control": True}},
                "cache_control": {"last_n_messages": 2},
                "policies": {"roles": {"worker": chain}},
            }
        ),
        TokenCounters(),
    )
    for name, chain in CHAINS.items()
}


def native(surface: SurfaceName, chat: list[Message]) -> dict[str, Any]:
    """``chat`` as a request of ``surface``, with reasoning items or signed thinking blocks."""
    if surface == "responses":
        return {**responses_body(plain_chat(chat), [1, 0, 2]), "model": "gpt-4o"}
    return {**messages_body(anthropic_chat(chat), [1, 0, 2]), "model": "gpt-4o"}


def shaped(pipeline: Pipeline, surface: SurfaceName, body: dict[str, Any], memo: ViewMemo | None) -> Any:
    result = asyncio.run(shape(surface, pipeline, copy.deepcopy(body), WHO, "u", memo))
    report = {k: v for k, v in result.result.report.items() if k not in ("filters",)}
    return result.body, report, result.result.tokens_before, result.result.tokens_after


def natives_of(surface: SurfaceName, body: dict[str, Any]) -> list[Any]:
    natives: list[Any] = body["input"] if surface == "responses" else body["messages"]
    return natives


def assert_turns_alike(pipeline: Pipeline, surface: SurfaceName, bodies: list[dict[str, Any]]) -> int:
    """Every body shaped with one memo (in order) and without: alike; returns the natives reused."""
    memo = ViewMemo(10_000)
    for body in bodies:
        assert shaped(pipeline, surface, body, memo) == shaped(pipeline, surface, body, None)
    return memo.hits


@pytest.mark.parametrize("surface", ["responses", "messages"])
@pytest.mark.parametrize("chain", sorted(CHAINS))
def test_every_corpus_conversation_sent_turn_by_turn_is_shaped_as_without_the_memo(
    surface: SurfaceName, chain: str
) -> None:
    reused = 0
    for path in corpus_files():
        chat = json.loads(path.read_text(encoding="utf-8"))["messages"]
        turns = [p for p in replay_prefixes(chat) if any(m["role"] not in ("system", "developer") for m in p)]
        reused += assert_turns_alike(PIPELINES[chain], surface, [native(surface, turn) for turn in turns])
    assert reused > 1000, "the memo was never used: nothing was proven"


@pytest.mark.parametrize("surface", ["responses", "messages"])
@PROPERTY_SETTINGS
@given(chat=conversations(), data=st.data())
def test_a_conversation_whose_earlier_message_changed_is_shaped_as_without_the_memo(
    surface: SurfaceName, chat: list[Message], data: st.DataObject
) -> None:
    body = native(surface, chat)
    natives = natives_of(surface, body)
    edited = copy.deepcopy(body)
    at = data.draw(st.integers(0, len(natives) - 1))
    target = natives_of(surface, edited)[at]
    target["cache_control" if surface == "messages" else "status"] = (
        {"type": "ephemeral"} if surface == "messages" else "completed"
    )
    shorter = copy.deepcopy(body)
    del natives_of(surface, shorter)[data.draw(st.integers(1, len(natives))) :]
    for pipeline in PIPELINES.values():
        assert_turns_alike(pipeline, surface, [shorter, body, edited, body])


@pytest.mark.parametrize("surface", ["responses", "messages"])
def test_the_chain_never_changes_a_remembered_view_in_place(surface: SurfaceName) -> None:
    adapter = responses if surface == "responses" else anthropic
    for path in corpus_files()[:12]:
        chat = json.loads(path.read_text(encoding="utf-8"))["messages"]
        if all(m["role"] in ("system", "developer") for m in chat):
            continue  # system alone has no Messages form
        body = native(surface, chat)
        for pipeline in PIPELINES.values():
            memo = ViewMemo(10_000)
            shaped(pipeline, surface, body, memo)
            counter = pipeline.tokens.get(model="gpt-4o")
            opening = body.get("instructions") if surface == "responses" else body.get("system")
            entry = memo.recall(conversation_key(surface, opening, natives_of(surface, body)), counter)
            assert entry is not None
            fresh = adapter.to_view(copy.deepcopy(body), counter)
            assert entry.view.messages == fresh.messages
            assert entry.view.counts == fresh.counts


def named(name: str) -> Conversation:
    return Conversation(name.encode(), 0)


def test_the_memo_holds_at_most_its_bound_dropping_the_conversation_unused_longest() -> None:
    counter = TokenCounters().get(model="gpt-4o")
    memo = ViewMemo(10)
    entries = {}
    for name in "abc":
        natives: list[Any] = [{"role": "user", "content": name}] * 4
        entries[name] = Remembered(natives, anthropic.to_view({"messages": natives}, counter), counter)
        memo.keep(named(name), entries[name])
        assert memo.held <= 10
    assert memo.recall(named("a"), counter) is None  # a and b held 8; c pushed a out
    assert memo.recall(named("b"), counter) is entries["b"]
    memo.keep(named("d"), entries["a"])  # b was used since c was kept: c goes
    assert memo.recall(named("c"), counter) is None and memo.recall(named("b"), counter) is entries["b"]
    memo.keep(named("huge"), Remembered([{}] * 11, entries["a"].view, counter))
    assert memo.recall(named("huge"), counter) is None and memo.held <= 10
    other = TokenCounters().get(model="gpt-4o")
    assert memo.recall(named("b"), other) is None, (
        "a view counted with another encoding's counter is not reused"
    )


def test_conversations_are_told_apart_by_surface_opening_and_first_message() -> None:
    first = [{"role": "user", "content": "fix the bug"}]
    key = conversation_key("messages", "You are a coder.", first)
    assert key == conversation_key(
        "messages", "You are a coder.", [*first, {"role": "assistant", "content": "ok"}]
    )
    assert key != conversation_key("responses", "You are a coder.", first)
    assert key != conversation_key("messages", "You are a reviewer.", first)
    assert key != conversation_key("messages", "You are a coder.", [{"role": "user", "content": "other"}])
    assert conversation_key("messages", None, []) is None


def test_matched_counts_the_equal_leading_natives() -> None:
    a, b, c = (
        {"role": "user", "content": "a"},
        {"role": "user", "content": "b"},
        {"role": "user", "content": "c"},
    )
    assert matched([a, b, c], [dict(a), dict(b)]) == 2
    assert matched([a, c], [a, b]) == 1
    assert matched([a], []) == 0
    deep: list[Any] = [[], []]
    for _ in range(5000):
        deep = [[deep[0]], [deep[1]]]
    assert matched([deep[0]], [deep[1]]) == 0  # too deep to compare: converted again, no crash
