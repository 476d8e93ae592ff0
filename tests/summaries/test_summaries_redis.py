"""Summaries shared through a real Redis (``redis-server`` on a free port): two proxy apps make one
summary call between them, and a Redis that goes away mid-test leaves them serving from memory."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import httpx
import pytest
import respx

from history_proxy.config.loading import parse_config
from history_proxy.config.models import Config
from history_proxy.core.messages import Message
from history_proxy.filters.summarize import SUMMARY_HEADING
from history_proxy.server.app import create_app
from history_proxy.summaries.store import RedisBackend
from tests.factories import action, assistant, call, result, system, user
from tests.support.redis_server import PREFIX, RedisServer

pytestmark = pytest.mark.anyio

MAIN = "https://upstream.test/v1"


class SlowUpstream:
    """Summaries take ``delay_s``, so concurrent requests really overlap; counts both kinds of call."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.summary_calls = 0
        self.chat_calls = 0

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.headers.get("x-history-purpose") == "summary":
            self.summary_calls += 1
            await asyncio.sleep(self.delay_s)
            summarized = json.loads(request.content)["messages"][:-1]
            content = f"- {len(summarized)} messages, first: {summarized[0]['content']}"
        else:
            self.chat_calls += 1
            content = "ok"
        message = {"role": "assistant", "content": content}
        return httpx.Response(
            200, json={"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
        )


def config_for(server: RedisServer) -> Config:
    return parse_config(
        {
            "upstreams": {"main": {"base_url": MAIN, "retries": 0}},
            "limits": {"connect_timeout_s": 1, "read_timeout_s": 3},
            "summary_cache": {"backend": "redis", "url": server.url, "key_prefix": PREFIX, "timeout_s": 0.3},
            "policies": {
                "roles": {"planner": [{"type": "summarize", "keep_recent": 2, "step": 2, "timeout_s": 3}]}
            },
        },
        env={},
    )


@asynccontextmanager
async def replicas(config: Config, count: int) -> AsyncIterator[list[httpx.AsyncClient]]:
    """``count`` independent proxy apps (each its own memory cache and Redis client), lifespans running."""
    async with AsyncExitStack() as stack:
        clients = []
        for _ in range(count):
            app = create_app(config)
            await stack.enter_async_context(app.router.lifespan_context(app))
            transport = httpx.ASGITransport(app=app)
            clients.append(
                await stack.enter_async_context(
                    httpx.AsyncClient(transport=transport, base_url="http://proxy")
                )
            )
            backend = app.state.proxy.summaries.backend
            assert isinstance(backend, RedisBackend)
            backend.retry_after_s = 0.05  # retry a Redis that came back quickly, for the test
        yield clients


def turn(n: int) -> list[Message]:
    act = action(call("lookup", {"id": n}, call_id=f"call_{n}"))
    return [user(f"question {n}"), act, result(act, f"record {n}"), assistant(f"answer {n}")]


def request_for(turns: int) -> dict[str, Any]:
    history = [system("You plan."), *(m for n in range(1, turns) for m in turn(n))]
    return {"model": "gpt-4o", "messages": [*history, user(f"question {turns}")]}


async def chat(client: httpx.AsyncClient, turns: int) -> httpx.Response:
    response = await client.post(
        "/v1/chat/completions", json=request_for(turns), headers={"x-agent-role": "planner"}
    )
    assert response.status_code == 200, response.text
    assert response.headers["x-history-filters"] == "summarize", "summarized, no fallback"
    return response


async def test_two_replicas_sharing_redis_make_one_summary_call_for_the_same_conversation(
    redis_server: RedisServer, mocked: respx.MockRouter
) -> None:
    upstream = SlowUpstream(delay_s=0.3)
    mocked.post(f"{MAIN}/chat/completions").mock(side_effect=upstream)
    async with replicas(config_for(redis_server), 3) as (first, second, third):
        # at the same moment: one replica takes the Redis lock and calls, the other waits for its summary
        await asyncio.gather(chat(first, 6), chat(second, 6))
        assert upstream.summary_calls == 1
        # later, a replica that never saw the conversation: the summary is already in Redis
        await chat(third, 7)  # the same span (turns 1-4) as turn 6
        assert upstream.summary_calls == 1 and upstream.chat_calls == 3
        pair = [(await replica.get("/metrics")).text for replica in (first, second)]
        metrics = (await third.get("/metrics")).text
    assert len(redis_server.summary_keys()) == 1
    waited = [text for text in pair if 'history_proxy_summary_cache_hits_total{source="redis"} 1.0' in text]
    assert len(waited) == 1, "the replica that lost the Redis lock got the winner's summary"
    assert 'history_proxy_summary_cache_hits_total{source="redis"} 1.0' in metrics


async def test_redis_stopping_mid_conversation_degrades_to_the_memory_cache_without_a_failed_request(
    redis_server: RedisServer, mocked: respx.MockRouter, caplog: pytest.LogCaptureFixture
) -> None:
    upstream = SlowUpstream()
    mocked.post(f"{MAIN}/chat/completions").mock(side_effect=upstream)
    async with replicas(config_for(redis_server), 1) as (client,):
        await chat(client, 5)  # span of 2 turns, summarized and stored in Redis and memory
        assert upstream.summary_calls == 1 and len(redis_server.summary_keys()) == 1

        redis_server.stop()
        with caplog.at_level(logging.INFO, logger="history_proxy.summary_cache"):
            await chat(client, 5)  # same span: from memory, Redis not even asked
            await chat(client, 6)  # the span advances: Redis fails, the summary is written anyway
            await chat(client, 7)  # the same span as turn 6: from memory
            assert upstream.summary_calls == 2
            metrics = (await client.get("/metrics")).text

            redis_server.start()  # Redis is back (empty): after the back-off it is used again
            await asyncio.sleep(0.1)
            await chat(client, 8)  # a new span: written and stored in Redis again
            await chat(client, 9)
        assert upstream.summary_calls == 3 and upstream.chat_calls == 6
        assert len(redis_server.summary_keys()) >= 1

    errors = [
        line for line in metrics.splitlines() if line.startswith("history_proxy_summary_cache_errors_total")
    ]
    assert errors and float(errors[0].rsplit(" ", 1)[1]) >= 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "unreachable" in warnings[0], "one warning per outage"
    assert any("reachable again" in r.getMessage() for r in caplog.records)


async def test_a_summary_written_before_an_outage_is_still_the_same_text_after_it(
    redis_server: RedisServer, mocked: respx.MockRouter
) -> None:
    upstream = SlowUpstream()
    route = mocked.post(f"{MAIN}/chat/completions").mock(side_effect=upstream)
    async with replicas(config_for(redis_server), 1) as (client,):
        await chat(client, 5)
        redis_server.stop()
        await chat(client, 5)
    chats = [
        json.loads(c.request.content)["messages"]
        for c in route.calls
        if "x-history-purpose" not in c.request.headers
    ]
    assert chats[0][:2] == chats[1][:2]
    assert chats[0][1]["content"].startswith(SUMMARY_HEADING)
