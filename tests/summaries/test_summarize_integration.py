"""``summarize`` through the real app: one summary call per block of turns, a byte-identical prefix between
blocks, the fallback when the summary call fails, and the default config working offline with the mock."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest
import respx

from history_proxy.config.loading import load_config, parse_config
from history_proxy.config.models import DEFAULT_CONFIG_PATH, Config
from history_proxy.core.messages import Message
from history_proxy.filters.summarize import SUMMARY_HEADING
from tests.factories import action, assistant, call, result, system, user
from tests.support.asgi_app import serve

pytestmark = pytest.mark.anyio

MAIN = "https://upstream.test/v1"
KEEP_RECENT, STEP, REQUESTS = 2, 3, 20


def completion(content: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
        ],
    }


class Upstream:
    """The upstream behind respx: summary requests get a deterministic summary, others an answer."""

    def __init__(self, *, summaries_fail: bool = False) -> None:
        self.summaries_fail = summaries_fail
        self.summary_requests: list[httpx.Request] = []
        self.chat_requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.headers.get("x-history-purpose") == "summary":
            self.summary_requests.append(request)
            if self.summaries_fail:
                return httpx.Response(500, json={"error": {"message": "down"}})
            summarized = json.loads(request.content)["messages"][:-1]
            return httpx.Response(
                200, json=completion(f"- {len(summarized)} messages, {summarized[0]['content']}")
            )
        self.chat_requests.append(request)
        return httpx.Response(200, json=completion("ok"))


def planner_config(**summarize: Any) -> Config:
    chain = [{"type": "summarize", "keep_recent": KEEP_RECENT, "step": STEP, "timeout_s": 2, **summarize}]
    return parse_config(
        {
            "upstreams": {"main": {"base_url": MAIN, "retries": 0}},
            "limits": {"connect_timeout_s": 1, "read_timeout_s": 2},
            "policies": {"roles": {"planner": chain}},
        },
        env={},
    )


def turn(n: int) -> list[Message]:
    act = action(call("search", {"q": f"topic {n}"}, call_id=f"call_{n}"))
    return [user(f"question {n}"), act, result(act, f"found {n}"), assistant(f"answer {n}")]


def request_for(turns: int) -> dict[str, Any]:
    """What an agent sends on its ``turns``-th turn: the finished turns, then the new question."""
    history = [system("You plan trips."), *(m for n in range(1, turns) for m in turn(n))]
    return {"model": "gpt-4o", "messages": [*history, user(f"question {turns}")]}


async def post(client: httpx.AsyncClient, body: dict[str, Any]) -> httpx.Response:
    response = await client.post("/v1/chat/completions", json=body, headers={"x-agent-role": "planner"})
    assert response.status_code == 200, response.text
    return response


def prefix_through_summary(messages: list[Message]) -> list[Message]:
    """The sent messages up to and including the summary message (just the system prompt without one)."""
    at = next((i for i, m in enumerate(messages) if str(m.get("content", "")).startswith(SUMMARY_HEADING)), 0)
    return messages[: at + 1]


async def test_a_growing_conversation_costs_one_summary_call_per_block_and_keeps_its_prefix(
    mocked: respx.MockRouter,
) -> None:
    upstream = Upstream()
    mocked.post(f"{MAIN}/chat/completions").mock(side_effect=upstream)
    async with serve(planner_config()) as client:
        for turns in range(1, REQUESTS + 1):
            response = await post(client, request_for(turns))
            assert response.headers["x-history-filters"] == "summarize"

    # the summarized span is (turns - keep_recent) // step * step: it advances at turns 5, 8, ..., 20
    blocks = (REQUESTS - KEEP_RECENT) // STEP
    assert len(upstream.summary_requests) == blocks == 6
    sent = [json.loads(r.content)["messages"] for r in upstream.chat_requests]
    raw = [r.content for r in upstream.chat_requests]
    advanced = 0
    for turns in range(2, REQUESTS + 1):
        previous, current = sent[turns - 2], sent[turns - 1]
        span_now = max(0, turns - KEEP_RECENT) // STEP * STEP
        span_before = max(0, turns - 1 - KEEP_RECENT) // STEP * STEP
        if span_now == span_before:
            assert prefix_through_summary(current) == prefix_through_summary(previous)
            # byte-identical: the whole previous request is where the new one starts (a prompt cache hit)
            assert raw[turns - 1].startswith(raw[turns - 2].removesuffix(b"]}")), f"request {turns}"
        else:
            advanced += 1
            assert prefix_through_summary(current) != prefix_through_summary(previous)
    assert advanced == blocks
    last = sent[-1]
    assert last[1] == {"role": "system", "content": f"{SUMMARY_HEADING}\n- 72 messages, question 1"}
    assert [m["content"] for m in last if m["role"] == "user"] == ["question 19", "question 20"]


async def test_the_summary_request_carries_exactly_the_old_turns_and_the_prompt_and_is_tagged(
    mocked: respx.MockRouter, caplog: pytest.LogCaptureFixture
) -> None:
    upstream = Upstream()
    mocked.post(f"{MAIN}/chat/completions").mock(side_effect=upstream)
    body = request_for(6)
    body["messages"][1] = {**body["messages"][1], "message_type": "task", "agent": "planner"}
    async with serve(planner_config(model="gpt-4o-mini", summary_prompt="Three bullets.")) as client:
        with caplog.at_level(logging.INFO, logger="history_proxy.access"):
            await post(client, body)
        metrics = (await client.get("/metrics")).text
    (summary_request,) = upstream.summary_requests
    sent = json.loads(summary_request.content)
    expected = [m for n in (1, 2, 3) for m in turn(n)]
    assert sent["model"] == "gpt-4o-mini"
    assert sent["messages"] == [*expected, {"role": "user", "content": "Three bullets."}]
    assert "stream" not in sent or sent["stream"] is False
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "history_proxy.access"]
    assert [line["role"] for line in lines] == ["summarizer", "planner"]
    assert 'history_proxy_requests_total{role="summarizer",status="200",upstream="main"} 1.0' in metrics
    assert 'history_proxy_summary_calls_total{outcome="ok",upstream="main"} 1.0' in metrics
    assert "history_proxy_summary_cache_misses_total 1.0" in metrics


async def test_a_failing_summary_call_still_sends_the_request_with_the_old_turns_dropped(
    mocked: respx.MockRouter, caplog: pytest.LogCaptureFixture
) -> None:
    upstream = Upstream(summaries_fail=True)
    mocked.post(f"{MAIN}/chat/completions").mock(side_effect=upstream)
    async with serve(planner_config()) as client:
        with caplog.at_level(logging.WARNING, logger="history_proxy.summarize"):
            response = await post(client, request_for(6))
        metrics = (await client.get("/metrics")).text
    # L3: the note is a note, not a filter name
    assert response.headers["x-history-filters"] == "summarize"
    assert "summarize:fallback" in response.headers["x-history-notes"].split(",")
    (sent,) = [json.loads(r.content)["messages"] for r in upstream.chat_requests]
    assert [m["content"] for m in sent if m["role"] == "user"] == ["question 4", "question 5", "question 6"]
    assert sent[0] == {"role": "system", "content": "You plan trips."}
    assert any("answered 500" in r.getMessage() for r in caplog.records)
    assert 'history_proxy_summary_calls_total{outcome="error",upstream="main"} 1.0' in metrics


async def test_the_default_config_summarizes_for_the_planner_role_offline_through_the_mock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    config = load_config(DEFAULT_CONFIG_PATH, env={"HISTORY_PROXY_MOCK": "1"})
    async with serve(config) as client:
        first = await post(client, request_for(9))
        preview = await client.post(
            "/v1/history/preview", json=request_for(9), headers={"x-agent-role": "planner"}
        )
    assert "summarize" in first.headers["x-history-filters"].split(",")
    assert "summarize:fallback" not in first.headers["x-history-filters"]
    summary = preview.json()["body"]["messages"][1]
    assert summary["role"] == "system"
    assert summary["content"].startswith(f"{SUMMARY_HEADING}\n- user asked: question 1\n")
