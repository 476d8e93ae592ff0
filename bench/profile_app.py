"""The proxy's own CPU per request, in process: the ASGI app driven directly against a fast upstream.

``python -m bench.profile_app [--requests N] [--runs R] [--cprofile]`` starts ``bench.fast_upstream``
on a free port, builds the app for a config pointing at it (no filter chain, so the figure is the
HTTP edge: parsing, headers, forwarding, relaying, metrics, access line), and sends ``N``
non-streaming chat completions with a 20- and a 100-message body straight into the ASGI callable
(no client, no server socket). It prints the median process CPU time per request over ``R`` runs;
the upstream's CPU is another process's and not counted. ``--cprofile`` prints the top functions of
one extra run instead.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import logging
import os
import pstats
import statistics
import subprocess
import sys
import time
from typing import Any

from bench.bodies import encode, synthetic_body
from history_proxy.config.loading import parse_config
from history_proxy.observability.logs import JsonFormatter
from history_proxy.server.app import create_app

SIZES = (20, 100)
SORT = "tottime"
LIMIT = 35


def start_upstream() -> tuple[subprocess.Popen[str], int]:
    """``bench.fast_upstream`` on a free port; returns the process and its port."""
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.fast_upstream", "--port", "0"], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    line = process.stdout.readline().split()
    if not line or line[0] != "READY":
        process.kill()
        raise RuntimeError("bench.fast_upstream did not start")
    return process, int(line[1])


async def one_request(app: Any, raw: bytes) -> int:
    """One POST /v1/chat/completions through the ASGI app; returns the status."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"proxy"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(raw)).encode()),
            (b"x-agent-role", b"worker"),
            (b"authorization", b"Bearer sk-client"),
        ],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8000),
    }
    sent = False
    status = 0
    done = asyncio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": raw, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif not message.get("more_body", False):
            done.set()

    await app(scope, receive, send)
    return status


async def cpu_per_request_ms(app: Any, bodies: list[bytes], requests: int) -> float:
    """Process CPU per request over ``requests`` sequential requests (bodies in turn)."""
    started = time.process_time()
    for index in range(requests):
        status = await one_request(app, bodies[index % len(bodies)])
        if status != 200:
            raise RuntimeError(f"request answered {status}")
    return (time.process_time() - started) * 1000 / requests


async def measure(port: int, requests: int, runs: int, profile: bool) -> None:
    config = parse_config({"upstreams": {"bench": {"base_url": f"http://127.0.0.1:{port}/v1"}}}, env={})
    app = create_app(config)
    bodies = [encode(synthetic_body(size)) for size in SIZES]
    async with app.router.lifespan_context(app):
        await cpu_per_request_ms(app, bodies, 200)  # warm up: connections, encodings, caches
        if profile:
            profiler = cProfile.Profile()
            profiler.enable()
            await cpu_per_request_ms(app, bodies, requests)
            profiler.disable()
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats(SORT).print_stats(LIMIT)
            print(out.getvalue())
            return
        figures = [await cpu_per_request_ms(app, bodies, requests) for _ in range(runs)]
    print(
        f"CPU per request: median {statistics.median(figures):.3f} ms over {runs} runs of {requests} "
        f"(runs: {', '.join(f'{f:.3f}' for f in figures)})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--cprofile", action="store_true")
    args = parser.parse_args(argv)
    # as `serve` at its default level: the access line is formatted and written (to /dev/null here)
    handler = logging.StreamHandler(open(os.devnull, "w"))  # noqa: SIM115 - lives as long as the process
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("history_proxy")
    logger.handlers, logger.propagate = [handler], False
    logger.setLevel(logging.INFO)
    process, port = start_upstream()
    try:
        try:
            import uvloop

            uvloop.run(measure(port, args.requests, args.runs, args.cprofile))
        except ImportError:
            asyncio.run(measure(port, args.requests, args.runs, args.cprofile))
    finally:
        process.terminate()
        process.wait(timeout=5)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
