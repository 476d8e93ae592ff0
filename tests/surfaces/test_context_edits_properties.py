"""Emulated Messages edits keep every request valid: random conversations, random edit parameters,
after random chains (issue 33, done-when).

For every valid Messages request (thinking blocks, server tools, parallel calls) and any list of edits
with any parameters, emulating them: leaves the client's body as it was; sends a request the Messages
API takes (tests/surface_bodies.py ``messages_errors`` and the mock's own Anthropic rules,
``history_proxy.mock.strict``); keeps every tool use's id and its result, in order; never changes or
drops a thinking block of the current turn; reports exactly the results it cleared; is
deterministic; and, run on what the role's chain kept, still sends a valid request.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from hypothesis import assume, given
from hypothesis import strategies as st

from history_proxy.core.messages import Message
from history_proxy.filters import Filter
from history_proxy.mock.strict import messages_refusal
from history_proxy.surfaces.context_management import manage
from history_proxy.surfaces.edit_clear_thinking import TYPE as CLEAR_THINKING
from history_proxy.surfaces.edit_clear_tool_uses import PLACEHOLDER
from history_proxy.surfaces.edit_clear_tool_uses import TYPE as CLEAR_TOOL_USES
from history_proxy.surfaces.edit_common import EditInput, current_turn_start
from history_proxy.surfaces.shape import shape
from tests.strategies import TOOLS, conversations
from tests.support.filter_cases import CASES
from tests.support.surface_chains import IDENTITY, SETTINGS, pipeline_for
from tests.surface_bodies import anthropic_chat, messages_body, messages_errors

EXTRAS = st.lists(st.integers(0, 3), min_size=1, max_size=4)


def setting(kind: str) -> st.SearchStrategy[Any]:
    """A parameter as clients write it, or as they get it wrong."""
    return st.one_of(
        st.fixed_dictionaries({"type": st.just(kind), "value": st.integers(0, 30)}),
        st.just({"type": kind, "value": -1}),
        st.just("nonsense"),
        st.none(),
    )


def tool_uses_edit() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {"type": st.just(CLEAR_TOOL_USES)},
        optional={
            "trigger": st.one_of(setting("input_tokens"), setting("tool_uses")),
            "keep": setting("tool_uses"),
            "clear_at_least": setting("input_tokens"),
            "exclude_tools": st.lists(st.sampled_from(TOOLS), max_size=2),
            "clear_tool_inputs": st.booleans(),
        },
    )


def thinking_edit() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {"type": st.just(CLEAR_THINKING)},
        optional={"keep": st.one_of(setting("thinking_turns"), st.just("all"))},
    )


EDITS = st.lists(st.one_of(tool_uses_edit(), thinking_edit(), st.just({"type": "unknown_edit"})), max_size=3)


def env(input_tokens: int) -> EditInput:
    return EditInput(input_tokens=input_tokens, tokens=lambda text: len(text) // 4 + 1, thinking=True)


def ids(messages: list[dict[str, Any]]) -> list[str]:
    return [
        str(b.get("id") or b.get("tool_use_id"))
        for m in messages
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") in ("tool_use", "tool_result")
    ]


def current_thinking(messages: list[dict[str, Any]]) -> list[Any]:
    start = current_turn_start(messages)
    return [
        b
        for m in messages[start:]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") in ("thinking", "redacted_thinking")
    ]


def cleared(messages: list[dict[str, Any]]) -> int:
    return sum(
        1
        for m in messages
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result" and b.get("content") == PLACEHOLDER
    )


def request(chat: list[Message], extras: list[int], edits: list[dict[str, Any]]) -> dict[str, Any]:
    body = messages_body(anthropic_chat(chat), extras)
    assume(messages_errors(body) == [] and messages_refusal(body) is None)
    return {
        **body,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "context_management": {"edits": edits},
    }


@SETTINGS
@given(chat=conversations(), extras=EXTRAS, edits=EDITS, input_tokens=st.integers(0, 200_000))
def test_emulated_edits_keep_every_request_valid(
    chat: list[Message], extras: list[int], edits: list[dict[str, Any]], input_tokens: int
) -> None:
    body = request(chat, extras, edits)
    snapshot = copy.deepcopy(body)
    managed = manage(body, "emulate", lambda _: env(input_tokens))
    sent = managed.body
    assert body == snapshot, "the client's body was changed in place"
    assert "context_management" not in sent
    assert messages_errors(sent) == [] and messages_refusal(sent) is None
    assert ids(sent["messages"]) == ids(body["messages"])  # every pair whole, in order
    assert current_thinking(sent["messages"]) == current_thinking(body["messages"])
    reported = sum(e.get("cleared_tool_uses", 0) for e in managed.applied or [])
    assert cleared(sent["messages"]) - cleared(body["messages"]) <= reported
    again = manage(body, "emulate", lambda _: env(input_tokens))
    assert again.body == sent and again.applied == managed.applied


@SETTINGS
@given(
    chain=st.lists(st.sampled_from([case.filter for case in CASES]), min_size=1, max_size=3),
    chat=conversations(),
    extras=EXTRAS,
    edits=EDITS,
)
def test_edits_on_what_a_random_chain_kept_still_send_a_valid_request(
    chain: list[Filter], chat: list[Message], extras: list[int], edits: list[dict[str, Any]]
) -> None:
    body = request(chat, extras, edits)
    shaped = asyncio.run(shape("messages", pipeline_for(chain), body, IDENTITY, "u"))
    sent = manage(shaped.body, "emulate", lambda _: env(shaped.result.tokens_after)).body
    assert messages_errors(sent) == [], [f.type_name for f in chain]
    assert current_thinking(sent["messages"]) == current_thinking(shaped.body["messages"])
