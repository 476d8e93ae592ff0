"""The lean transport against an upstream that misbehaves on purpose: oversized heads, odd framing,
statuses no client should relay, bytes out of turn, and connections that close after reading a request.

Every refusal is an ``httpx.RemoteProtocolError`` (a 502 to the proxy's client, before its answer
starts); nothing is ever sent twice.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from pathlib import Path

import httpx
import pytest

from history_proxy.config.loading import parse_config
from history_proxy.errors import ProxyError
from history_proxy.upstream.client import Upstreams
from history_proxy.upstream.connection import HEAD_LIMIT, HEADER_COUNT_LIMIT, Connection
from history_proxy.upstream.transport import LeanTransport
from tests.support.scripted_server import ScriptedServer, answering, certificate, client, ok, scripted

pytestmark = pytest.mark.anyio

__all__ = ["certificate"]  # a fixture, used below by name


async def refusal(answer: bytes) -> str:
    """The RemoteProtocolError's message for an upstream that answers ``answer`` to a request."""
    async with scripted(answering(answer, keep=False)) as server, client() as (http, transport):
        with pytest.raises(httpx.RemoteProtocolError) as caught:
            await http.post(f"{server.url}/v1/chat/completions", content=b"{}")
        assert transport.idle_connections == 0
    return str(caught.value)


# --- 3. a request is never sent twice ------------------------------------------------------------


async def test_a_request_the_upstream_read_and_held_is_not_sent_again_when_it_closes() -> None:
    """The red team's case: a reused connection, the request read, held, then the connection closed."""
    seen = 0

    async def holds_the_second(head: bytes, writer: asyncio.StreamWriter) -> bool:
        nonlocal seen
        seen += 1
        if seen == 1:
            writer.write(ok())
            await writer.drain()
            return True
        await asyncio.sleep(0.3)  # it has the request, works on it, then hangs up
        return False

    async with scripted(holds_the_second) as server, client() as (http, _):
        assert (await http.post(f"{server.url}/v1/chat/completions", content=b"{}")).status_code == 200
        with pytest.raises(httpx.RemoteProtocolError):
            await http.post(f"{server.url}/v1/chat/completions", content=b'{"costly":true}')
        await asyncio.sleep(0.1)
    assert len(server.requests) == 2
    assert server.connections == 1


async def test_a_connection_closed_while_idle_is_replaced_before_anything_is_written() -> None:
    async with scripted(answering(ok(), keep=False)) as server, client() as (http, transport):
        assert (await http.post(f"{server.url}/v1/x", content=b"{}")).status_code == 200
        connection = transport._idle[next(iter(transport._idle))][0]
        assert connection.transport is not None
        connection.transport.pause_reading()  # the close is in the socket, not yet seen by the loop
        await asyncio.sleep(0.1)
        assert not connection.closed
        assert (await http.post(f"{server.url}/v1/x", content=b"{}")).status_code == 200
    assert (server.connections, len(server.requests)) == (2, 2)


# --- 9. an upstream talking out of turn ------------------------------------------------------------


UNSOLICITED = b"HTTP/1.1 200 OK\r\ncontent-length: 50\r\n\r\nnobody asked"


