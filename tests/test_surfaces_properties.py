"""The surfaces' invariants (docs/surfaces.md) by hypothesis: every filter, random chains, Responses and Messages.

Each chat conversation (generated, or from the corpus) is also written as a Responses and a Messages
request, with what only those surfaces carry (reasoning and server tool items, signed thinking blocks,
server tool blocks). For every filter case of :mod:`tests.support.filter_cases` and for random chains:

- the written-back request is valid for its API (:mod:`tests.surface_bodies`);
- every view message the adapter counted while building the view has the count the pipeline would
  give it, and is of the plain shape the pipeline would skip checking;
- reasoning, thinking, server tool and compaction items are byte-identical to ones the client sent;
- items the chain left alone keep their order, and a chain that changed nothing sends the request as it came;
- the chain decided as it does on chat completions: the written-back request, read again as the view,
  holds the messages the chat chain keeps (system messages aside on Messages, which folds them into ``system``).
"""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from history_proxy.core.messages import Message, text_of
from history_proxy.errors import InvalidRequestError
from history_proxy.filters import Filter
from history_proxy.surfaces import messages as anthropic
from history_proxy.surfaces import responses
from history_proxy.surfaces.messages_valid import REMOVED
from history_proxy.surfaces.shape import shape
from tests.factories import corpus_files
from tests.strategies import conversations
from tests.support.filter_cases import CASES
from tests.support.surface_chains import IDENTITY, SETTINGS, in_order, pipeline_for
from tests.surface_bodies import (
    anthropic_chat,
    messages_body,
    messages_errors,
    miscounted,
    plain_chat,
    responses_body,
    responses_errors,
)

OPAQUE_ITEMS = frozenset({"reasoning", "web_search_call", "compaction"})
OPAQUE_BLOCKS = frozenset({"thinking", "redacted_thinking", "server_tool_use", "web_search_tool_result"})


def key(messages: list[Message], *, skip_system: bool = False) -> list[tuple[Any, ...]]:
    """What a decision is made of: roles, texts, calls and the calls answered, in order."""
    return [
        (
            m.get("role"),
            text_of(m.get("content")),
            tuple((c["id"], c["function"]["name"]) for c in m.get("tool_calls") or []),
            m.get("tool_call_id"),
        )
        for m in messages
        if not (skip_system and m.get("role") in ("system", "developer"))
    ]


def merged_steps(keys: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Assistant text directly followed by an assistant's calls without text, as one message.

    Responses items carry no step boundary of their own: ``[message, function_call]`` is one step,
    whether the client sent it so or a filter dropped what stood between two steps.
    """
    out: list[tuple[Any, ...]] = []
    for k in keys:
        if out and k[0] == out[-1][0] == "assistant" and not out[-1][2] and k[2] and not k[1]:
            out[-1] = (out[-1][0], out[-1][1], k[2], None)
        else:
            out.append(k)
    return out


def opaque(body: dict[str, Any], surface: str) -> list[Any]:
    if surface == "responses":
        return [item for item in body["input"] if item.get("type") in OPAQUE_ITEMS]
    return [
        block
        for message in body["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") in OPAQUE_BLOCKS
    ]


def items(body: dict[str, Any], surface: str) -> list[Any]:
    return list(body["input"] if surface == "responses" else body["messages"])


def check(chain: list[Filter], chat: list[Message], surface: str, extras: list[int]) -> None:
    """Every property of the module docstring, for one chain, conversation and surface."""
    pipeline = pipeline_for(chain)
    if surface == "responses":
        conversation = plain_chat(chat)
        body = responses_body(conversation, extras)
    else:
        conversation = anthropic_chat(chat)
        body = messages_body(conversation, extras)
    snapshot = copy.deepcopy(body)
    adapter = responses if surface == "responses" else anthropic
    counter = pipeline.tokens.get(model=body["model"])
    assert miscounted(adapter.to_view(body, counter), counter) == []
    try:
        expected = asyncio.run(
            pipeline.run({"model": body["model"], "messages": conversation}, IDENTITY, "u")
        )
    except InvalidRequestError:
        with pytest.raises(InvalidRequestError):
            asyncio.run(shape(surface, pipeline, body, IDENTITY, "u"))
        return
    shaped = asyncio.run(shape(surface, pipeline, body, IDENTITY, "u"))
    sent = shaped.body
    assert body == snapshot, "the client's body was changed in place"
    errors = responses_errors(sent) if surface == "responses" else messages_errors(sent)
    assert errors == [], f"{[f.type_name for f in chain]} on {surface}: {errors}"
    assert all(item in opaque(snapshot, surface) for item in opaque(sent, surface))
    assert in_order(items(sent, surface), items(snapshot, surface))
    if expected.body["messages"] == conversation:
        assert sent == snapshot, "a chain that changed nothing must send the request as it came"
    seen_again = adapter.to_view(sent).messages
    skip = surface == "messages"
    got = key(seen_again, skip_system=skip)
    if skip and sent["messages"][0]["content"] == anthropic.OMITTED:
        got = got[1:]
    want = key(expected.body["messages"], skip_system=skip)
    if skip and sent["messages"][-1]["content"] == [{"type": "text", "text": REMOVED}]:
        # the chain left an assistant message last: Messages closes with a user message (no prefill)
        assert expected.body["messages"][-1]["role"] != "user"
        assert snapshot["messages"][-1]["role"] == "user"
        got = got[:-1]
    if surface == "responses":
        got, want = merged_steps(got), merged_steps(want)
    assert got == want, f"{[f.type_name for f in chain]} on {surface}"


EXTRAS = st.lists(st.integers(0, 3), min_size=1, max_size=4)


@pytest.mark.parametrize("surface", ["responses", "messages"])
@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in CASES])
@SETTINGS
@given(chat=conversations(), extras=EXTRAS)
def test_every_filter_decides_on_each_surface_as_on_chat(
    case: Any, surface: str, chat: list[Message], extras: list[int]
) -> None:
    check([case.filter], chat, surface, extras)


@pytest.mark.parametrize("surface", ["responses", "messages"])
@SETTINGS
@given(
    chain=st.lists(st.sampled_from([case.filter for case in CASES]), min_size=2, max_size=4),
    chat=conversations(),
    extras=EXTRAS,
)
def test_random_chains_decide_on_each_surface_as_on_chat(
    surface: str, chain: list[Filter], chat: list[Message], extras: list[int]
) -> None:
    check(chain, chat, surface, extras)


@pytest.mark.parametrize("surface", ["responses", "messages"])
def test_every_filter_decides_on_each_surface_as_on_chat_over_the_corpus(surface: str) -> None:
    checked = 0
    for path in corpus_files():
        chat = json.loads(path.read_text(encoding="utf-8"))["messages"]
        if surface == "messages" and all(m["role"] in ("system", "developer") for m in chat):
            continue  # system alone (AutoGen's speaker selection) has no Messages form: messages must not be empty
        for case in CASES:
            check([case.filter], chat, surface, [0, 1, 3, 2])
            checked += 1
    assert checked >= len(CASES)
