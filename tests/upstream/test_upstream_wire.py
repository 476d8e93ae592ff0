"""What upstreams receive, byte for byte: the request head and body :meth:`Upstreams.open` writes.

Each case goes through a real loopback server that records the raw bytes of every request, so a
change in header order, casing, framing or encoding shows up here, not at a user's upstream.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from history_proxy.config.loading import parse_config
from history_proxy.config.models import UpstreamConfig
from history_proxy.errors import UpstreamUnavailableError
from history_proxy.upstream.client import Body, Upstreams
from history_proxy.upstream.headers import FORWARD_DROPPED, upstream_authorization, wire_request_headers
from tests.support.scripted_server import answering, ok, scripted
from tests.upstream_respx import PROXY_VARIABLES

pytestmark = pytest.mark.anyio

CLIENT_HEADERS = [
    ("host", "proxy.local:8080"),
    ("content-type", "application/json"),
    ("content-length", "17"),
    ("connection", "keep-alive, X-Dropped"),
    ("x-dropped", "named by connection"),
    ("keep-alive", "timeout=5"),
    ("te", "trailers"),
    ("proxy-authorization", "Basic c2VjcmV0"),
    ("accept-encoding", "gzip, br"),
    ("authorization", "Bearer sk-client"),
    ("X-Agent-Role", "worker"),
    ("x-tag", "one"),
    ("x-tag", "two"),
    ("x-latin", "caf\u00e9"),
    ("user-agent", "OpenAI/Python 1.0"),
]


async def sent(
    method: str,
    path: str,
    body: Body,
    *,
    query: str = "",
    headers: Sequence[tuple[str, str]] = CLIENT_HEADERS,
    key: str | None = "sk-upstream",
    proxy_keys: bool = False,
    identity: dict[str, str] | None = None,
    **options: Any,
) -> bytes:
    """The raw bytes the upstream received for one request through :meth:`Upstreams.open`."""
    async with scripted(answering(ok())) as server:
        upstream: dict[str, Any] = {"base_url": f"{server.url}/v1", "api_key": key, **options}
        raw: dict[str, Any] = {"upstreams": {"main": upstream}, "identity": identity or {}}
        if proxy_keys:
            raw["auth"] = {"keys": [{"key": "sk-proxy-0123456789abcdef", "tenant": "t"}]}
        upstreams = Upstreams(parse_config(raw, env={}))
        await upstreams.start()
        try:
            reply = await upstreams.open(
                method, path, query=query, headers=headers, names=["main"], body=body
            )
            assert await reply.read() == (b"" if method == "HEAD" else b'{"ok":true}')
        finally:
            await upstreams.stop()
        return server.requests[0].replace(server.url.removeprefix("http://").encode(), b"UPSTREAM")


async def test_a_post_carries_the_end_to_end_headers_then_the_upstream_key_and_its_length() -> None:
    assert await sent("POST", "/chat/completions", b'{"model":"m","x":1}', query="a=1&b=%20x") == (
        b"POST /v1/chat/completions?a=1&b=%20x HTTP/1.1\r\n"
        b"Host: UPSTREAM\r\n"
        b"content-type: application/json\r\n"
        b"x-tag: one\r\n"
        b"x-tag: two\r\n"
        b"x-latin: caf\xe9\r\n"
        b"user-agent: OpenAI/Python 1.0\r\n"
        b"authorization: Bearer sk-upstream\r\n"
        b"accept-encoding: identity\r\n"
        b"Content-Length: 19\r\n"
        b"\r\n"
        b'{"model":"m","x":1}'
    )


IDENTITY_HEADERS = [
    ("X-Agent-Role", "worker"),
    ("x-agent-name", "coder#1"),
    ("X-AGENT-PHASE", "plan"),
    ("x-team-role", "reviewer"),
    ("x-tag", "kept"),
]


async def test_identity_headers_stay_at_the_proxy() -> None:
    head = await sent("POST", "/chat/completions", b"{}", headers=IDENTITY_HEADERS)
    assert b"x-agent" not in head.lower()
    assert b"x-team-role: reviewer\r\nx-tag: kept\r\n" in head  # not an identity header here


async def test_configured_identity_header_names_stay_at_the_proxy() -> None:
    identity = {"role_header": "X-Team-Role"}
    head = await sent("POST", "/chat/completions", b"{}", headers=IDENTITY_HEADERS, identity=identity)
    assert b"x-team-role" not in head and b"x-agent-name" not in head and b"x-agent-phase" not in head
    assert b"\r\nx-agent-role: worker\r\nx-tag: kept\r\n" in head  # no longer an identity header


async def test_an_upstream_that_asks_for_the_identity_headers_gets_them() -> None:
    head = await sent("POST", "/chat/completions", b"{}", headers=IDENTITY_HEADERS, forward_identity=True)
    assert (
        b"x-agent-role: worker\r\nx-agent-name: coder#1\r\nx-agent-phase: plan\r\n"
        b"x-team-role: reviewer\r\nx-tag: kept\r\n"
    ) in head


async def test_without_an_upstream_key_the_client_authorization_is_forwarded() -> None:
    head = await sent("POST", "/chat/completions", b"{}", key=None)
    assert (
        b"authorization: Bearer sk-client\r\naccept-encoding: identity\r\nContent-Length: 2\r\n\r\n{}" in head
    )


async def test_a_client_authorization_holding_a_proxy_key_is_never_forwarded() -> None:
    head = await sent("POST", "/chat/completions", b"{}", key=None, proxy_keys=True)
    assert b"authorization" not in head.lower()


async def test_a_get_without_a_body_has_no_framing_headers() -> None:
    assert await sent("GET", "/models", None, headers=[("accept", "*/*")]) == (
        b"GET /v1/models HTTP/1.1\r\n"
        b"Host: UPSTREAM\r\n"
        b"accept: */*\r\n"
        b"authorization: Bearer sk-upstream\r\n"
        b"accept-encoding: identity\r\n"
        b"\r\n"
    )


async def test_an_empty_post_announces_a_zero_length_right_after_the_host() -> None:
    assert await sent("POST", "/files", b"", headers=[("x-a", "1")]) == (
        b"POST /v1/files HTTP/1.1\r\n"
        b"Host: UPSTREAM\r\n"
        b"Content-Length: 0\r\n"
        b"x-a: 1\r\n"
        b"authorization: Bearer sk-upstream\r\n"
        b"accept-encoding: identity\r\n"
        b"\r\n"
    )


async def test_a_body_built_per_upstream_is_sent_with_its_length() -> None:
    async def build(name: str) -> bytes:
        return f'{{"for":"{name}"}}'.encode()

    head = await sent("POST", "/chat/completions", build, headers=[("x-a", "1")])
    assert head.endswith(b'Content-Length: 14\r\n\r\n{"for":"main"}')


async def test_a_streamed_body_is_sent_chunked_after_the_headers() -> None:
    async def pieces() -> AsyncIterator[bytes]:
        for piece in (b'{"a":', b"", b"1}"):
            await asyncio.sleep(0)
            yield piece

    assert await sent("PUT", "/files/up", pieces(), headers=[("x-a", "1")]) == (
        b"PUT /v1/files/up HTTP/1.1\r\n"
        b"Host: UPSTREAM\r\n"
        b"x-a: 1\r\n"
        b"authorization: Bearer sk-upstream\r\n"
        b"accept-encoding: identity\r\n"
        b"Transfer-Encoding: chunked\r\n"
        b"\r\n"
        b'{"a":1}'  # the test server strips the chunk framing
    )


async def test_paths_and_queries_are_sent_percent_encoded() -> None:
    head = await sent("GET", "/files/a b/\u00e9", None, query="q=a b&r=\u00e9", headers=[])
    assert head.startswith(b"GET /v1/files/a%20b/%C3%A9?q=a%20b&r=%C3%A9 HTTP/1.1\r\nHost: UPSTREAM\r\n")


async def test_a_head_request_goes_out_with_the_same_headers_through_httpx_own_transport() -> None:
    head = await sent("HEAD", "/models", None, headers=[("x-a", "1")])
    assert head.startswith(b"HEAD /v1/models HTTP/1.1\r\nHost: UPSTREAM\r\n")
    assert b"x-a: 1\r\nauthorization: Bearer sk-upstream\r\naccept-encoding: identity\r\n" in head


async def test_an_http_proxy_named_in_the_environment_gets_the_request_in_absolute_form(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("NO_PROXY", "no_proxy", *PROXY_VARIABLES):
        monkeypatch.delenv(name, raising=False)
    async with scripted(answering(ok(b"via the proxy"))) as proxy_server:
        monkeypatch.setenv("HTTP_PROXY", proxy_server.url)
        config = parse_config({"upstreams": {"main": {"base_url": "http://upstream.invalid/v1"}}}, env={})
        upstreams = Upstreams(config)
        await upstreams.start()
        try:
            reply = await upstreams.open(
                "POST", "/x", query="", headers=[("x-a", "1")], names=["main"], body=b"{}"
            )
            assert (reply.status_code, await reply.read()) == (200, b"via the proxy")
        finally:
            await upstreams.stop()
    sent_head = proxy_server.requests[0]
    assert sent_head.startswith(b"POST http://upstream.invalid/v1/x HTTP/1.1\r\n")
    assert b"x-a: 1\r\naccept-encoding: identity\r\nContent-Length: 2\r\n" in sent_head


async def test_a_client_header_holding_a_line_break_is_a_502_and_nothing_is_sent() -> None:
    async with scripted(answering(ok())) as server:
        config = parse_config({"upstreams": {"main": {"base_url": f"{server.url}/v1"}}}, env={})
        upstreams = Upstreams(config)
        await upstreams.start()
        try:
            with pytest.raises(UpstreamUnavailableError):
                headers = [("x-note", "a\r\nx-injected: 1")]
                await upstreams.open("POST", "/x", query="", headers=headers, names=["main"], body=b"{}")
        finally:
            await upstreams.stop()
        assert server.requests == []


async def test_a_kept_connection_the_upstream_closed_meanwhile_is_replaced_once_without_an_error() -> None:
    async with scripted(answering(ok(), keep=False)) as server:
        config = parse_config({"upstreams": {"main": {"base_url": f"{server.url}/v1", "retries": 0}}}, env={})
        upstreams = Upstreams(config)
        await upstreams.start()
        try:
            for _ in range(3):
                reply = await upstreams.open("POST", "/x", query="", headers=[], names=["main"], body=b"{}")
                assert (reply.status_code, reply.attempts, await reply.read()) == (200, 1, b'{"ok":true}')
                await asyncio.sleep(0.05)  # the server has closed the kept connection without saying so
        finally:
            await upstreams.stop()
        assert (server.connections, len(server.requests)) == (3, 3)


async def test_answer_headers_keep_every_byte_and_their_repeats() -> None:
    answer = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\ncontent-type: charset=utf-8\r\n"
        b"X-Name: caf\xc3\xa9\r\nConnection: x-hop\r\nx-hop: 1\r\ncontent-length: 2\r\n\r\n{}"
    )
    async with scripted(answering(answer)) as server:
        config = parse_config({"upstreams": {"main": {"base_url": f"{server.url}/v1"}}}, env={})
        upstreams = Upstreams(config)
        await upstreams.start()
        try:
            reply = await upstreams.open("GET", "/x", query="", headers=[], names=["main"], body=None)
            assert (reply.is_whole_json, reply.is_sse) == (True, False)
            assert reply.headers == [
                ("content-type", "application/json"),
                ("content-type", "charset=utf-8"),
                ("x-name", "caf\xc3\xa9"),  # latin-1 text of the bytes: sent back as they came
            ]
            assert await reply.read() == b"{}"
        finally:
            await upstreams.stop()


NAMES = st.sampled_from(
    [
        "Connection",
        "connection",
        "keep-alive",
        "x-a",
        "X-B",
        "authorization",
        "Authorization",
        "proxy-x",
        "te",
        "host",
        "content-length",
        "accept-encoding",
        "transfer-encoding",
        "upgrade",
        "x-tag",
    ]
)
VALUES = st.text(st.characters(min_codepoint=32, max_codepoint=255), max_size=12) | st.sampled_from(
    ["x-a, X-B", " x-tag ,keep-alive", "Authorization", "close"]
)


@given(
    headers=st.lists(st.tuples(NAMES, VALUES), max_size=10),
    key=st.sampled_from([None, "sk-upstream", "sk-\u20ac"]),
    proxy_key=st.booleans(),
)
def test_upstreams_get_the_end_to_end_headers_in_order_then_the_right_authorization(
    headers: list[tuple[str, str]], key: str | None, proxy_key: bool
) -> None:
    upstream = UpstreamConfig.model_validate({"base_url": "http://upstream.test/v1", "api_key": key})
    sent = wire_request_headers(headers, upstream_authorization(upstream), client_auth_is_proxy_key=proxy_key)
    named = {t.strip().lower() for n, v in headers if n.lower() == "connection" for t in v.split(",")}
    end_to_end = [
        (name.lower().encode("latin-1"), value.encode("latin-1"))
        for name, value in headers
        if name.lower() not in FORWARD_DROPPED | named and not name.lower().startswith("proxy-")
    ]
    client_auth = [
        (b"authorization", v.encode("latin-1")) for n, v in headers if n.lower() == "authorization"
    ]
    if key is not None:
        authorization = [(b"authorization", f"Bearer {key}".encode("latin-1", "replace"))]
    else:
        authorization = [] if proxy_key or "authorization" in named else client_auth  # hop-by-hop if named
    assert sent == [*end_to_end, *authorization, (b"accept-encoding", b"identity")]
