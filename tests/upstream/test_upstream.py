"""Forwarding to upstreams: header hygiene, retries, fallbacks, error mapping and streamed answers."""

from __future__ import annotations

import gzip
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import respx

from history_proxy.config.loading import parse_config
from history_proxy.config.models import Config, UpstreamConfig
from history_proxy.errors import UpstreamTimeoutError, UpstreamUnavailableError
from history_proxy.mock.server import MockUpstreamServer
from history_proxy.surfaces.table import BY_NAME
from history_proxy.upstream.client import Upstreams, retry_after_s
from history_proxy.upstream.headers import response_headers, upstream_authorization, wire_request_headers

pytestmark = pytest.mark.anyio

MAIN = "https://upstream.test/v1"
BACKUP = "https://backup.test/v1"
UPSTREAM_KEY = "sk-upstream-key-0123456789"
COMPLETION = {
    "id": "c1",
    "object": "chat.completion",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
}


def make_config(retries: int = 0, **main: Any) -> Config:
    return parse_config(
        {
            "upstreams": {
                "main": {"base_url": MAIN, "retries": retries, **main},
                "backup": {"base_url": BACKUP, "retries": 0},
            },
            "limits": {"connect_timeout_s": 0.5, "read_timeout_s": 0.5},
        },
        env={},
    )


@asynccontextmanager
async def opened(config: Config) -> AsyncIterator[Upstreams]:
    upstreams = Upstreams(config, backoff_s=0.001, mock=MockUpstreamServer)
    await upstreams.start()
    try:
        yield upstreams
    finally:
        await upstreams.stop()


async def post(upstreams: Upstreams, names: list[str] | None = None, body: Any = b"{}") -> Any:
    return await upstreams.open(
        "POST",
        "/chat/completions",
        query="",
        headers=[("content-type", "application/json")],
        names=names or ["main"],
        body=body,
    )


