"""``/v1/compress`` by hypothesis: whatever the chain, one message back per message sent, and no pair broken.

For every filter case of :mod:`tests.support.filter_cases` and for random chains, over generated
conversations (whole, and as LiteLLM's guardrail sends them: assistant, system and newest rows
withheld), the engine's answer:

- has exactly as many messages as were sent, each of the same role;
- keeps every pair: an assistant message's ``tool_calls`` and a tool message's ``tool_call_id`` are the
  ones sent, so the pairs the gateway sent are the pairs it gets back;
- gives ``system`` and ``developer`` messages back verbatim, and never changes the body it was sent.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from history_proxy.core.messages import Message
from history_proxy.errors import InvalidRequestError
from history_proxy.filters import Filter
from history_proxy.surfaces.shape import shape
from history_proxy.surfaces.table import ENGINE
from tests.strategies import conversations
from tests.support.filter_cases import CASES
from tests.support.surface_chains import IDENTITY, SETTINGS, pipeline_for


def as_litellm_sends(chat: list[Message]) -> list[Message]:
    """The rows LiteLLM's ``headroom`` guardrail sends: no system or assistant rows, nor the newest user row."""
    last_user = max((i for i, m in enumerate(chat) if m["role"] == "user"), default=-1)
    return [
        m
        for i, m in enumerate(chat)
        if m["role"] not in ("system", "developer", "assistant") and i != last_user
    ]


def check(chain: list[Filter], sent: list[Message]) -> None:
    if not sent:
        return
    body: dict[str, Any] = {"model": "gpt-4o", "messages": sent}
    snapshot = copy.deepcopy(body)
    pipeline = pipeline_for(chain)
    try:
        shaped = asyncio.run(shape(ENGINE, pipeline, body, IDENTITY, "u"))
    except InvalidRequestError:
        return  # a filter that cannot apply to this input: a 400, the gateway sends it uncompressed
    answer = shaped.body["messages"]
    names = [f.type_name for f in chain]
    assert body == snapshot, "the body sent was changed in place"
    assert len(answer) == len(sent), names
    for got, was in zip(answer, sent, strict=True):
        assert got["role"] == was["role"], names
        assert got.get("tool_calls") == was.get("tool_calls"), names
        assert got.get("tool_call_id") == was.get("tool_call_id"), names
        if was["role"] in ("system", "developer"):
            assert got == was, names
        assert "history_ref" not in got


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in CASES])
@SETTINGS
@given(chat=conversations(), litellm=st.booleans())
def test_every_filter_answers_one_message_per_message_sent_with_every_pair_whole(
    case: Any, chat: list[Message], litellm: bool
) -> None:
    check([case.filter], as_litellm_sends(chat) if litellm else chat)


@SETTINGS
@given(
    chain=st.lists(st.sampled_from([case.filter for case in CASES]), min_size=2, max_size=4),
    chat=conversations(),
    litellm=st.booleans(),
)
def test_random_chains_answer_one_message_per_message_sent_with_every_pair_whole(
    chain: list[Filter], chat: list[Message], litellm: bool
) -> None:
    check(chain, as_litellm_sends(chat) if litellm else chat)
