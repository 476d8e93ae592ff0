"""Scripted raw HTTP/1.1 servers on loopback (bytes the test chose), the lean transport's client, and a
throwaway certificate for an HTTPS upstream."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from history_proxy.upstream.transport import LeanTransport

LOOPBACK = "127.0.0.1"
Answer = Callable[[bytes, asyncio.StreamWriter], Awaitable[bool]]
"""Writes the answer to one request head; returns whether to keep the connection open."""


def ok(body: bytes = b'{"ok":true}', extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%b\r\n%b" % (
        len(body),
        extra,
        body,
    )


class ScriptedServer:
    """A raw HTTP/1.1 server: reads each request (head and Content-Length or chunked body), then
    lets ``answer`` write whatever bytes it likes."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.connections = 0
        self.requests: list[bytes] = []
        self.server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://{LOOPBACK}:{self.server.sockets[0].getsockname()[1]}"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                body = b""
                lowered = head.lower()
                if b"content-length:" in lowered:
                    length = int(lowered.split(b"content-length:")[1].split(b"\r\n")[0])
                    body = await reader.readexactly(length)
                elif b"transfer-encoding: chunked" in lowered:
                    while True:
                        size = int((await reader.readuntil(b"\r\n")).strip(), 16)
                        body += (await reader.readexactly(size + 2))[:-2]
                        if size == 0:
                            break
                self.requests.append(head + body)
                if not await self.answer(head, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@asynccontextmanager
async def scripted(answer: Answer) -> AsyncIterator[ScriptedServer]:
    server = ScriptedServer(answer)
    server.server = await asyncio.start_server(server.handle, LOOPBACK, 0)
    try:
        yield server
    finally:
        server.server.close()


@asynccontextmanager
async def client(
    timeout: float = 5, keepalive_s: float = 30
) -> AsyncIterator[tuple[httpx.AsyncClient, LeanTransport]]:
    transport = LeanTransport(
        httpx.create_ssl_context(), keepalive_s=keepalive_s, fallback=httpx.AsyncHTTPTransport()
    )
    async with httpx.AsyncClient(transport=transport, timeout=timeout) as http:
        yield http, transport


def answering(data: bytes, keep: bool = True) -> Answer:
    async def answer(head: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(data)
        await writer.drain()
        return keep

    return answer


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A throwaway self-signed certificate for ``localhost`` and its key."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key
