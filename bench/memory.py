"""Memory under the loads of issue 26: RSS of one `history-proxy serve` before, after and after a rest.

    python -m bench.memory [--tree PATH] [--requests N] [--size BYTES] [--surface chat|messages]

Starts `python -m history_proxy serve` from ``--tree`` (default: this checkout; point it at another
checkout to compare) on a free loopback port, with the built-in mock as upstream, sends ``N``
requests each carrying one distinct text of ``--size`` bytes (a distinct 256 KiB tool output per
request, as an agent fleet sends them), and prints the process's RSS (``/proc``) before, right
after, and 5 s later, and the cache gauges of ``/metrics`` where the tree has them (``--idle S``: the view memo forgets
conversations idle for S seconds, and the rested figure is taken after a scrape past that). Also measures
how long ``/healthz`` waits while one request carrying ``--run`` characters of ``a`` is counted.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from bench import procs

CONFIG = """
upstreams:
  openai: {base_url: "mock://"}
  claude: {base_url: "mock://", api: anthropic, cache_control: true}
routes: [{model: "claude-*", upstream: claude}]
"""


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def gauges(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return {
        line.split()[0]: float(line.split()[1])
        for line in text.splitlines()
        if line.startswith("history_proxy_") and "_bytes" in line.split()[0]
    }


def body(surface: str, i: int, size: int) -> dict[str, object]:
    text = f"{i} " + ("lorem ipsum dolor sit amet " * (size // 27 + 1))[:size]
    if surface == "messages":
        return {
            "model": "claude-x",
            "max_tokens": 8,
            "messages": [
                {"role": "user", "content": f"task {i}"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t1", "name": "cat", "input": {}}],
                },
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": text}]},
            ],
        }
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": text}]}


def stall(url: str, run: int) -> float:
    """The longest /healthz wait while one request of ``run`` characters of ``a`` is counted."""
    done = threading.Event()
    payload = {"model": "gpt-4o", "messages": [{"role": "user", "content": "a" * run}]}

    def count() -> None:
        httpx.post(f"{url}/v1/chat/completions", json=payload, timeout=600)
        done.set()

    thread = threading.Thread(target=count)
    thread.start()
    time.sleep(0.2)
    worst = 0.0
    while not done.is_set():
        started = time.perf_counter()
        httpx.get(f"{url}/healthz", timeout=600)
        worst = max(worst, time.perf_counter() - started)
        time.sleep(0.02)
    thread.join()
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tree", default=str(Path(__file__).resolve().parents[1]))
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--size", type=int, default=256 * 1024)
    parser.add_argument("--surface", choices=["chat", "messages"], default="chat")
    parser.add_argument("--run", type=int, default=0, help="also time /healthz behind a run of this many 'a'")
    parser.add_argument(
        "--idle", type=float, default=0, help="limits.surface_memo_idle_s (trees that have it)"
    )
    args = parser.parse_args()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    folder = Path(tempfile.mkdtemp())
    idle = f"limits: {{surface_memo_idle_s: {args.idle}}}\n" if args.idle else ""
    (folder / "config.yaml").write_text(CONFIG + idle)
    env = {**os.environ, "PYTHONPATH": args.tree}
    env.pop("OPENAI_API_KEY", None)
    log = (folder / "serve.log").open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            procs.package_of(Path(args.tree)),
            "serve",
            "--config",
            str(folder / "config.yaml"),
            "--port",
            str(port),
        ],
        cwd=args.tree,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        path = "/v1/messages" if args.surface == "messages" else "/v1/chat/completions"
        result: dict[str, object] = {
            "tree": args.tree,
            "surface": args.surface,
            "requests": args.requests,
            "size": args.size,
            "rss_start_mb": round(rss_mb(process.pid), 1),
        }
        started = time.perf_counter()
        with httpx.Client(timeout=120) as client:
            for i in range(args.requests):
                client.post(f"{url}{path}", json=body(args.surface, i, args.size)).raise_for_status()
        result["seconds"] = round(time.perf_counter() - started, 1)
        result["rss_after_mb"] = round(rss_mb(process.pid), 1)
        time.sleep(max(5, args.idle + 1))
        result["gauges"] = gauges(url)  # a scrape: the memo forgets idle conversations first
        result["rss_rested_mb"] = round(rss_mb(process.pid), 1)
        if args.run:
            result["healthz_worst_s_behind_run"] = round(stall(url, args.run), 3)
        print(json.dumps(result, indent=1))
    finally:
        process.terminate()
        process.wait(timeout=30)


if __name__ == "__main__":
    main()