async def test_a_pooled_connection_that_receives_bytes_while_idle_is_discarded() -> None:
    async def then_talks_out_of_turn(head: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(ok())
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(UNSOLICITED)  # a partial answer to no request
        await writer.drain()
        return True

    async with scripted(then_talks_out_of_turn) as server, client() as (http, transport):
        assert (await http.post(f"{server.url}/v1/x", content=b"{}")).status_code == 200
        await asyncio.sleep(0.2)
        assert transport.sweep() == 1  # already closed: only the sweep still counts it
        answer = await http.post(f"{server.url}/v1/x", content=b"{}")
        assert (answer.status_code, answer.json()) == (200, {"ok": True})
    assert server.connections == 2


async def test_bytes_right_behind_an_answer_are_not_taken_for_the_next_one() -> None:
    async with scripted(answering(ok() + UNSOLICITED)) as server, client() as (http, transport):
        for _ in range(2):
            answer = await http.post(f"{server.url}/v1/x", content=b"{}")
            assert (answer.status_code, answer.json()) == (200, {"ok": True})
            assert "nobody" not in answer.headers
        assert transport.idle_connections == 0
    assert server.connections == 2


async def test_bytes_waiting_unread_in_an_idle_socket_are_noticed_before_reuse() -> None:
    async def then_talks_out_of_turn(head: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(ok())
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(UNSOLICITED)
        await writer.drain()
        return True

    async with scripted(then_talks_out_of_turn) as server, client() as (http, transport):
        assert (await http.post(f"{server.url}/v1/x", content=b"{}")).status_code == 200
        idle = transport._idle[next(iter(transport._idle))][0]
        assert idle.transport is not None
        idle.transport.pause_reading()  # the bytes stay in the socket
        await asyncio.sleep(0.2)
        assert (await http.post(f"{server.url}/v1/x", content=b"{}")).json() == {"ok": True}
    assert server.connections == 2


# --- 5. heads are bounded ------------------------------------------------------------------------------


async def test_an_answer_head_over_the_limit_is_refused() -> None:
    big = b"HTTP/1.1 200 OK\r\nx-big: " + b"a" * (HEAD_LIMIT + 10) + b"\r\ncontent-length: 2\r\n\r\n{}"
    assert f"exceeds {HEAD_LIMIT} bytes" in await refusal(big)


async def test_an_endless_header_is_refused_without_reading_it_all() -> None:
    async def endless(head: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nx-endless: ")
        for _ in range(2000):  # 128 MB if nobody stopped it
            writer.write(b"a" * 65536)
            await writer.drain()
        return False

    async with scripted(endless) as server, client() as (http, _):
        with pytest.raises(httpx.RemoteProtocolError, match="answer head exceeds"):
            await http.post(f"{server.url}/v1/x", content=b"{}")


async def test_an_answer_with_too_many_headers_is_refused() -> None:
    many = b"".join(b"x-h%d: v\r\n" % i for i in range(HEADER_COUNT_LIMIT + 1))
    answer = b"HTTP/1.1 200 OK\r\n" + many + b"content-length: 2\r\n\r\n{}"
    assert f"more than {HEADER_COUNT_LIMIT} headers" in await refusal(answer)


async def test_interim_answers_count_towards_the_head_limit() -> None:
    early = b"HTTP/1.1 103 Early Hints\r\nlink: " + b"a" * 4000 + b"\r\n\r\n"
    assert "answer head exceeds" in await refusal(early * 20 + ok())


async def test_a_head_just_under_the_limit_passes() -> None:
    headers = b"x-big: " + b"a" * (HEAD_LIMIT // 2) + b"\r\n"
    async with scripted(answering(ok(extra=headers))) as server, client() as (http, _):
        answer = await http.post(f"{server.url}/v1/x", content=b"{}")
    assert len(answer.headers["x-big"]) == HEAD_LIMIT // 2


# --- 10. framing ----------------------------------------------------------------------------------------


CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: %b\r\n\r\n"


@pytest.mark.parametrize("coding", [b"gzip, chunked", b"gzip", b"chunked, chunked", b"identity"])
async def test_transfer_codings_other_than_plain_chunked_are_refused(coding: bytes) -> None:
    answer = CHUNKED_HEAD % coding + b"2\r\n{}\r\n0\r\n\r\n"
    assert "only plain chunked is relayed" in await refusal(answer)


async def test_chunked_trailers_are_dropped_never_merged_into_the_headers() -> None:
    answer = CHUNKED_HEAD % b"chunked" + b"2\r\n{}\r\n0\r\nset-cookie: session=evil\r\nx-t: 1\r\n\r\n"
    async with scripted(answering(answer)) as server, client() as (http, transport):
        got = await http.post(f"{server.url}/v1/x", content=b"{}")
        assert (got.content, "set-cookie" in got.headers, "x-t" in got.headers) == (b"{}", False, False)
        assert transport.idle_connections == 1  # the answer ended cleanly


async def test_endless_trailers_are_refused() -> None:
    async def endless(head: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(CHUNKED_HEAD % b"chunked" + b"2\r\n{}\r\n0\r\nx-t: ")
        for _ in range(2000):
            await asyncio.sleep(0.001)
            writer.write(b"a" * 16384)
            await writer.drain()
        return False

    async with scripted(endless) as server, client() as (http, _):
        with pytest.raises(httpx.RemoteProtocolError, match="trailers exceeds"):
            await http.post(f"{server.url}/v1/x", content=b"{}")


# --- 11. statuses no client should get ------------------------------------------------------------------


@pytest.mark.parametrize("status", [b"600", b"999", b"099"])
async def test_a_status_outside_100_to_599_is_refused(status: bytes) -> None:
    answer = b"HTTP/1.1 " + status + b" Odd\r\ncontent-length: 2\r\n\r\n{}"
    message = await refusal(answer)
    assert "outside 100-599" in message or "malformed" in message


async def test_a_switch_of_protocols_is_refused_not_an_uncaught_upgrade() -> None:
    answer = b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\nraw"
    assert "switched protocols (101)" in await refusal(answer)


async def test_a_tls_verification_failure_is_logged_and_answered_with_its_reason(
    certificate: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    cert, key = certificate
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)
    server = ScriptedServer(answering(ok()))
    server.server = await asyncio.start_server(server.handle, "127.0.0.1", 0, ssl=server_tls)
    port = server.server.sockets[0].getsockname()[1]
    config = {"upstreams": {"tls": {"base_url": f"https://localhost:{port}/v1", "retries": 0}}}
    upstreams = Upstreams(parse_config(config, env={}))
    await upstreams.start()
    try:
        with caplog.at_level(logging.INFO, "history_proxy.upstream"), pytest.raises(ProxyError) as caught:
            await upstreams.open("POST", "/chat/completions", query="", headers=[], names=["tls"], body=b"{}")
    finally:
        await upstreams.stop()
        server.server.close()
    assert caught.value.status_code == 502
    assert "self-signed certificate" in caught.value.message
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("not accepted: self-signed certificate" in line for line in warnings)


async def test_a_tls_verification_failure_says_why(certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)
    server = ScriptedServer(answering(ok()))
    server.server = await asyncio.start_server(server.handle, "127.0.0.1", 0, ssl=server_tls)
    port = server.server.sockets[0].getsockname()[1]
    try:
        transport = LeanTransport(
            ssl.create_default_context(), keepalive_s=30, fallback=httpx.AsyncHTTPTransport()
        )
        async with httpx.AsyncClient(transport=transport) as http:
            with pytest.raises(httpx.ConnectError, match=r"certificate.*self.signed"):
                await http.get(f"https://localhost:{port}/v1/models")
    finally:
        server.server.close()


async def test_a_connection_found_closed_before_writing_is_a_connect_error_which_the_client_retries() -> None:
    connection = Connection(asyncio.get_running_loop())
    connection.close()
    with pytest.raises(httpx.ConnectError, match="before the request was sent"):
        connection.start(b"POST / HTTP/1.1\r\n\r\n", b"{}")
    assert not connection.expecting
