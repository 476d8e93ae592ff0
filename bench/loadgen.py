"""A low-overhead load generator: raw HTTP/1.1 keep-alive connections over loopback.

Each of ``concurrency`` connections sends one request, waits for the whole response, records it
and sends the next, until ``max_requests`` were issued or ``max_seconds`` passed (both always
apply). Requests are prebuilt bytes; responses are parsed by httptools, so the client's own cost per
request is a few tens of microseconds, and it is measured (``client_cpu_ms``) rather than assumed.

Per request it records the latency (request written to response complete), the time to first
body byte (for SSE: the first event), the status and the body size.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import httptools

MAX_CONCURRENCY = 4_096
MAX_REQUESTS = 1_000_000
MAX_SECONDS = 600.0


@dataclass(frozen=True)
class Target:
    """Where requests go: a loopback host and port, a path and extra headers."""

    name: str
    host: str
    port: int
    path: str = "/v1/chat/completions"
    headers: tuple[tuple[str, str], ...] = ()


def build_request(target: Target, body: bytes, headers: Sequence[tuple[str, str]] = ()) -> bytes:
    """The bytes of one keep-alive POST of ``body`` to ``target``."""
    lines = [
        f"POST {target.path} HTTP/1.1",
        f"host: {target.host}:{target.port}",
        "content-type: application/json",
        "accept: */*",
        f"content-length: {len(body)}",
        *(f"{name}: {value}" for name, value in (*target.headers, *headers)),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass
class LoadResult:
    """What one bounded run measured."""

    latencies_ms: list[float] = field(default_factory=list)
    ttfb_ms: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    body_bytes: int = 0
    wall_s: float = 0.0
    client_cpu_s: float = 0.0
    probe_delta: float = 0.0

    @property
    def ok(self) -> int:
        return len(self.latencies_ms)

    def add_error(self, reason: str) -> None:
        self.errors += 1
        if len(self.error_samples) < 5:
            self.error_samples.append(reason[:200])

    def summary(self) -> dict[str, Any]:
        """Percentiles, throughput, client cost and errors as plain numbers."""
        done = self.ok + self.errors
        return {
            "requests": done,
            "ok": self.ok,
            "errors": self.errors,
            "error_samples": self.error_samples,
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
            "p50_ms": percentile(self.latencies_ms, 50),
            "p90_ms": percentile(self.latencies_ms, 90),
            "p99_ms": percentile(self.latencies_ms, 99),
            "mean_ms": sum(self.latencies_ms) / self.ok if self.ok else math.nan,
            "ttfb_p50_ms": percentile(self.ttfb_ms, 50),
            "ttfb_p99_ms": percentile(self.ttfb_ms, 99),
            "throughput_rps": self.ok / self.wall_s if self.wall_s > 0 else math.nan,
            "wall_s": self.wall_s,
            "client_cpu_ms_per_request": 1000 * self.client_cpu_s / done if done else math.nan,
            "body_bytes_per_response": self.body_bytes / self.ok if self.ok else math.nan,
        }


class ResponseError(Exception):
    """The connection failed or closed before a whole response arrived."""


class _Connection(asyncio.Protocol):
    """One keep-alive client connection that waits for one response at a time."""

    def __init__(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[None] | None = None
        self.first_body_at = 0.0
        self.body_bytes = 0
        self.status = 0
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ResponseError(f"bad response: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(ResponseError(f"connection closed: {exc}" if exc else "connection closed by server"))

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        if not self.first_body_at:
            self.first_body_at = time.perf_counter()
        self.body_bytes += len(body)

    def on_message_complete(self) -> None:
        if not self._parser.should_keep_alive():
            self.closed = True
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _fail(self, exc: Exception) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)

    def send(self, request: bytes) -> asyncio.Future[None]:
        assert self.transport is not None
        self.first_body_at = 0.0
        self.body_bytes = 0
        self.status = 0
        self._waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return self._waiter

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def _connect(target: Target) -> _Connection:
    loop = asyncio.get_running_loop()
    _, protocol = await loop.create_connection(_Connection, target.host, target.port)
    return protocol


async def _one(connection: _Connection, request: bytes, timeout_s: float) -> tuple[float, float]:
    """Send one request; (latency ms, first body byte ms). Raises on timeout or a broken connection."""
    loop = asyncio.get_running_loop()
    started = time.perf_counter()
    waiter = connection.send(request)

    def expire() -> None:
        if not waiter.done():
            waiter.set_exception(TimeoutError(f"no complete response after {timeout_s:g} s"))

    timer = loop.call_later(timeout_s, expire)
    try:
        await waiter
    finally:
        timer.cancel()
    ended = time.perf_counter()
    first = connection.first_body_at or ended
    return (ended - started) * 1000, (first - started) * 1000


async def run_load(  # noqa: PLR0915 (one load loop: its phases share a dozen locals)
    target: Target,
    requests: Sequence[bytes],
    *,
    concurrency: int,
    max_requests: int,
    max_seconds: float,
    timeout_s: float = 30.0,
    warmup: int = 0,
    probe: Callable[[], float] | None = None,
) -> LoadResult:
    """Drive ``target`` with ``concurrency`` connections; requests cycle through ``requests``.

    ``warmup`` requests per connection are sent first and not recorded. Stops when ``max_requests``
    were issued or ``max_seconds`` passed, whichever comes first; a request in flight at the
    deadline still completes (bounded by ``timeout_s``). ``probe`` (e.g. the target's CPU seconds) is
    read when measuring starts and ends; the difference is ``probe_delta``.
    """
    if not requests:
        raise ValueError("give at least one request")
    concurrency = max(1, min(concurrency, MAX_CONCURRENCY))
    max_requests = max(1, min(max_requests, MAX_REQUESTS))
    max_seconds = max(0.001, min(max_seconds, MAX_SECONDS))
    result = LoadResult()
    connections = await asyncio.gather(
        *(_connect(target) for _ in range(concurrency)), return_exceptions=True
    )
    live = [c for c in connections if isinstance(c, _Connection)]
    for failure in (c for c in connections if isinstance(c, BaseException)):
        result.add_error(f"connect: {failure!r}")
    if not live:
        return result
    try:

        async def warm(connection: _Connection) -> None:
            for i in range(max(0, warmup)):
                if connection.closed:
                    return
                try:
                    await _one(connection, requests[i % len(requests)], timeout_s)
                except (ResponseError, TimeoutError):
                    return

        await asyncio.gather(
            *(warm(c) for c in live)
        )  # all connections at once: warm-up is bounded by timeout_s
        issued = 0
        probe_started = probe() if probe is not None else 0.0
        cpu_started = time.process_time()
        started = time.perf_counter()
        deadline = started + max_seconds

        async def worker(connection: _Connection) -> None:
            nonlocal issued
            while issued < max_requests and time.perf_counter() < deadline:
                index = issued
                issued += 1
                if connection.closed:
                    try:
                        connection = await _connect(target)
                        live.append(connection)
                    except OSError as exc:
                        result.add_error(f"connect: {exc!r}")
                        return
                try:
                    latency, first = await _one(connection, requests[index % len(requests)], timeout_s)
                except (ResponseError, TimeoutError) as exc:
                    result.add_error(repr(exc))
                    connection.close()
                    connection.closed = True
                    continue
                status = connection.status
                result.statuses[status] = result.statuses.get(status, 0) + 1
                if 200 <= status < 300:
                    result.latencies_ms.append(latency)
                    result.ttfb_ms.append(first)
                    result.body_bytes += connection.body_bytes
                else:
                    result.add_error(f"HTTP {status}")

        await asyncio.gather(*(worker(c) for c in list(live)))
        result.wall_s = time.perf_counter() - started
        result.client_cpu_s = time.process_time() - cpu_started
        result.probe_delta = (probe() - probe_started) if probe is not None else 0.0
    finally:
        for connection in live:
            connection.close()
    return result


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.loadgen --port P [--messages N] [--stream] ...``: one bounded run, JSON out."""
    from bench.bodies import encode, synthetic_body
    from bench.fast_upstream import run_fast

    parser = argparse.ArgumentParser(prog="python -m bench.loadgen", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", default="/v1/chat/completions")
    parser.add_argument("--header", action="append", default=[], help="NAME:VALUE, repeatable")
    parser.add_argument("--messages", type=int, default=20)
    parser.add_argument("--model", default="bench-model")
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--requests", type=int, default=1_000)
    parser.add_argument("--duration", type=float, default=5.0)
    args = parser.parse_args(argv)
    headers = tuple(tuple(h.split(":", 1)) for h in args.header)
    target = Target("cli", "127.0.0.1", args.port, args.path, cast(tuple[tuple[str, str], ...], headers))
    request = build_request(
        target, encode(synthetic_body(args.messages, stream=args.stream, model=args.model))
    )
    result = run_fast(
        run_load(
            target,
            [request],
            concurrency=args.concurrency,
            max_requests=args.requests,
            max_seconds=args.duration,
            warmup=2,
        )
    )
    print(json.dumps(result.summary(), indent=2))
    return 0 if result.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
