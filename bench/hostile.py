"""Round three's hostile loads (issue 34): memory held by openings, bytes in flight, captured content.

    python -m bench.hostile --tree PATH memo      [--requests 40] [--size 4000000]
    python -m bench.hostile --tree PATH inflight  [--concurrent 10] [--size 30000000] [--budget BYTES]
    python -m bench.hostile --tree PATH capture   [--messages 2001] [--size 12000] [--off] [--fast-upstream]

Each load starts `history-proxy serve` from ``--tree`` (point it at another checkout to compare) and
a separate `history-proxy mock-upstream` process, both on free loopback ports, and prints one JSON
object:

- ``memo``: ``--requests`` ``/v1/messages`` requests, each with a distinct system prompt of
  ``--size`` characters (R3); the RSS of `serve` before and after, and the view memo's gauge.
- ``inflight``: ``--concurrent`` ``/v1/messages`` requests of ``--size`` bytes at once, the upstream
  holding each answer 3 s (R7); the peak RSS (``VmHWM``), and the answers by status. ``--budget``
  sets ``limits.max_inflight_bytes`` (trees that have it).
- ``capture``: one chat request of ``--messages`` messages of ``--size`` characters (24 MB by
  default) with ``telemetry.capture_content`` on (``--off``: telemetry off), ``/healthz`` probed
  every 10 ms from another process meanwhile (R8); the worst probe wait. ``--fast-upstream``: the
  upstream is :mod:`bench.fast_upstream` (it does not read the body), so that the probe measures the
  proxy and not a mock tokenizing 24 MB on the same two cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from bench import procs

PROBE = """
import os, sys, time, httpx
url, stop = sys.argv[1], sys.argv[2]
worst = 0.0
with httpx.Client(timeout=600) as client:
    client.get(url)
    while not os.path.exists(stop):
        at = time.perf_counter()
        client.get(url)
        worst = max(worst, time.perf_counter() - at)
        time.sleep(0.01)
print(worst)
"""


def status_kb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


@contextmanager
def serving(
    tree: str, limits: str, telemetry: str = "", fast: bool = False
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """`serve` from ``tree`` and a separate mock upstream (``fast``: :mod:`bench.fast_upstream`, which
    answers without reading the body); yields the proxy's URL and process."""
    upstream, port = procs.free_port(), procs.free_port()
    folder = Path(tempfile.mkdtemp())
    config = folder / "config.yaml"
    config.write_text(
        f"""upstreams:
  openai: {{base_url: "http://127.0.0.1:{upstream}/v1"}}
  claude: {{base_url: "http://127.0.0.1:{upstream}/v1", api: anthropic}}
routes: [{{model: "claude-*", upstream: claude}}]
limits: {{{limits}}}
{telemetry}
""",
        encoding="utf-8",
    )
    package = procs.package_of(Path(tree))
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "HISTORY_PROXY_CONFIG")}
    env["PYTHONPATH"] = tree
    quiet: dict[str, Any] = {
        "cwd": tree,
        "env": env,
        "stdout": subprocess.DEVNULL,
        "stderr": subprocess.DEVNULL,
    }
    upstream_command = (
        ["-m", "bench.fast_upstream", "--port", str(upstream)]
        if fast
        else ["-m", package, "mock-upstream", "--port", str(upstream)]
    )
    mock = subprocess.Popen(
        [sys.executable, *upstream_command],
        **{**quiet, "cwd": str(Path(__file__).resolve().parents[1])} if fast else quiet,
    )
    serve = [sys.executable, "-m", package, "serve", "--config", str(config), "--port", str(port)]
    with (folder / "serve.log").open("wb") as log:
        proxy = subprocess.Popen(serve, cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proxy.poll() is not None:
                raise SystemExit((folder / "serve.log").read_text())
            time.sleep(0.1)
        yield url, proxy
    finally:
        proxy.terminate()
        mock.terminate()
        proxy.wait(timeout=30)
        mock.wait(timeout=30)


def memo(args: argparse.Namespace) -> dict[str, Any]:
    with serving(args.tree, "") as (url, proxy), httpx.Client(timeout=300) as client:
        warm = {"model": "claude-x", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
        client.post(f"{url}/v1/messages", json=warm).raise_for_status()
        start = status_kb(proxy.pid, "VmRSS")
        for i in range(args.requests):
            system = f"conversation {i}: " + "s" * args.size
            client.post(f"{url}/v1/messages", json={**warm, "system": system}).raise_for_status()
        metrics = client.get(f"{url}/metrics").text
        gauge = next(
            (
                float(line.split()[1])
                for line in metrics.splitlines()
                if line.startswith("history_proxy_surface_memo_bytes ")
            ),
            None,
        )
        return {
            "rss_start_mb": round(start, 1),
            "rss_after_mb": round(status_kb(proxy.pid, "VmRSS"), 1),
            "peak_mb": round(status_kb(proxy.pid, "VmHWM"), 1),
            "memo_gauge_mb": None if gauge is None else round(gauge / 1e6, 3),
        }


def inflight(args: argparse.Namespace) -> dict[str, Any]:
    limits = f"max_inflight_bytes: {args.budget}" if args.budget else ""
    body = {
        "model": "claude-x",
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "m" * args.size}],
    }
    raw = json.dumps(body).encode()
    with serving(args.tree, limits) as (url, proxy):
        start = status_kb(proxy.pid, "VmRSS")

        def send(_: int) -> int:
            headers = {"content-type": "application/json", "x-mock-delay-ms": "3000"}
            return httpx.post(f"{url}/v1/messages", content=raw, headers=headers, timeout=600).status_code

        with ThreadPoolExecutor(args.concurrent) as pool:
            statuses = Counter(pool.map(send, range(args.concurrent)))
        return {
            "rss_start_mb": round(start, 1),
            "peak_mb": round(status_kb(proxy.pid, "VmHWM"), 1),
            "statuses": dict(statuses),
        }


