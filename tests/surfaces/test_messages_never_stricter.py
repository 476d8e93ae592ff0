"""``/v1/messages`` is never stricter than Anthropic's API (docs/surfaces.md, "Never stricter than the upstream").

Mid-conversation ``system`` messages (Claude Code 2.1.x, beta ``mid-conversation-system-2026-04-07``)
and roles, blocks and fields the adapter does not know go upstream unchanged and in place on every
role's chain; what the proxy must refuse is refused in Anthropic's shape and wording; the cache marks
the proxy places keep Anthropic's TTL order; the mock refuses what Anthropic refuses.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import httpx
import pytest

from history_proxy.config.models import Config
from history_proxy.core.identity import Identity
from history_proxy.core.tokens import TokenCounters
from history_proxy.errors import InvalidRequestError
from history_proxy.filters.cache_control import CacheControl
from history_proxy.mock.strict import messages_refusal
from history_proxy.pipeline.run import Pipeline
from history_proxy.server.app import create_app
from history_proxy.surfaces import messages
from history_proxy.surfaces.marks import place_marks
from history_proxy.surfaces.shape import shape
from history_proxy.upstream.headers import wire_request_headers
from tests.support.shaping import NO_NETWORK_ROLES, claude_code_body, default_config, in_place, run


def shaped(body: dict[str, Any], role: str, config: Config | None = None) -> dict[str, Any]:
    pipe = Pipeline(config or default_config(), TokenCounters())
    return asyncio.run(shape("messages", pipe, copy.deepcopy(body), Identity(role=role), "mock")).body


def post(body: dict[str, Any], role: str = "worker", path: str = "/v1/messages") -> httpx.Response:
    async def go() -> httpx.Response:
        app = create_app(default_config())
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client,
        ):
            headers = {"anthropic-version": "2023-06-01", "x-agent-role": role}
            return await client.post(path, json=body, headers=headers)

    return asyncio.run(go())


# --- mid-conversation system messages ----------------------------------------------------------


def test_the_issue_repro_is_answered_on_every_role_of_the_default_config() -> None:
    body = {
        "model": "claude-opus-4-8",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "hi"}, {"role": "system", "content": "x"}],
    }
    for role in NO_NETWORK_ROLES:
        answer = post(body, role)
        assert answer.status_code == 200, (role, answer.text)
        assert answer.json()["type"] == "message"
        assert "received 2 messages (system=1, user=1)" in answer.json()["content"][0]["text"]


def claude_code_turns() -> dict[str, Any]:
    """Claude Code's shape: a mid-conversation system message after the first task, three turns."""
    return {
        "model": "claude-opus-4-8",
        "max_tokens": 1024,
        "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
        "tools": [{"name": "Read", "input_schema": {"type": "object"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "read a.txt"}]},
            {"role": "system", "content": "# Environment\ncwd: /work", "output_config": {"effort": "low"}},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "A" * 400}]},
            {"role": "assistant", "content": "a.txt says A"},
            {"role": "user", "content": "now read b.txt"},
            {"role": "system", "content": [{"type": "text", "text": "reminder: b is big"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t2", "name": "Read", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2", "content": "B" * 400}]},
        ],
    }


@pytest.mark.parametrize("role", NO_NETWORK_ROLES)
def test_mid_conversation_system_messages_stay_whole_and_in_place_on_every_role(role: str) -> None:
    body = claude_code_turns()
    sent = shaped(body, role)["messages"]
    pinned = [m for m in body["messages"] if m["role"] == "system"]
    assert [m for m in sent if m["role"] == "system"] == pinned  # none dropped, merged or edited
    assert in_place(sent, body["messages"])
    assert messages_refusal({**body, "messages": sent}) is None  # still a request Anthropic takes


@pytest.mark.parametrize(
    "chain",
    [
        [{"type": "worker_view", "turns": "every_user"}],
        [{"type": "orchestrator_view", "max_conversation_turns": 1, "turns": "every_user"}],
        [{"type": "sliding_window", "window_size": 1}],
        [{"type": "token_limiter", "limit": 60}],
        [{"type": "sop_digest"}],
    ],
)
def test_a_system_message_is_never_a_turn_boundary_nor_dropped(chain: list[dict[str, Any]]) -> None:
    body = claude_code_turns()
    sent = run("messages", chain, body)["messages"]
    assert [m for m in sent if m["role"] == "system"] == [
        m for m in body["messages"] if m["role"] == "system"
    ]
    assert in_place(sent, body["messages"])
    assert sent[-1] == body["messages"][-1]


def test_a_request_of_pinned_messages_only_goes_upstream_as_it_came() -> None:
    body = {"model": "claude-x", "max_tokens": 10, "messages": [{"role": "system", "content": "only"}]}
    assert shaped(body, "worker") == body


# --- unknown roles, blocks and fields -------------------------------------------------------------


def test_unknown_roles_blocks_and_fields_are_forwarded_unchanged_and_in_place() -> None:
    body = claude_code_turns()
    body["messages"][4] = {
        "role": "assistant",
        "content": [{"type": "text", "text": "a.txt says A"}, {"type": "future_block", "x": [1]}],
        "future_field": {"y": 2},
    }
    body["messages"].insert(5, {"role": "critic", "content": [{"type": "verdict", "ok": True}]})
    for role in NO_NETWORK_ROLES:
        sent = shaped(body, role)["messages"]
        assert body["messages"][5] in sent
        assert in_place(sent, body["messages"])
        kept = [m for m in sent if m.get("future_field")]
        assert kept in ([], [body["messages"][4]])  # whole or not at all, never edited


