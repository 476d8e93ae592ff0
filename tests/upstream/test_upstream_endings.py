"""Honest endings and retries that do not stack, through the proxy served by uvicorn, with the openai SDK.

An upstream body that breaks off after the proxy's answer started must never reach the client as a
complete answer: the client's connection is dropped without the answer's end (SSE keeps its in-band
error event), and it is counted. Answers no client should get (status 600, 101, a 3 MB error body)
are a 502 before anything starts. A 429 is not retried by the proxy when the client's SDK retries it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from history_proxy.config.loading import parse_config
from history_proxy.config.models import Config
from tests.support.faults import (
    COMPLETION,
    FaultUpstream,
    chat,
    chunked,
    make_config,
    reset_connection,
    serving,
)

pytestmark = pytest.mark.anyio

MESSAGES: list[Any] = [{"role": "user", "content": "hi"}]
RATE_LIMITED = b'{"error":{"message":"slow down","type":"rate_limit_error","param":null,"code":null}}'


class HostileUpstream(FaultUpstream):
    """:class:`FaultUpstream` with the red team's answers."""

    async def _cut_json(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, probe: str) -> None:
        """A non-streamed completion sent chunked, cut after 60 bytes."""
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
            + chunked(COMPLETION[:60])
        )
        await writer.drain()
        await asyncio.sleep(0.05)
        reset_connection(writer)

    async def _short_length(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, probe: str
    ) -> None:
        """Declares 100,000 bytes of text, sends 5,000, resets."""
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 100000\r\n\r\n")
        writer.write(b"x" * 5000)
        await writer.drain()
        await asyncio.sleep(0.05)
        reset_connection(writer)

    async def _bad_chunk(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, probe: str
    ) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
            + chunked(b'{"id":')
        )
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(b"zz\r\nnot a size\r\n")
        await writer.drain()
        await asyncio.sleep(0.05)

    async def _status_600(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, probe: str
    ) -> None:
        writer.write(b"HTTP/1.1 600 Beyond\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}")
        await writer.drain()

    async def _switch(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, probe: str) -> None:
        writer.write(b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.05)

    async def _huge_error(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, probe: str
    ) -> None:
        writer.write(b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain\r\n")
        writer.write(b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n")
        for _ in range(50):  # 3.2 MB, and it could go on
            writer.write(chunked(b"e" * 65536))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def _small_error(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, probe: str
    ) -> None:
        writer.write(b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\n")
        writer.write(b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n" + chunked(b'{"error":{}}'))
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def _rate_limited(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, probe: str
    ) -> None:
        writer.write(b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\n")
        writer.write(b"retry-after-ms: 10\r\nretry-after: 1\r\n")
        writer.write(b"content-length: %d\r\nconnection: close\r\n\r\n%b" % (len(RATE_LIMITED), RATE_LIMITED))
        await writer.drain()


def broken_counts(text: str) -> dict[str, float]:
    return {
        sample.labels["upstream"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "history_proxy_upstream_broken_total"
    }


@asynccontextmanager
async def proxied(default: str, config: Config | None = None) -> AsyncIterator[tuple[HostileUpstream, str]]:
    async with (
        HostileUpstream(default=default) as upstream,
        serving(config or make_config(("main", upstream.base_url))) as url,
    ):
        yield upstream, url


def sdk(url: str, max_retries: int = 2) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=max_retries)


# --- 2. a body that breaks off is never passed off as complete ---------------------------------------


async def test_a_cut_non_streamed_completion_is_a_connection_error_for_the_sdk_which_retries() -> None:
    async with proxied("cut-json") as (upstream, url):
        client = sdk(url)
        with pytest.raises(openai.APIConnectionError):
            await client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
        await client.close()
        assert len(upstream.arrivals) == 3  # the SDK saw a failure it retries, twice
        async with httpx.AsyncClient() as plain:
            assert broken_counts((await plain.get(f"{url}/metrics")).text) == {"main": 3.0}


@pytest.mark.parametrize("fault", ["short-length", "bad-chunk"])
async def test_a_body_short_of_its_length_or_with_a_bad_chunk_ends_without_the_answer_end(fault: str) -> None:
    async with proxied(fault) as (_, url), httpx.AsyncClient(timeout=10) as client:
        received = bytearray()
        with pytest.raises(httpx.RemoteProtocolError):
            async with client.stream("POST", f"{url}/v1/chat/completions", json=chat()) as answer:
                assert answer.status_code == 200
                async for piece in answer.aiter_raw():
                    received += piece
        assert len(received) in ((5000,) if fault == "short-length" else (6,))
        assert broken_counts((await client.get(f"{url}/metrics")).text) == {"main": 1.0}


async def test_a_stream_that_breaks_off_still_ends_with_its_in_band_error_event() -> None:
    async with proxied("reset-mid") as (_, url), httpx.AsyncClient(timeout=10) as client:
        answer = await client.post(f"{url}/v1/chat/completions", json=chat(stream=True))
        assert answer.text.endswith("data: [DONE]\n\n") and "upstream_unavailable" in answer.text
        assert broken_counts((await client.get(f"{url}/metrics")).text) == {"main": 1.0}


# --- 11. answers no client should get are a 502 before anything starts ------------------------------


@pytest.mark.parametrize(
    ("fault", "says"), [("status-600", "outside 100-599"), ("switch", "switched protocols (101)")]
)
async def test_an_impossible_status_or_a_protocol_switch_is_a_502(fault: str, says: str) -> None:
    async with proxied(fault) as (_, url), httpx.AsyncClient(timeout=10) as client:
        answer = await client.post(f"{url}/v1/chat/completions", json=chat())
    assert (answer.status_code, answer.json()["error"]["code"]) == (502, "upstream_unavailable")
    assert says in answer.json()["error"]["message"]


# --- 6. error bodies are read under a cap ---------------------------------------------------------------


async def test_an_error_body_over_the_cap_is_a_502_naming_it() -> None:
    async with proxied("huge-error") as (_, url), httpx.AsyncClient(timeout=10) as client:
        answer = await client.post(f"{url}/v1/chat/completions", json=chat())
    assert answer.status_code == 502
    assert "answered 500 with a body over 1048576 bytes" in answer.json()["error"]["message"]


async def test_a_small_chunked_error_body_still_passes_through_verbatim() -> None:
    async with proxied("small-error") as (_, url), httpx.AsyncClient(timeout=10) as client:
        answer = await client.post(f"{url}/v1/chat/completions", json=chat())
    assert (answer.status_code, answer.content) == (500, b'{"error":{}}')


# --- issue 15, 5: retries that do not stack ----------------------------------------------------------------


def retrying_config(upstream: FaultUpstream, **options: Any) -> Config:
    return parse_config({"upstreams": {"main": {"base_url": upstream.base_url, **options}}}, env={})


async def test_a_429_reaches_an_sdk_client_after_at_most_one_plus_its_retries_upstream_calls() -> None:
    async with (
        HostileUpstream(default="rate-limited") as upstream,
        serving(retrying_config(upstream)) as url,  # retries: 2, status_retries: auto
    ):
        client = sdk(url, max_retries=2)
        with pytest.raises(openai.RateLimitError):
            await client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
        await client.close()
    assert len(upstream.arrivals) == 3  # 1 + the SDK's 2 retries; the proxy retried none


async def test_a_429_is_passed_back_at_once_with_its_retry_after_to_a_client_that_says_it_retries() -> None:
    async with (
        HostileUpstream(default="rate-limited") as upstream,
        serving(retrying_config(upstream)) as url,
        httpx.AsyncClient(timeout=10) as client,
    ):
        answer = await client.post(
            f"{url}/v1/chat/completions", json=chat(), headers={"x-stainless-retry-count": "0"}
        )
    assert (answer.status_code, answer.headers["retry-after"], answer.headers["retry-after-ms"]) == (
        429,
        "1",
        "10",
    )
    assert len(upstream.arrivals) == 1


@pytest.mark.parametrize(("setting", "calls"), [("auto", 3), ("proxy", 3), ("client", 1)])
async def test_status_retries_decides_who_retries_for_a_client_without_an_sdk(
    setting: str, calls: int
) -> None:
    async with HostileUpstream(default="rate-limited") as upstream:
        config = retrying_config(upstream, status_retries=setting)
        async with serving(config) as url, httpx.AsyncClient(timeout=10) as client:
            answer = await client.post(f"{url}/v1/chat/completions", json=chat())
    assert answer.status_code == 429
    assert len(upstream.arrivals) == calls


async def test_a_429_left_to_the_client_still_moves_to_the_fallback_upstream() -> None:
    async with HostileUpstream(default="rate-limited") as busy, HostileUpstream() as good:
        config = make_config(("busy", busy.base_url), ("good", good.base_url), fallbacks=("good",))
        async with serving(config) as url:
            client = sdk(url)
            answer = await client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
            await client.close()
    assert answer.choices[0].message.content == "done"
    assert (len(busy.arrivals), len(good.arrivals)) == (1, 1)


@pytest.mark.parametrize(
    ("headers", "calls"),
    [
        ({"originator": "codex_exec", "user-agent": "codex_exec/0.171.0 (Debian 12.0.0; x86_64)"}, 1),
        ({"originator": "codex_cli_rs"}, 1),
        ({"user-agent": "codex_cli_rs/0.171.0 (Mac OS 15.1; arm64) iTerm.app"}, 1),
        ({"user-agent": "claude-cli/2.1.3 (external, cli)"}, 1),
        ({"user-agent": "GeminiCLI-tui/0.61.0/gemini-3.1-pro-preview (linux; x64; terminal)"}, 1),
        ({"user-agent": "GeminiCLI/0.61.0/gemini-2.5-pro (darwin; arm64; terminal)"}, 1),
        ({"user-agent": "Anthropic/Python 0.75.0"}, 1),
        ({"user-agent": "OpenAI/JS 6.9.1"}, 1),
        ({"user-agent": "curl/8.5.0"}, 3),
        ({"user-agent": "my-agent/1.0", "originator": "someone_else"}, 3),
    ],
)
async def test_auto_leaves_a_429_to_every_client_that_retries_on_its_own(
    headers: dict[str, str], calls: int
) -> None:
    async with (
        HostileUpstream(default="rate-limited") as upstream,
        serving(retrying_config(upstream)) as url,
        httpx.AsyncClient(timeout=10) as client,
    ):
        answer = await client.post(f"{url}/v1/chat/completions", json=chat(), headers=headers)
    assert answer.status_code == 429
    assert len(upstream.arrivals) == calls