def capture(args: argparse.Namespace) -> dict[str, Any]:
    telemetry = (
        ""
        if args.off
        else 'telemetry: {enabled: true, endpoint: "http://127.0.0.1:9/v1/traces", capture_content: true}'
    )
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " + "w" * args.size}
        for i in range(args.messages)
    ]
    raw = json.dumps({"model": "gpt-4o", "messages": messages}).encode()
    with serving(args.tree, "", telemetry, fast=args.fast_upstream) as (url, _):
        answer: list[float] = []

        def send() -> None:
            at = time.perf_counter()
            httpx.post(
                f"{url}/v1/chat/completions",
                content=raw,
                headers={"content-type": "application/json"},
                timeout=600,
            )
            answer.append(time.perf_counter() - at)

        stop = Path(tempfile.mkdtemp()) / "stop"
        probe = subprocess.Popen(
            [sys.executable, "-c", PROBE, f"{url}/healthz", str(stop)], stdout=subprocess.PIPE
        )
        try:
            time.sleep(0.5)
            sender = threading.Thread(target=send)
            sender.start()
            sender.join()
            time.sleep(0.3)  # the span ends as the answer does: probe a little past it
        finally:
            stop.touch()
        out, _ = probe.communicate(timeout=60)
        return {
            "body_mb": round(len(raw) / 1e6, 1),
            "capture": not args.off,
            "healthz_worst_s": round(float(out), 3),
            "request_s": round(answer[0], 2),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tree", default=str(Path(__file__).resolve().parents[1]))
    parser.add_argument("load", choices=["memo", "inflight", "capture"])
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--size", type=int, default=0, help="default: 4000000, 30000000 or 12000 by load")
    parser.add_argument("--concurrent", type=int, default=10)
    parser.add_argument("--budget", type=int, default=0)
    parser.add_argument("--messages", type=int, default=2001)
    parser.add_argument("--off", action="store_true")
    parser.add_argument(
        "--fast-upstream",
        action="store_true",
        help="capture: bench.fast_upstream as the upstream (the mock counts the 24 MB it receives: "
        "seconds of a core, on the same 2 cores as the proxy and the probe)",
    )
    args = parser.parse_args(argv)
    args.size = args.size or {"memo": 4_000_000, "inflight": 30_000_000, "capture": 12_000}[args.load]
    run = {"memo": memo, "inflight": inflight, "capture": capture}[args.load]
    print(json.dumps({"tree": args.tree, "load": args.load, **run(args)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
