"""The bytes of request bodies in flight, bounded per process (issue 34, item 2)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from history_proxy.config.loading import parse_config
from history_proxy.config.models import Config, LimitsConfig
from history_proxy.server.inflight import (
    BASE_BYTES,
    BODY_MEMORY_FACTOR,
    budget_from_memory,
    container_memory_limit,
    worst_case_memory,
)
from tests.support.faults import FaultUpstream, eventually, serving

pytestmark = pytest.mark.anyio
MIB = 1024 * 1024


def config(base_url: str, **limits: Any) -> Config:
    return parse_config(
        {
            "upstreams": {
                "main": {"base_url": base_url, "retries": 0},
                "claude": {"base_url": base_url, "retries": 0, "api": "anthropic"},
            },
            "routes": [{"model": "claude-*", "upstream": "claude"}],
            "limits": {"connect_timeout_s": 1, "read_timeout_s": 10, **limits},
        },
        env={},
    )


def chat(size: int) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": "x" * size}]}


def messages(size: int) -> dict[str, Any]:
    return {"model": "claude-x", "max_tokens": 8, "messages": [{"role": "user", "content": "x" * size}]}


async def test_bodies_past_the_budget_are_refused_in_each_surfaces_shape_until_bytes_come_back() -> None:
    async with (
        FaultUpstream(default="hold") as upstream,
        serving(config(upstream.base_url, max_inflight_bytes=3 * MIB)) as url,
        httpx.AsyncClient(timeout=20) as client,
    ):
        held = asyncio.create_task(client.post(f"{url}/v1/chat/completions", json=chat(2 * MIB)))
        await eventually(lambda: len(upstream.arrivals) == 1)
        openai_refused = await client.post(f"{url}/v1/chat/completions", json=chat(2 * MIB))
        assert openai_refused.status_code == 503 and openai_refused.headers["retry-after"] == "1"
        assert openai_refused.json()["error"]["code"] == "proxy_busy"
        assert "limits.max_inflight_bytes" in openai_refused.json()["error"]["message"]
        anthropic_refused = await client.post(f"{url}//v1/messages", json=messages(2 * MIB))
        assert anthropic_refused.status_code == 529
        assert anthropic_refused.json() == {
            "type": "error",
            "error": {"type": "overloaded_error", "message": anthropic_refused.json()["error"]["message"]},
        }
        small = asyncio.create_task(client.post(f"{url}/v1/chat/completions", json=chat(100_000)))
        await eventually(lambda: len(upstream.arrivals) == 2)  # what fits the budget still goes
        assert (await client.get(f"{url}/healthz")).status_code == 200  # never counted
        upstream.release.set()
        assert (await held).status_code == 200 and (await small).status_code == 200
        assert (await client.post(f"{url}/v1/messages", json=messages(2 * MIB))).status_code == 200


async def test_a_chunked_body_is_counted_as_it_arrives() -> None:
    async def pieces() -> AsyncIterator[bytes]:
        for _ in range(4):
            yield b" " * MIB
        yield b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}'

    async with (
        FaultUpstream(default="hold") as upstream,
        serving(config(upstream.base_url, max_inflight_bytes=3 * MIB)) as url,
        httpx.AsyncClient(timeout=20) as client,
    ):
        refused = await client.post(f"{url}/v1/chat/completions", content=pieces())
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "proxy_busy", refused.text
        assert upstream.arrivals == []
        upstream.release.set()
        assert (await client.post(f"{url}/v1/chat/completions", json=chat(1000))).status_code == 200


async def test_a_stream_gives_its_bytes_back_once_its_answer_started() -> None:
    async with (
        FaultUpstream(default="trickle") as upstream,
        serving(config(upstream.base_url, max_inflight_bytes=3 * MIB)) as url,
        httpx.AsyncClient(timeout=20) as client,
        client.stream("POST", f"{url}/v1/chat/completions", json=chat(2 * MIB)) as streaming,
    ):
        assert streaming.status_code == 200
        assert await anext(streaming.aiter_raw())  # the answer started: the body is gone
        upstream.default = "ok"
        second = await client.post(f"{url}/v1/chat/completions", json=chat(2 * MIB))
        assert second.status_code == 200, second.text
        upstream.release.set()


def test_the_container_memory_limit_is_read_from_cgroup_v2_or_v1(tmp_path: Path) -> None:
    v2, v1 = tmp_path / "memory.max", tmp_path / "memory.limit_in_bytes"
    assert container_memory_limit((v2, v1)) is None  # neither file: not in a container
    v1.write_text("9223372036854771712\n")  # v1's "no limit"
    assert container_memory_limit((v2, v1)) is None
    v1.write_text("805306368\n")
    assert container_memory_limit((v2, v1)) == 805306368
    v2.write_text("max\n")
    assert container_memory_limit((v2, v1)) is None  # v2 first: unlimited
    v2.write_text("536870912\n")
    assert container_memory_limit((v2, v1)) == 536870912


def test_the_budget_sized_from_memory_keeps_the_worst_case_under_the_limit() -> None:
    limits = LimitsConfig(max_concurrent=256)
    for memory in (512 * MIB, 768 * MIB, 2048 * MIB):
        for workers in (1, 2):
            budget = budget_from_memory(limits, memory, workers)
            assert budget is not None and budget >= MIB
            worst = worst_case_memory(limits, budget)
            assert worst is not None
            if memory // workers < BASE_BYTES + 128 * MIB + BODY_MEMORY_FACTOR * MIB:
                assert budget == MIB  # the memo and cache bounds alone fill the memory: 1 MiB of bodies
            else:
                assert worst * workers <= memory, (memory, workers, worst)
    assert budget_from_memory(limits, None) is None
    assert worst_case_memory(LimitsConfig(), None) is None  # nothing bounds the bodies
    assert worst_case_memory(LimitsConfig(max_concurrent=2), None) == (
        BASE_BYTES + 128 * MIB + BODY_MEMORY_FACTOR * 2 * 32 * MIB
    )
