"""The floor: what any Python proxy built like this one pays before doing anything of its own.

A bare ASGI callable on uvicorn (uvloop + httptools, as the proxy is served) that reads a chat
completion's body, parses and re-serialises it with orjson, forwards it through the proxy's own
upstream transport (:class:`history_proxy.upstream.transport.LeanTransport`, keep-alive) and relays the answer:
no identity, chain, checks, token report, metrics, access line, errors or streaming care. Measured
beside the proxy (``python -m bench.run --floor``), the difference is the cost of everything the
proxy adds to a forward; the floor itself is the cost of Python's HTTP server, client and JSON.

Run by the harness as ``uvicorn bench.floor:app`` with ``BENCH_FLOOR_UPSTREAM`` set to the mock's
base URL (``http://127.0.0.1:PORT``).
"""

from __future__ import annotations

import os
import ssl
from typing import Any

import httpx
import orjson

from history_proxy.upstream.transport import Address, LeanTransport, Timeouts

UPSTREAM_ENV = "BENCH_FLOOR_UPSTREAM"
TIMEOUTS = Timeouts(connect=5.0, read=60.0, write=5.0)
HEADERS = [(b"content-type", b"application/json")]


class Floor:
    """The ASGI app; the upstream address is parsed once, the transport opened at startup."""

    def __init__(self, upstream: str) -> None:
        self.address = Address.of(httpx.URL(upstream.rstrip("/") + "/v1/chat/completions"))
        self.transport: LeanTransport | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await receive()  # lifespan.startup
            self.transport = LeanTransport(
                ssl.create_default_context(), keepalive_s=30.0, fallback=httpx.AsyncHTTPTransport()
            )
            await send({"type": "lifespan.startup.complete"})
            await receive()  # lifespan.shutdown
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["method"] != "POST" or self.transport is None:  # the harness's readiness probe
            await _answer(send, 200, HEADERS, b"{}")
            return
        pieces = []
        while True:
            message = await receive()
            pieces.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = orjson.dumps(orjson.loads(b"".join(pieces)))
        answer = await self.transport.exchange(self.address, "POST", HEADERS, body, TIMEOUTS)
        kind = next((v for k, v in answer.raw_headers if k.lower() == b"content-type"), b"application/json")
        if kind.startswith(b"text/event-stream"):  # relayed as it comes, so the first byte is measured
            await send(
                {
                    "type": "http.response.start",
                    "status": answer.status_code,
                    "headers": [(b"content-type", kind)],
                }
            )
            while (piece := await answer.next_piece()) is not None:
                await send({"type": "http.response.body", "body": piece, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        else:
            relayed = []
            while (piece := await answer.next_piece()) is not None:
                relayed.append(piece)
            await _answer(send, answer.status_code, [(b"content-type", kind)], b"".join(relayed))
        answer.release()


async def _answer(send: Any, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    framing = [(b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + framing})
    await send({"type": "http.response.body", "body": body})


def __getattr__(name: str) -> Floor:
    """``bench.floor:app``, built from the environment when uvicorn imports it."""
    if name == "app":
        return Floor(os.environ[UPSTREAM_ENV])
    raise AttributeError(name)
