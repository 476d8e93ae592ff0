"""Hostile Responses and Messages bodies: any JSON in any field is a 400 naming it or a valid request, never a 500."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from history_proxy.config.models import Config
from history_proxy.core.identity import Identity
from history_proxy.core.tokens import TokenCounters
from history_proxy.errors import InvalidRequestError
from history_proxy.pipeline.run import Pipeline
from history_proxy.surfaces import messages, responses
from history_proxy.surfaces.shape import shape
from tests.strategies import PROPERTY_SETTINGS
from tests.surface_bodies import miscounted

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)
CHAIN = [
    {"type": "remove_regex", "remove": ["a+"]},
    {"type": "tool_call_filter", "exclude": ["ls"]},
    {"type": "last_n_observations", "n": 1},
    {"type": "token_limiter", "limit": 50},
]
PIPELINE = Pipeline(
    Config.model_validate(
        {
            "upstreams": {"u": {"base_url": "mock://", "cache_control": True}},
            "cache_control": {"last_n_messages": 3},
            "policies": {"roles": {"r": CHAIN}},
        }
    ),
    TokenCounters(),
)


def responses_body() -> dict[str, Any]:
    return {
        "model": "gpt-4o",
        "instructions": "sys",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "aaa go"}]},
            {"type": "reasoning", "id": "rs", "summary": []},
            {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "aaa"},
            {"role": "user", "content": "aaa"},
        ],
    }


def messages_body() -> dict[str, Any]:
    return {
        "model": "claude-x",
        "max_tokens": 10,
        "system": [{"type": "text", "text": "aaa"}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "aaa go"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "ls", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "aaa"}]},
            {"role": "user", "content": "aaa"},
        ],
    }


RESPONSES_PATHS: list[list[str | int]] = [
    ["instructions"],
    ["input"],
    ["input", 0],
    ["input", 0, "content"],
    ["input", 0, "content", 0],
    ["input", 0, "content", 0, "text"],
    ["input", 0, "role"],
    ["input", 1],
    ["input", 1, "type"],
    ["input", 2, "call_id"],
    ["input", 2, "name"],
    ["input", 2, "arguments"],
    ["input", 2, "type"],
    ["input", 3, "call_id"],
    ["input", 3, "output"],
    ["input", 3, "type"],
    ["input", 4, "content"],
    ["previous_response_id"],
    ["model"],
]
MESSAGES_PATHS: list[list[str | int]] = [
    ["system"],
    ["system", 0],
    ["system", 0, "text"],
    ["messages"],
    ["messages", 0],
    ["messages", 0, "role"],
    ["messages", 0, "content"],
    ["messages", 0, "content", 0],
    ["messages", 0, "content", 0, "type"],
    ["messages", 1, "content", 0],
    ["messages", 1, "content", 0, "id"],
    ["messages", 1, "content", 0, "input"],
    ["messages", 1, "content", 0, "name"],
    ["messages", 2, "content", 0, "tool_use_id"],
    ["messages", 2, "content", 0, "content"],
    ["messages", 2, "content", 0, "type"],
    ["messages", 3, "content"],
    ["model"],
]


def poke(body: Any, path: list[Any], value: Any) -> Any:
    """``body`` with the value at ``path`` replaced by ``value``."""
    target = body
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return body


@settings(PROPERTY_SETTINGS, max_examples=max(PROPERTY_SETTINGS.max_examples, 200))
@given(data=st.data(), surface=st.sampled_from(["responses", "messages"]), value=JSON)
def test_any_json_anywhere_is_a_400_or_a_request(data: st.DataObject, surface: str, value: Any) -> None:
    paths = RESPONSES_PATHS if surface == "responses" else MESSAGES_PATHS
    path = data.draw(st.sampled_from(paths))
    body = poke(responses_body() if surface == "responses" else messages_body(), path, copy.deepcopy(value))
    with contextlib.suppress(InvalidRequestError):
        asyncio.run(shape(surface, PIPELINE, body, Identity(role="r"), "u"))
    counter = PIPELINE.tokens.get(model="gpt-4o")
    with contextlib.suppress(InvalidRequestError):  # whatever the adapter counted is what the pipeline counts
        view = (responses if surface == "responses" else messages).to_view(body, counter)
        assert miscounted(view, counter) == []
