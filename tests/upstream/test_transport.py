"""The lean upstream transport against scripted raw HTTP servers on loopback.

Each server answers every request with bytes the test chose, and counts the connections it saw, so
keep-alive reuse, framing (length, chunked, until close), interim answers and every failure of the
module docstring's table are checked on real sockets.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from history_proxy.upstream.pools import ClientPool
from history_proxy.upstream.transport import LeanTransport, Timeouts
from tests.support.scripted_server import LOOPBACK, ScriptedServer, answering, client, ok, scripted
from tests.upstream_respx import PROXY_VARIABLES

pytestmark = pytest.mark.anyio


async def test_connections_are_kept_alive_and_reused_for_the_next_request() -> None:
    async with scripted(answering(ok())) as server, client() as (http, transport):
        for _ in range(5):
            answer = await http.post(f"{server.url}/v1/chat/completions", content=b"{}")
            assert (answer.status_code, answer.json()) == (200, {"ok": True})
        assert server.connections == 1
        assert transport.idle_connections == 1


async def test_the_request_goes_out_with_its_path_query_headers_and_body() -> None:
    async with scripted(answering(ok())) as server, client() as (http, _):
        await http.post(f"{server.url}/v1/x?a=1", content=b'{"m":1}', headers={"x-agent-role": "worker"})
    sent = server.requests[0]
    assert sent.startswith(b"POST /v1/x?a=1 HTTP/1.1\r\n")
    assert b"\r\nx-agent-role: worker\r\n" in sent
    assert sent.endswith(b'\r\n\r\n{"m":1}')


async def test_a_streamed_request_body_is_sent_chunked() -> None:
    async def pieces() -> AsyncIterator[bytes]:
        for piece in (b"part one,", b"", b" part two"):
            yield piece

    async with scripted(answering(ok())) as server, client() as (http, _):
        answer = await http.post(f"{server.url}/v1/files", content=pieces())
    assert answer.status_code == 200
    assert server.requests[0].endswith(b"\r\n\r\npart one, part two")


async def test_chunked_answers_arrive_piece_by_piece_without_framing() -> None:
    stream = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    stream += (
        b"".join(b"%x\r\n%b\r\n" % (len(e), e) for e in (b"data: 1\n\n", b"data: [DONE]\n\n")) + b"0\r\n\r\n"
    )
    async with scripted(answering(stream)) as server, client() as (http, transport):
        async with http.stream("POST", f"{server.url}/v1/chat/completions", content=b"{}") as answer:
            assert b"".join([piece async for piece in answer.aiter_raw()]) == b"data: 1\n\ndata: [DONE]\n\n"
        assert transport.idle_connections == 1


async def test_an_answer_without_length_ends_when_the_upstream_closes() -> None:
    until_close = answering(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nuntil the end", keep=False)
    async with scripted(until_close) as server, client() as (http, transport):
        answer = await http.get(f"{server.url}/v1/models")
        assert answer.content == b"until the end"
        assert transport.idle_connections == 0


async def test_an_interim_100_continue_is_skipped() -> None:
    async with (
        scripted(answering(b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"final"))) as server,
        client() as (http, _),
    ):
        answer = await http.post(f"{server.url}/v1/x", content=b"{}")
    assert (answer.status_code, answer.content) == (200, b"final")


async def test_connection_close_from_the_upstream_is_honoured() -> None:
    async with (
        scripted(answering(ok(extra=b"connection: close\r\n"), keep=False)) as server,
        client() as (http, transport),
    ):
        for _ in range(2):
            assert (await http.get(f"{server.url}/v1/models")).status_code == 200
        assert (server.connections, transport.idle_connections) == (2, 0)


async def test_a_kept_connection_the_upstream_closed_meanwhile_is_replaced_without_an_error() -> None:
    async with scripted(answering(ok(), keep=False)) as server, client() as (http, _):
        # the server closes after each answer without saying so: the next request finds it closed
        for _ in range(3):
            assert (await http.post(f"{server.url}/v1/x", content=b"{}")).status_code == 200
            await asyncio.sleep(0.05)
        assert server.connections == 3


async def test_refused_is_a_connect_error() -> None:
    async with scripted(answering(ok())) as server:
        url = server.url
    async with client() as (http, _):
        with pytest.raises(httpx.ConnectError):
            await http.get(f"{url}/v1/models")


async def test_no_answer_within_the_read_timeout_is_a_read_timeout() -> None:
    async def silent(head: bytes, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(5)
        return False

    async with scripted(silent) as server, client(timeout=0.2) as (http, transport):
        with pytest.raises(httpx.ReadTimeout):
            await http.get(f"{server.url}/v1/models")
        assert transport.idle_connections == 0


async def test_a_pause_mid_body_longer_than_the_read_timeout_is_a_read_timeout() -> None:
    async def stalls(head: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nfive.")
        await writer.drain()
        await asyncio.sleep(5)
        return False

    async with (
        scripted(stalls) as server,
        client(timeout=0.2) as (http, _),
        http.stream("GET", f"{server.url}/v1/models") as answer,
    ):
        with pytest.raises(httpx.ReadTimeout):
            await answer.aread()


async def test_a_body_cut_short_is_a_protocol_error_after_the_bytes_that_came() -> None:
    cut_short = answering(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial", keep=False)
    async with (
        scripted(cut_short) as server,
        client() as (http, _),
        http.stream("GET", f"{server.url}/v1/models") as answer,
    ):
        received = []
        with pytest.raises(httpx.RemoteProtocolError):
            async for piece in answer.aiter_raw():
                received.append(piece)
    assert b"".join(received) == b"partial"


async def test_a_malformed_answer_is_a_protocol_error() -> None:
    async with scripted(answering(b"NOT HTTP AT ALL\r\n\r\n", keep=False)) as server, client() as (http, _):
        with pytest.raises(httpx.RemoteProtocolError):
            await http.get(f"{server.url}/v1/models")


async def test_a_header_with_a_line_break_is_refused_before_anything_is_sent() -> None:
    async with scripted(answering(ok())) as server, client() as (http, _):
        with pytest.raises(httpx.LocalProtocolError):
            await http.get(f"{server.url}/v1/models", headers={"x-note": "a\r\nx-injected: 1"})
        assert server.requests == []


async def test_idle_connections_past_their_keep_alive_are_swept() -> None:
    async with scripted(answering(ok())) as server, client(keepalive_s=0.1) as (http, transport):
        await http.get(f"{server.url}/v1/models")
        assert (transport.idle_connections, transport.sweep()) == (1, 0)
        await asyncio.sleep(0.15)
        assert (transport.sweep(), transport.idle_connections) == (1, 0)


async def test_a_large_answer_read_slowly_is_held_back_not_buffered_whole() -> None:
    size = 8 * 1024 * 1024
    async with scripted(answering(ok(b"x" * size))) as server, client() as (http, transport):
        async with http.stream("GET", f"{server.url}/v1/files/big") as answer:
            pieces = answer.aiter_raw()
            first = await pieces.__anext__()
            await asyncio.sleep(0.2)  # the upstream could send all 8 MB meanwhile
            connection = next(iter(transport._busy))
            assert connection.reading_paused
            assert connection.buffered < 2 * 1024 * 1024
            rest = b"".join([piece async for piece in pieces])
        assert len(first) + len(rest) == size


async def test_head_requests_go_through_httpx_own_transport() -> None:
    async with (
        scripted(answering(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n")) as server,
        client() as (http, transport),
    ):
        answer = await http.head(f"{server.url}/v1/models")
        assert (answer.status_code, answer.headers["content-length"], answer.content) == (200, "5", b"")
        assert transport.idle_connections == 0  # the lean pool never saw it


async def test_https_upstreams_are_reached_over_tls_and_their_certificate_is_checked(
    certificate: tuple[Path, Path],
) -> None:
    cert, key = certificate
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)
    server = ScriptedServer(answering(ok(b"secret")))
    server.server = await asyncio.start_server(server.handle, LOOPBACK, 0, ssl=server_tls)
    port = server.server.sockets[0].getsockname()[1]
    try:
        trusting = LeanTransport(
            ssl.create_default_context(cafile=str(cert)), keepalive_s=30, fallback=httpx.AsyncHTTPTransport()
        )
        async with httpx.AsyncClient(transport=trusting) as http:
            for _ in range(2):
                assert (await http.get(f"https://localhost:{port}/v1/models")).content == b"secret"
        assert server.connections == 1
        async with client() as (untrusting, _):  # the system's CAs do not know this certificate
            with pytest.raises(httpx.ConnectError):
                await untrusting.get(f"https://localhost:{port}/v1/models")
    finally:
        server.server.close()


async def test_an_http_proxy_named_in_the_environment_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    async with scripted(answering(ok(b"via the proxy"))) as proxy_server:
        for name in ("NO_PROXY", "no_proxy", *PROXY_VARIABLES):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTP_PROXY", proxy_server.url)
        pool = ClientPool()
        pool.open(Timeouts(5, 5, 5))
        try:
            answer = await pool.send(httpx.Request("GET", "http://upstream.invalid/v1/models"))
            assert await answer.aread() == b"via the proxy"
            await answer.aclose()
        finally:
            await pool.close()
    assert proxy_server.requests[0].startswith(b"GET http://upstream.invalid/v1/models HTTP/1.1\r\n")


async def test_without_a_proxy_in_the_environment_requests_go_straight_to_the_upstream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    async with scripted(answering(ok(b"direct"))) as server:
        pool = ClientPool()
        pool.open(Timeouts(5, 5, 5))
        try:
            answer = await pool.send(httpx.Request("GET", f"{server.url}/v1/models"))
            assert await answer.aread() == b"direct"
            await answer.aclose()
        finally:
            await pool.close()
    assert server.requests[0].startswith(b"GET /v1/models HTTP/1.1\r\n")
