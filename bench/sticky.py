"""Does sticky routing by conversation help behind a load balancer? The view memo, measured.

Three ``history-proxy serve`` replicas (default config: the built-in mock, worker chain), three
synthetic agent conversations replayed as they grow (every request an agent sent), on the Responses
and Messages surfaces. Two routings, each on fresh replicas: round robin (request ``j`` of every
conversation to replica ``j % 3``, what a plain load balancer does to consecutive turns) and sticky
(conversation ``c`` always to replica ``c``). Reported: the memo's reused and converted messages,
the proxy's CPU per request (all replicas, from /proc) and its mean ``x-history-overhead-ms``.

    .venv/bin/python -m bench.sticky --messages 100
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench.bodies import encode, replay_prefixes, synthetic_messages
from bench.procs import cpu_seconds, free_port, start, stop, wait_ready
from tests.surface_bodies import anthropic_chat, messages_body, plain_chat, responses_body

REPLICAS = 3
REPO = Path(__file__).resolve().parents[1]


def requests(messages: int) -> list[list[tuple[str, bytes]]]:
    """Per conversation, its requests in order: (path, body) on both surfaces."""
    conversations = []
    for seed in range(REPLICAS):
        chat = synthetic_messages(messages, seed=seed)
        steps = []
        for prefix in replay_prefixes(chat):
            steps.append(("/v1/responses", encode(responses_body(plain_chat(prefix), [1, 0, 0]))))
            body = {**messages_body(anthropic_chat(prefix), [1, 0, 0]), "model": "claude-x"}
            steps.append(("/v1/messages", encode(body)))
        conversations.append(steps)
    return conversations


def memo_counts(urls: list[str]) -> dict[str, float]:
    counts: dict[str, float] = {}
    for url in urls:
        for family in text_string_to_metric_families(httpx.get(f"{url}/metrics").text):
            for sample in family.samples:
                if sample.name == "history_proxy_surface_memo_messages_total":
                    outcome = sample.labels["outcome"]
                    counts[outcome] = counts.get(outcome, 0) + sample.value
    return counts


def run(routing: str, conversations: list[list[tuple[str, bytes]]], logs: Path) -> dict[str, Any]:
    ports = [free_port() for _ in range(REPLICAS)]
    procs = [
        start(
            f"{routing}-{n}",
            [sys.executable, "-m", "history_proxy", "serve", "--mock", "--port", str(port)],
            logs,
            cwd=REPO,
        )
        for n, port in enumerate(ports)
    ]
    try:
        for proc, port in zip(procs, ports, strict=True):
            wait_ready(proc, port)
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        cpu_before = cpu_seconds([p.pid for p in procs])
        overheads = []
        with httpx.Client(
            timeout=60, headers={"x-agent-role": "worker", "content-type": "application/json"}
        ) as client:
            for step in range(max(len(c) for c in conversations)):
                for c, steps in enumerate(conversations):
                    if step >= len(steps):
                        continue
                    replica = (
                        c if routing == "sticky" else (step // 2) % REPLICAS
                    )  # a turn's two surfaces together
                    path, body = steps[step]
                    answer = client.post(urls[replica] + path, content=body)
                    answer.raise_for_status()
                    overheads.append(float(answer.headers["x-history-overhead-ms"]))
        cpu = cpu_seconds([p.pid for p in procs]) - cpu_before
        memo = memo_counts(urls)
    finally:
        for proc in procs:
            stop(proc)
    sent = len(overheads)
    return {
        "routing": routing,
        "requests": sent,
        "memo_reused": memo.get("reused", 0),
        "memo_converted": memo.get("converted", 0),
        "cpu_ms_per_request": round(cpu * 1000 / sent, 2),
        "overhead_ms_mean": round(sum(overheads) / sent, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100, help="messages per conversation (20, 100, 400)")
    parser.add_argument(
        "--rounds", type=int, default=2, help="round robin and sticky, alternated, this many times"
    )
    args = parser.parse_args(argv)
    conversations = requests(args.messages)
    with tempfile.TemporaryDirectory(prefix="bench-sticky-") as folder:
        for _ in range(args.rounds):
            for routing in ("round-robin", "sticky"):
                started = time.monotonic()
                result = run(routing, conversations, Path(folder))
                print(json.dumps({**result, "seconds": round(time.monotonic() - started, 1)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
