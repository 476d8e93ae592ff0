"""Fitting a Responses or Messages request to a token budget (history_proxy/surfaces/fit.py), over the corpus.

Each corpus conversation is written as a Responses and a Messages request (with reasoning, signed
thinking and server tool items), cut to half its tokens, and the cut request must be what the
upstream can take: valid for its API, smaller, its leading system message (``system``) and newest
user message kept, every item it keeps one the client sent, unedited and in order.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from history_proxy.config.models import CacheControlSlot
from history_proxy.core.tokens import TokenCounters
from history_proxy.surfaces import messages as anthropic
from history_proxy.surfaces import responses
from history_proxy.surfaces._view import REF
from history_proxy.surfaces.fit import fit, history_tokens
from history_proxy.surfaces.marks import place_marks
from history_proxy.surfaces.shape import SurfaceName
from tests.factories import corpus_files, exchange, system, user
from tests.surface_bodies import (
    anthropic_chat,
    messages_body,
    messages_errors,
    plain_chat,
    responses_body,
    responses_errors,
)

TOKENS = TokenCounters()
EXTRAS = [0, 1, 3, 2]
"""Per assistant step: nothing, reasoning (signed thinking), both with a server tool, the server tool alone."""


def written_as(surface: SurfaceName, chat: list[dict[str, Any]]) -> dict[str, Any]:
    if surface == "responses":
        return responses_body(plain_chat(chat), EXTRAS)
    return messages_body(anthropic_chat(chat), EXTRAS)


def errors_of(surface: SurfaceName, body: dict[str, Any]) -> list[str]:
    return responses_errors(body) if surface == "responses" else messages_errors(body)


def pieces(surface: SurfaceName, body: dict[str, Any]) -> list[Any]:
    """The native pieces a cut keeps or drops: Responses input items, Messages content blocks."""
    if surface == "responses":
        return list(body["input"])
    out: list[Any] = []
    for message in body["messages"]:
        content = message["content"]
        out += content if isinstance(content, list) else [content]
    return out


def newest_user(surface: SurfaceName, body: dict[str, Any]) -> Any:
    view = (responses.to_view(body) if surface == "responses" else anthropic.to_view(body)).messages
    return next({k: v for k, v in m.items() if k != REF} for m in reversed(view) if m["role"] == "user")


def is_subsequence(kept: list[Any], original: list[Any]) -> bool:
    rest = iter(original)
    return all(any(piece == other for other in rest) for piece in kept)


@pytest.mark.parametrize("surface", ["responses", "messages"])
def test_every_corpus_conversation_cut_to_half_is_a_valid_smaller_request_of_its_own_api(
    surface: SurfaceName,
) -> None:
    considered = fitted_count = 0
    for path in corpus_files():
        chat = json.loads(path.read_text(encoding="utf-8"))["messages"]
        if surface == "messages" and all(m["role"] in ("system", "developer") for m in chat):
            continue  # no Messages form: its messages would be empty
        considered += 1
        body = written_as(surface, chat)
        sent = copy.deepcopy(body)
        before = history_tokens(surface, body, TOKENS)
        assert before is not None
        fitted = fit(surface, body, before // 2, TOKENS)
        assert body == sent, path.name  # the sent body is left alone
        if fitted is None:  # nothing droppable: the newest group and user message are all there is
            continue
        fitted_count += 1
        assert errors_of(surface, fitted) == [], path.name
        after = history_tokens(surface, fitted, TOKENS)
        assert after is not None and after < before, path.name
        assert newest_user(surface, fitted) == newest_user(surface, body), path.name
        kept = [p for p in pieces(surface, fitted) if p != anthropic.OMITTED]
        assert is_subsequence(kept, pieces(surface, body)), path.name  # verbatim, in order
        if surface == "messages":
            assert fitted.get("system") == body.get("system"), path.name
        elif body["input"][0].get("role") == "system":
            assert fitted["input"][0] == body["input"][0], path.name
    assert fitted_count >= considered * 3 // 4  # 44 of 48 and of 47 today: the rest are one group long


def agent_chat() -> list[dict[str, Any]]:
    chat = [system("You are a coding agent."), user("fix the build")]
    for k in range(10):
        chat += exchange("bash", output=f"step {k}: " + "compiling module ... ok\n" * 20)
    return [*chat, user("now run the tests")]


@pytest.mark.parametrize("surface", ["responses", "messages"])
def test_signed_reasoning_and_thinking_items_are_kept_byte_for_byte_or_dropped_whole(
    surface: SurfaceName,
) -> None:
    body = written_as(surface, agent_chat())
    before = history_tokens(surface, body, TOKENS)
    assert before is not None
    fitted = fit(surface, body, before // 3, TOKENS)
    assert fitted is not None and errors_of(surface, fitted) == []
    opaque = ("reasoning", "thinking", "web_search_call", "server_tool_use", "web_search_tool_result")
    signed = [p for p in pieces(surface, fitted) if isinstance(p, dict) and p.get("type") in opaque]
    original = [p for p in pieces(surface, body) if isinstance(p, dict) and p.get("type") in opaque]
    assert signed and len(signed) < len(original)
    assert all(piece in original for piece in signed)


def test_a_messages_history_cut_to_an_assistant_message_opens_with_a_user_message() -> None:
    body = messages_body(anthropic_chat(agent_chat()))
    before = history_tokens("messages", body, TOKENS)
    assert before is not None
    fitted = fit("messages", body, before // 3, TOKENS)
    assert fitted is not None
    assert fitted["messages"][0] == {"role": "user", "content": anthropic.OMITTED}
    assert messages_errors(fitted) == []


def test_native_cache_marks_are_placed_again_on_the_cut_messages_request() -> None:
    body = messages_body(anthropic_chat(agent_chat()))
    body["system"] = [
        {"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}
    ]
    slot = CacheControlSlot(last_n_messages=2)
    sent = place_marks(body, slot)  # as the first send placed them
    before = history_tokens("messages", sent, TOKENS)
    assert before is not None
    fitted = fit("messages", sent, before // 3, TOKENS, marks=slot)
    assert fitted is not None and messages_errors(fitted) == []
    marked = [i for i, m in enumerate(fitted["messages"]) if "cache_control" in json.dumps(m)]
    count = len(fitted["messages"])
    assert marked == [count - 2, count - 1]
    assert fitted["system"] == body["system"]


def test_what_the_proxy_may_not_cut_is_not_fitted() -> None:
    stateful = {
        "model": "gpt-4o",
        "previous_response_id": "resp_1",
        "input": [{"role": "user", "content": "x"}],
    }
    assert history_tokens("responses", stateful, TOKENS) is None
    assert fit("responses", stateful, 10, TOKENS) is None
    one_turn = {"model": "gpt-4o", "instructions": "Be brief.", "input": "word " * 500}
    assert fit("responses", one_turn, 10, TOKENS) is None  # the newest user message alone: nothing smaller
    assert fit("messages", {"model": "claude-x", "messages": []}, 10, TOKENS) is None  # not a valid request