# --- refusals in Anthropic's wording --------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"model": "c"}, "messages: Field required"),
        ({"model": "c", "messages": {}}, "messages: Input should be a valid list"),
        ({"model": "c", "messages": []}, "messages: at least one message is required"),
        (
            {"model": "c", "messages": [{"role": "user", "content": "x"}, 3]},
            "messages.1: Input should be a valid dictionary or object to extract fields from",
        ),
        ({"model": "c", "messages": [{"role": "user"}]}, "messages.0.content: Field required"),
        (
            {"model": "c", "messages": [{"role": "user", "content": 5}]},
            "messages.0.content: Input should be a valid list",
        ),
        (
            {"model": 7, "messages": [{"role": "user", "content": "x"}]},
            "model: Input should be a valid string",
        ),
    ],
)
def test_what_the_proxy_refuses_it_refuses_in_anthropics_shape_and_words(
    body: dict[str, Any], message: str
) -> None:
    answer = post(body)
    assert answer.status_code == 400
    assert answer.json() == {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


def test_the_adapter_names_the_first_message_at_fault() -> None:
    with pytest.raises(
        InvalidRequestError, match=r"^messages\.2\.content\.0: Input should be a valid dictionary"
    ):
        messages.to_view(
            {"messages": [{"role": "user", "content": "a"}, {"role": "x"}, {"role": "user", "content": [1]}]}
        )


# --- the mock upstream is as strict as Anthropic ------------------------------------------------


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}, "model: Field required"),
        ({"model": "c", "messages": [{"role": "user", "content": "x"}]}, "max_tokens: Field required"),
        (
            {
                "model": "c",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": [{"type": "text", "text": ""}]}],
            },
            "messages: text content blocks must be non-empty",
        ),
        (
            {
                "model": "c",
                "max_tokens": 5,
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "r"}],
                    }
                ],
            },
            "messages.0.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_1. Each "
            "`tool_result` block must have a corresponding `tool_use` block in the previous message.",
        ),
        (
            {
                "model": "c",
                "max_tokens": 5,
                "messages": [
                    {"role": "user", "content": "go"},
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "toolu_2", "name": "f", "input": {}}],
                    },
                    {"role": "user", "content": "and?"},
                ],
            },
            "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_2. "
            "Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
        ),
    ],
)
def test_the_mock_refuses_what_anthropic_refuses_in_its_words(body: dict[str, Any], message: str) -> None:
    answer = post(body, role="default")  # passthrough: the mock sees the request as sent
    assert answer.status_code == 400, answer.text
    assert answer.json() == {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


def test_the_mock_takes_a_mid_conversation_system_message_and_unknown_blocks() -> None:
    body = claude_code_turns()
    body["messages"][4] = {
        "role": "assistant",
        "content": [{"type": "future_block"}, {"type": "text", "text": "ok"}],
    }
    assert post(body, role="default").status_code == 200


# --- cache marks: the limit of 4 and Anthropic's TTL order -----------------------------------------


def ttls(body: dict[str, Any]) -> list[str]:
    """The TTLs of every mark in Anthropic's order (tools, system, messages)."""
    out: list[str] = []

    def walk(items: Any) -> None:
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict):
                if item.get("cache_control"):
                    out.append(item["cache_control"].get("ttl", "5m"))
                walk(item.get("content"))

    for key in ("tools", "system", "messages"):
        walk(body.get(key))
    return out


def test_a_1h_slot_after_the_clients_5_minute_marks_places_5_minute_marks() -> None:
    sent = run("messages", [{"type": "passthrough"}], claude_code_body(), marks=True, slot={"ttl": "1h"})
    assert ttls(sent) == ["5m", "5m", "5m", "5m"]  # the client's 2, then ours, downgraded


def test_a_1h_slot_without_client_marks_places_1h_marks() -> None:
    body = claude_code_body()
    body["system"] = [{"type": "text", "text": "plain"}]
    del body["tools"][0]["cache_control"]
    sent = run("messages", [{"type": "passthrough"}], body, marks=True, slot={"ttl": "1h"})
    assert ttls(sent) == ["1h", "1h"]


def test_no_5_minute_mark_is_placed_before_a_clients_1h_mark() -> None:
    body = claude_code_body()
    body["system"] = [{"type": "text", "text": "plain"}]
    del body["tools"][0]["cache_control"]
    body["messages"][-1] = {
        "role": "user",
        "content": [{"type": "text", "text": "thanks", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
    }
    sent = place_marks(body, CacheControl(type="cache_control", last_n_messages=3))
    assert ttls(sent) == ["1h"]  # a 5-minute mark before it would break the order: none placed


def test_a_1h_slot_after_a_clients_1h_mark_keeps_1h() -> None:
    body = claude_code_body()
    body["system"] = [{"type": "text", "text": "S", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    del body["tools"][0]["cache_control"]
    sent = run("messages", [{"type": "passthrough"}], body, marks=True, slot={"ttl": "1h"})
    assert ttls(sent) == ["1h", "1h", "1h"]


# --- betas and the query string -----------------------------------------------------------------


def test_every_anthropic_beta_value_and_line_goes_upstream_as_sent() -> None:
    client = [
        ("anthropic-beta", "claude-code-20250219,interleaved-thinking-2025-05-14"),
        ("anthropic-beta", "mid-conversation-system-2026-04-07"),
        ("anthropic-version", "2023-06-01"),
        ("x-agent-role", "worker"),
    ]
    sent = wire_request_headers(
        client, None, client_auth_is_proxy_key=False, withheld=frozenset({"x-agent-role"})
    )
    assert [(k, v) for k, v in sent if k == b"anthropic-beta"] == [
        (b"anthropic-beta", b"claude-code-20250219,interleaved-thinking-2025-05-14"),
        (b"anthropic-beta", b"mid-conversation-system-2026-04-07"),
    ]
    assert all(k != b"x-agent-role" for k, _ in sent)