class BreaksAfter(httpx.AsyncByteStream):
    """A response body that sends its chunks, then the connection resets."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk
        raise httpx.ReadError("connection reset by peer")


# --- headers --------------------------------------------------------------------------------


async def test_the_upstream_gets_no_http_library_headers_the_caller_did_not_send(
    mocked: respx.MockRouter,
) -> None:
    route = mocked.post(f"{MAIN}/chat/completions").mock(return_value=httpx.Response(200, json=COMPLETION))
    async with opened(make_config()) as upstreams:
        await (await post(upstreams)).read()
    sent = route.calls[0].request.headers
    assert "user-agent" not in sent  # no "python-httpx/..." in the upstream's logs for our callers
    assert (sent["content-type"], sent["accept-encoding"]) == ("application/json", "identity")


def request_headers(
    client_headers: list[tuple[str, str]], upstream: UpstreamConfig, *, client_auth_is_proxy_key: bool
) -> list[tuple[str, str]]:
    """What goes upstream for these client headers, as text."""
    sent = wire_request_headers(
        client_headers, upstream_authorization(upstream), client_auth_is_proxy_key=client_auth_is_proxy_key
    )
    return [(name.decode("latin-1"), value.decode("latin-1")) for name, value in sent]


def test_hop_by_hop_host_and_length_headers_are_not_forwarded() -> None:
    upstream = make_config().upstreams["main"]
    sent = request_headers(
        [
            ("host", "proxy.local"),
            ("connection", "keep-alive, x-per-hop"),
            ("x-per-hop", "1"),
            ("keep-alive", "timeout=5"),
            ("te", "trailers"),
            ("trailer", "x-checksum"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "h2c"),
            ("proxy-authorization", "Basic abc"),
            ("content-length", "12"),
            ("accept-encoding", "gzip, br"),
            ("content-type", "application/json"),
            ("x-agent-role", "worker"),
        ],
        upstream,
        client_auth_is_proxy_key=False,
    )
    assert sent == [
        ("content-type", "application/json"),
        ("x-agent-role", "worker"),
        ("accept-encoding", "identity"),
    ]


def test_upstream_key_replaces_the_clients_authorization() -> None:
    upstream = make_config(api_key=UPSTREAM_KEY).upstreams["main"]
    sent = dict(
        request_headers([("authorization", "Bearer client")], upstream, client_auth_is_proxy_key=False)
    )
    assert sent["authorization"] == f"Bearer {UPSTREAM_KEY}"


def test_clients_authorization_passes_when_the_upstream_has_no_key_and_the_proxy_is_open() -> None:
    upstream = make_config().upstreams["main"]
    sent = dict(
        request_headers([("authorization", "Bearer client")], upstream, client_auth_is_proxy_key=False)
    )
    assert sent["authorization"] == "Bearer client"


def test_a_proxy_key_is_never_forwarded() -> None:
    upstream = make_config().upstreams["main"]
    sent = dict(
        request_headers([("authorization", "Bearer proxy-key")], upstream, client_auth_is_proxy_key=True)
    )
    assert "authorization" not in sent


def test_answer_headers_keep_end_to_end_ones_and_drop_hop_by_hop_and_length() -> None:
    kept = response_headers(
        [
            ("content-type", "text/event-stream"),
            ("content-length", "99"),
            ("content-encoding", "gzip"),
            ("transfer-encoding", "chunked"),
            ("connection", "keep-alive"),
            ("date", "Mon, 01 Jan 2024 00:00:00 GMT"),
            ("set-cookie", "a=1"),
            ("set-cookie", "b=2"),
            ("openai-processing-ms", "12"),
        ]
    )
    assert kept == [
        ("content-type", "text/event-stream"),
        ("content-encoding", "gzip"),
        ("set-cookie", "a=1"),
        ("set-cookie", "b=2"),
        ("openai-processing-ms", "12"),
    ]


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "2"}, 2.0),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after": "Mon, 01 Jan 2001 00:00:00 GMT"}, 0.0),
        ({"retry-after": "soon"}, None),
        ({}, None),
    ],
)
def test_retry_after_reads_seconds_milliseconds_and_dates(
    headers: dict[str, str], expected: float | None
) -> None:
    assert retry_after_s(httpx.Headers(headers)) == expected


# --- retries and fallbacks -------------------------------------------------------------------


async def test_a_503_is_retried_and_the_next_answer_returned(mocked: respx.MockRouter) -> None:
    route = mocked.post(f"{MAIN}/chat/completions").mock(
        side_effect=[httpx.Response(503), httpx.Response(200, json=COMPLETION)]
    )
    async with opened(make_config(retries=1)) as upstreams:
        reply = await post(upstreams)
        assert (reply.status_code, reply.attempts, route.call_count) == (200, 2, 2)
        assert json.loads(await reply.read()) == COMPLETION


async def test_the_last_retryable_answer_passes_through_when_retries_are_exhausted(
    mocked: respx.MockRouter,
) -> None:
    route = mocked.post(f"{MAIN}/chat/completions").mock(
        return_value=httpx.Response(502, text="bad gateway upstream")
    )
    async with opened(make_config(retries=2)) as upstreams:
        reply = await post(upstreams)
        assert (reply.status_code, route.call_count) == (502, 3)
        assert await reply.read() == b"bad gateway upstream"


async def test_a_429_asking_to_wait_longer_than_the_cap_is_passed_through_at_once(
    mocked: respx.MockRouter,
) -> None:
    route = mocked.post(f"{MAIN}/chat/completions").mock(
        return_value=httpx.Response(
            429, headers={"retry-after": "3600"}, json={"error": {"message": "slow down"}}
        )
    )
    async with opened(make_config(retries=2)) as upstreams:
        reply = await post(upstreams)
        assert (reply.status_code, route.call_count) == (429, 1)
        await reply.aclose()


async def test_connect_errors_are_retried_then_answered_502(mocked: respx.MockRouter) -> None:
    route = mocked.post(f"{MAIN}/chat/completions").mock(side_effect=httpx.ConnectError("refused"))
    async with opened(make_config(retries=2)) as upstreams:
        with pytest.raises(UpstreamUnavailableError, match="'main' is unreachable"):
            await post(upstreams)
    assert route.call_count == 3


async def test_a_connect_timeout_is_answered_504(mocked: respx.MockRouter) -> None:
    mocked.post(f"{MAIN}/chat/completions").mock(side_effect=httpx.ConnectTimeout("slow"))
    async with opened(make_config()) as upstreams:
        with pytest.raises(UpstreamTimeoutError, match="timed out"):
            await post(upstreams)


async def test_a_read_timeout_is_not_retried_since_the_upstream_may_be_working_on_it(
    mocked: respx.MockRouter,
) -> None:
    route = mocked.post(f"{MAIN}/chat/completions").mock(side_effect=httpx.ReadTimeout("slow"))
    async with opened(make_config(retries=2)) as upstreams:
        with pytest.raises(UpstreamTimeoutError):
            await post(upstreams)
    assert route.call_count == 1


async def test_a_reset_before_the_headers_is_answered_502_without_retry(mocked: respx.MockRouter) -> None:
    route = mocked.post(f"{MAIN}/chat/completions").mock(side_effect=httpx.RemoteProtocolError("reset"))
    async with opened(make_config(retries=2)) as upstreams:
        with pytest.raises(UpstreamUnavailableError):
            await post(upstreams)
    assert route.call_count == 1


async def test_the_fallback_answers_when_the_primary_is_unreachable_with_a_body_built_for_it(
    mocked: respx.MockRouter,
) -> None:
    mocked.post(f"{MAIN}/chat/completions").mock(side_effect=httpx.ConnectError("refused"))
    backup = mocked.post(f"{BACKUP}/chat/completions").mock(return_value=httpx.Response(200, json=COMPLETION))
    built_for: list[str] = []

    async def body_for(name: str) -> bytes:
        built_for.append(name)
        return json.dumps({"for": name}).encode()

    async with opened(make_config(retries=1)) as upstreams:
        reply = await post(upstreams, ["main", "backup"], body_for)
        await reply.aclose()
    assert reply.upstream == "backup"
    assert built_for == ["main", "backup"]
    assert json.loads(backup.calls.last.request.content) == {"for": "backup"}


async def test_a_streamed_request_body_is_sent_once_and_never_retried(mocked: respx.MockRouter) -> None:
    route = mocked.post(f"{MAIN}/chat/completions").mock(return_value=httpx.Response(503))

    async def upload() -> AsyncIterator[bytes]:
        yield b"part-1"
        yield b"part-2"

    async with opened(make_config(retries=2)) as upstreams:
        reply = await post(upstreams, ["main", "backup"], upload())
        await reply.aclose()
    assert (reply.status_code, route.call_count) == (503, 1)
    assert route.calls.last.request.content == b"part-1part-2"


# --- answers ---------------------------------------------------------------------------------


async def test_an_sse_answer_that_breaks_mid_stream_ends_with_an_error_event_and_done(
    mocked: respx.MockRouter,
) -> None:
    first = b'data: {"choices":[{"delta":{"content":"Hel"}}]}\n\n'
    mocked.post(f"{MAIN}/chat/completions").mock(
        return_value=httpx.Response(
            200, headers={"content-type": "text/event-stream"}, stream=BreaksAfter(first)
        )
    )
    async with opened(make_config()) as upstreams:
        reply = await post(upstreams)
        received = b"".join([chunk async for chunk in reply.stream()])
    assert received.startswith(first)
    events = [e for e in received.decode().split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    error = json.loads(events[-2].removeprefix("data: "))["error"]
    assert error["code"] == "upstream_unavailable" and "mid-stream" in error["message"]
    assert reply.broken


@pytest.mark.parametrize(
    ("surface", "first"),
    [
        ("responses", b'event: response.created\ndata: {"type":"response.created"}\n\n'),
        ("messages", b'event: message_start\ndata: {"type":"message_start"}\n\n'),
    ],
)
async def test_a_surface_stream_that_breaks_ends_with_that_apis_own_error_event(
    mocked: respx.MockRouter, surface: str, first: bytes
) -> None:
    mocked.post(f"{MAIN}/chat/completions").mock(
        return_value=httpx.Response(
            200, headers={"content-type": "text/event-stream"}, stream=BreaksAfter(first)
        )
    )
    async with opened(make_config()) as upstreams:
        reply = await post(upstreams)
        reply.stream_error = BY_NAME[surface].stream_error
        received = b"".join([chunk async for chunk in reply.stream()])
    last = received.removeprefix(first).decode()
    assert last.startswith("event: error\ndata: ") and last.endswith("\n\n") and "[DONE]" not in last
    event = json.loads(last.removeprefix("event: error\ndata: "))
    assert event["type"] == "error"
    if surface == "responses":
        assert event["code"] == "upstream_unavailable" and "mid-stream" in event["message"]
    else:
        assert event["error"]["type"] == "api_error" and "mid-stream" in event["error"]["message"]


async def test_a_plain_answer_that_breaks_mid_stream_just_ends(mocked: respx.MockRouter) -> None:
    mocked.post(f"{MAIN}/chat/completions").mock(
        return_value=httpx.Response(
            200, headers={"content-type": "application/json"}, stream=BreaksAfter(b'{"id":')
        )
    )
    async with opened(make_config()) as upstreams:
        reply = await post(upstreams)
        assert b"".join([chunk async for chunk in reply.stream()]) == b'{"id":'


async def test_an_error_answer_is_read_as_raw_bytes_with_its_encoding_header(
    mocked: respx.MockRouter,
) -> None:
    compressed = gzip.compress(b'{"error":{"message":"boom"}}')
    mocked.post(f"{MAIN}/chat/completions").mock(
        return_value=httpx.Response(500, headers={"content-encoding": "gzip"}, content=compressed)
    )
    async with opened(make_config()) as upstreams:
        reply = await post(upstreams)
        assert await reply.read() == compressed
        assert ("content-encoding", "gzip") in reply.headers


async def test_mock_upstreams_are_served_by_the_built_in_mock_in_this_process() -> None:
    config = parse_config({"upstreams": {"mock": {"base_url": "mock://"}}}, env={})
    async with opened(config) as upstreams:
        body = json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}).encode()
        reply = await post(upstreams, ["mock"], body)
        answer = json.loads(await reply.read())
    assert reply.status_code == 200
    assert answer["object"] == "chat.completion"


# --- summaries -------------------------------------------------------------------------------


async def test_summaries_are_written_by_the_upstream_with_its_key_and_without_annotations(
    mocked: respx.MockRouter,
) -> None:
    route = mocked.post(f"{MAIN}/chat/completions").mock(
        return_value=httpx.Response(
            200, json={"choices": [{"message": {"content": " The user asked for X. "}}]}
        )
    )
    async with opened(make_config(api_key=UPSTREAM_KEY)) as upstreams:
        summary = await upstreams.summarize(
            [{"role": "user", "content": "do X", "message_type": "task"}],
            model="gpt-4o",
            upstream="main",
            prompt="Summarize.",
            timeout_s=1,
        )
    assert summary == "The user asked for X."
    sent = route.calls.last.request
    assert sent.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert json.loads(sent.content)["messages"] == [
        {"role": "user", "content": "do X"},
        {"role": "user", "content": "Summarize."},
    ]


async def test_a_failed_summary_call_raises_so_the_filter_can_fall_back(mocked: respx.MockRouter) -> None:
    mocked.post(f"{MAIN}/chat/completions").mock(return_value=httpx.Response(500))
    async with opened(make_config()) as upstreams:
        with pytest.raises(UpstreamUnavailableError, match="answered 500"):
            await upstreams.summarize([], model="gpt-4o", upstream="main", prompt="Summarize.", timeout_s=1)


async def test_an_upstreams_set_cookie_never_rides_along_on_later_requests(mocked: respx.MockRouter) -> None:
    """The pooled client is shared by every caller and tenant: it must keep no cookie jar."""
    route = mocked.post(f"{MAIN}/chat/completions").mock(
        side_effect=[
            httpx.Response(200, json=COMPLETION, headers={"set-cookie": "session=tenant-a-secret; Path=/"})
        ]
        + [httpx.Response(200, json=COMPLETION) for _ in range(3)]
    )
    async with opened(make_config()) as upstreams:
        for _ in range(4):
            reply = await post(upstreams)
            await reply.read()
    sent_cookies = [call.request.headers.get("cookie") for call in route.calls]
    assert len(sent_cookies) == 4
    assert sent_cookies == [None] * len(sent_cookies)
