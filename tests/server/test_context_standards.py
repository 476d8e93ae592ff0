"""What reaches the upstream and what comes back, per mode, for a Messages request with ``context_management``."""

from __future__ import annotations

import json
from typing import Any

import pytest
import respx

from history_proxy.config.loading import parse_config
from history_proxy.config.models import Config
from history_proxy.core.identity import Identity
from history_proxy.core.tokens import TokenCounters
from history_proxy.pipeline.run import Pipeline
from tests.support.asgi_app import serve

pytestmark = pytest.mark.anyio

BETA = "context-management-2025-06-27"
MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-x",
    "content": [{"type": "text", "text": "ok"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 10, "output_tokens": 1},
}


def config(base_url: str, mode: str | None = None) -> Config:
    upstream: dict[str, Any] = {"base_url": base_url, "api": "anthropic", "retries": 0}
    if mode is not None:
        upstream["context_management"] = mode
    return parse_config({"upstreams": {"claude": upstream}}, env={})


def body() -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "task"}]
    for n in range(3):
        messages.append(
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": f"t{n}", "name": "Read", "input": {}}],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"t{n}", "content": "x" * 50}],
            }
        )
    edit = {
        "type": "clear_tool_uses_20250919",
        "trigger": {"type": "tool_uses", "value": 1},
        "keep": {"type": "tool_uses", "value": 1},
    }
    return {
        "model": "claude-x",
        "max_tokens": 10,
        "messages": messages,
        "context_management": {"edits": [edit]},
    }


async def test_native_forwards_the_field_and_merges_the_beta(mocked: respx.MockRouter) -> None:
    route = mocked.post("https://api.anthropic.com/v1/messages").respond(json=MESSAGE)
    async with serve(config("https://api.anthropic.com/v1")) as client:
        answer = await client.post(
            "/v1/messages", json=body(), headers={"anthropic-beta": "files-api-2025-04-14"}
        )
    assert answer.status_code == 200 and "context_management" not in answer.json()  # the upstream's to add
    sent = route.calls.last.request
    assert json.loads(sent.content)["context_management"] == body()["context_management"]
    assert sent.headers["anthropic-beta"] == f"files-api-2025-04-14,{BETA}"


async def test_emulate_sends_neither_field_nor_beta_and_answers_the_applied_edits(
    mocked: respx.MockRouter,
) -> None:
    route = mocked.post("https://claude.test/v1/messages").respond(json=MESSAGE)
    async with serve(config("https://claude.test/v1")) as client:
        answer = await client.post("/v1/messages", json=body(), headers={"anthropic-beta": BETA})
    sent = route.calls.last.request
    assert "anthropic-beta" not in sent.headers
    forwarded = json.loads(sent.content)
    assert "context_management" not in forwarded
    results = [m["content"][0]["content"] for m in forwarded["messages"][2::2]]
    assert results[:2] == ["[tool result cleared to save context]"] * 2 and results[2] == "x" * 50
    applied = answer.json()["context_management"]["applied_edits"]
    assert [(e["type"], e["cleared_tool_uses"]) for e in applied] == [("clear_tool_uses_20250919", 2)]
    assert "context_edit:clear_tool_uses_20250919" in answer.headers["x-history-notes"]


async def test_strip_sends_the_history_as_it_came_without_the_field(mocked: respx.MockRouter) -> None:
    route = mocked.post("https://claude.test/v1/messages").respond(json=MESSAGE)
    async with serve(config("https://claude.test/v1", "strip")) as client:
        answer = await client.post("/v1/messages", json=body())
    forwarded = json.loads(route.calls.last.request.content)
    assert forwarded["messages"] == body()["messages"] and "context_management" not in forwarded
    assert "context_management" not in answer.json()


async def test_the_preview_shows_the_body_the_upstreams_mode_sends(mocked: respx.MockRouter) -> None:
    route = mocked.route(host="claude.test")
    async with serve(config("https://claude.test/v1")) as client:
        answer = await client.post("/v1/history/preview?api=messages", json=body())
    previewed = answer.json()["body"]
    assert "context_management" not in previewed
    assert previewed["messages"][2]["content"][0]["content"] == "[tool result cleared to save context]"
    assert not route.called


async def test_an_upstream_error_passes_through_untouched(mocked: respx.MockRouter) -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    mocked.post("https://claude.test/v1/messages").respond(529, json=error)
    async with serve(config("https://claude.test/v1")) as client:
        answer = await client.post("/v1/messages", json=body())
    assert answer.status_code == 529 and answer.json() == error


def test_a_seeded_ratio_divides_the_budget_from_the_first_request() -> None:
    raw = {
        "upstreams": {"claude": {"base_url": "https://claude.test/v1", "token_ratios": {"claude": 1.6}}},
        "policies": {"roles": {"worker": [{"type": "token_limiter", "limit": 100000}]}},
    }
    pipeline = Pipeline(parse_config(raw, env={}), TokenCounters())
    ctx = pipeline.context(Identity(role="worker"), "claude-sonnet-4-6", "claude")
    (limiter,) = [f for _, f in pipeline.resolve("worker", None).chain]
    assert ctx.token_ratio == 1.6 and limiter.budget(ctx) == 62_500
    other = pipeline.context(Identity(role="worker"), "gpt-4o", "claude")
    assert limiter.budget(other) == 100_000  # another family: nothing known


@pytest.mark.parametrize(("fallback_mode", "tried"), [(None, False), ("emulate", True)])
async def test_a_fallback_of_another_mode_is_not_tried_for_a_request_carrying_the_field(
    mocked: respx.MockRouter, fallback_mode: str | None, tried: bool
) -> None:
    mocked.post("https://claude.test/v1/messages").respond(
        503, json={"type": "error", "error": {"type": "x"}}
    )
    fallback = mocked.post("https://api.anthropic.com/v1/messages").respond(json=MESSAGE)
    second: dict[str, Any] = {"base_url": "https://api.anthropic.com/v1", "api": "anthropic", "retries": 0}
    if fallback_mode is not None:
        second["context_management"] = fallback_mode
    raw = {
        "upstreams": {
            "first": {"base_url": "https://claude.test/v1", "api": "anthropic", "retries": 0},
            "second": second,
        },
        "routes": [{"model": "claude-*", "upstream": "first", "fallbacks": ["second"]}],
    }
    async with serve(parse_config(raw, env={})) as client:
        answer = await client.post("/v1/messages", json=body())
        plain = {key: value for key, value in body().items() if key != "context_management"}
        without = await client.post("/v1/messages", json=plain)
    assert (answer.status_code == 200) is tried and fallback.call_count == 1 + tried
    assert without.status_code == 200  # a request without the field takes every fallback
