"""A minimal, fast OpenAI-compatible mock upstream for the benchmark (a separate process).

Raw asyncio protocol over httptools (uvloop when installed): it reads the body only to find the
``"stream": true`` flag and answers with canned bytes, so its own cost stays far below the proxy's.

- ``POST /v1/chat/completions``: a small fixed JSON completion, or with ``"stream": true`` an SSE
  stream of ``--chunks`` content chunks spaced ``--chunk-delay-ms`` apart (the first chunk is sent at
  once; per request, headers ``x-bench-chunks`` / ``x-bench-chunk-delay-ms`` override both);
- ``GET /v1/models``: one model;
- anything else: 404.

Run: ``python -m bench.fast_upstream --port 0`` prints ``READY <port>`` once it listens.
(Measured against uvicorn + httptools + a bare ASGI callable, this protocol server answered a
non-streaming request in about a third of the CPU time; see bench/README.md.)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import signal
import sys
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import httptools

T = TypeVar("T")
STREAM_FLAG = re.compile(rb'"stream"\s*:\s*true')
MAX_CHUNKS = 10_000
MAX_DELAY_MS = 60_000


@dataclass(frozen=True)
class StreamShape:
    """How an SSE answer is cut: number of content chunks and the pause between them."""

    chunks: int = 20
    delay_ms: float = 0.0


def _completion_body() -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 1700000000,
            "model": "bench-model",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "Benchmark answer: the task is done."},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 100, "completion_tokens": 8, "total_tokens": 108},
        },
        separators=(",", ":"),
    ).encode()


def _sse_event(delta: dict[str, object], finish: str | None = None) -> bytes:
    payload = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "bench-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def _http_chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _plain_response(status: bytes, body: bytes, content_type: bytes = b"application/json") -> bytes:
    return (
        b"HTTP/1.1 "
        + status
        + b"\r\ncontent-type: "
        + content_type
        + b"\r\ncontent-length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )


COMPLETION = _plain_response(b"200 OK", _completion_body())
MODELS = _plain_response(
    b"200 OK", b'{"object":"list","data":[{"id":"bench-model","object":"model","owned_by":"bench"}]}'
)
NOT_FOUND = _plain_response(
    b"404 Not Found", b'{"error":{"message":"not found","type":"invalid_request_error"}}'
)
SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)
SSE_FIRST = _http_chunk(_sse_event({"role": "assistant", "content": ""}))
SSE_CONTENT = _http_chunk(_sse_event({"content": "token "}))
SSE_LAST = _http_chunk(_sse_event({}, "stop")) + _http_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"


class UpstreamProtocol(asyncio.Protocol):
    """One client connection; requests are answered in order (streams may span several loop turns)."""

    def __init__(self, shape: StreamShape) -> None:
        self._shape = shape
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._url = b""
        self._body = bytearray()
        self._header_name = b""
        self._chunks: int | None = None
        self._delay_ms: float | None = None
        self._pending: asyncio.Task[None] | None = None  # an unfinished stream; later answers wait for it

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError:
            if self._transport is not None:
                self._transport.write(_plain_response(b"400 Bad Request", b"{}"))
                self._transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._pending is not None:
            self._pending.cancel()
        self._transport = None

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._url = b""
        self._body = bytearray()
        self._chunks = None
        self._delay_ms = None

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        lowered = name.lower()
        if lowered == b"x-bench-chunks":
            self._chunks = max(1, min(MAX_CHUNKS, int(value)))
        elif lowered == b"x-bench-chunk-delay-ms":
            self._delay_ms = max(0.0, min(MAX_DELAY_MS, float(value)))

    def on_body(self, body: bytes) -> None:
        self._body += body

    def on_message_complete(self) -> None:
        method = self._parser.get_method()
        path = self._url.split(b"?", 1)[0]
        # the proxy relays answers raw, so one answer serves every surface it forwards
        if method == b"POST" and path.endswith(
            (
                b"/chat/completions",
                b"/responses",
                b"/messages",
                b":generateContent",
                b":streamGenerateContent",
            )
        ):
            if STREAM_FLAG.search(self._body) or path.endswith(b":streamGenerateContent"):
                chunks = self._chunks if self._chunks is not None else self._shape.chunks
                delay = self._delay_ms if self._delay_ms is not None else self._shape.delay_ms
                self._answer_stream(chunks, delay)
                return
            self._answer(COMPLETION)
        elif method == b"GET" and path.endswith(b"/models"):
            self._answer(MODELS)
        else:
            self._answer(NOT_FOUND)

    # answers
    def _answer(self, data: bytes) -> None:
        if self._pending is None or self._pending.done():
            if self._transport is not None:
                self._transport.write(data)
            return
        self._pending = asyncio.ensure_future(self._after(self._pending, data))

    async def _after(self, previous: asyncio.Task[None], data: bytes) -> None:
        await previous
        if self._transport is not None:
            self._transport.write(data)

    def _answer_stream(self, chunks: int, delay_ms: float) -> None:
        if delay_ms <= 0 and (self._pending is None or self._pending.done()):
            if self._transport is not None:
                self._transport.write(SSE_HEAD + SSE_FIRST + SSE_CONTENT * chunks + SSE_LAST)
            return
        previous = self._pending
        self._pending = asyncio.ensure_future(self._stream(previous, chunks, delay_ms / 1000))

    async def _stream(self, previous: asyncio.Task[None] | None, chunks: int, delay_s: float) -> None:
        if previous is not None:
            await previous
        if self._transport is None:
            return
        self._transport.write(SSE_HEAD + SSE_FIRST)
        for _ in range(chunks):
            if delay_s > 0:
                await asyncio.sleep(delay_s)
            if self._transport is None:
                return
            self._transport.write(SSE_CONTENT)
        self._transport.write(SSE_LAST)


def run_fast(main: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on uvloop when it is installed, else on the default asyncio loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


async def serve(host: str, port: int, shape: StreamShape) -> None:
    """Listen until SIGTERM/SIGINT; print ``READY <port>`` once bound."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: UpstreamProtocol(shape), host, port, backlog=4096)
    bound = server.sockets[0].getsockname()[1]
    print(f"READY {bound}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.fast_upstream", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (printed as READY <port>)")
    parser.add_argument("--chunks", type=int, default=20, help="content chunks per SSE answer")
    parser.add_argument("--chunk-delay-ms", type=float, default=0.0, help="pause between SSE chunks")
    args = parser.parse_args(argv)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print("fast_upstream listens on loopback only", file=sys.stderr)
        return 2
    shape = StreamShape(
        max(1, min(MAX_CHUNKS, args.chunks)), max(0.0, min(MAX_DELAY_MS, args.chunk_delay_ms))
    )
    run_fast(serve(args.host, args.port, shape))
    return 0


if __name__ == "__main__":
    sys.exit(main())
