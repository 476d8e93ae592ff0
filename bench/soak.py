"""Load and soak: many concurrent streaming clients for a while, then what the proxy kept.

``python -m bench.soak [--clients 500] [--duration 60] [--chunks 20] [--chunk-delay-ms 500]``

Loopback only and bounded (at most 5,000 clients and 600 s). It starts the fast mock upstream
(``bench.fast_upstream``, SSE answers of ``--chunks`` events spaced ``--chunk-delay-ms`` apart) and
``history-proxy serve`` in front of it with a realistic worker chain, then:

1. drives the upstream directly with the same number of streaming clients (the baseline);
2. drives the proxy with ``--clients`` keep-alive clients, each sending the next streaming request
   as soon as its previous answer ended, for ``--duration`` seconds, sampling the proxy's RSS (the
   clients start spread over one answer's duration, as independent agents would, not in lockstep);
3. lets the proxy go idle until its pooled upstream connections have passed their keep-alive and
   been swept, counts its open file descriptors again, and checks that it still answers.

It reports errors (goal 0), added latency (proxy minus direct, p50 and p99, whole stream and first
byte), the proxy's CPU, its RSS at start, once every client is streaming, at the end of the run and
after it (goal: flat) and its open file descriptors before and after (goal: equal), and writes them
to ``bench/results/soak-<UTC stamp>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench import procs
from bench.bodies import encode, synthetic_body
from bench.fast_upstream import run_fast
from bench.loadgen import LoadResult, Target, build_request, run_load
from bench.report import RESULTS_DIR, jsonable
from history_proxy.upstream.pools import KEEPALIVE_S

ROOT = Path(__file__).resolve().parent.parent
MAX_CLIENTS = 5_000
MAX_DURATION_S = 600.0
SWEPT_AFTER_S = (
    KEEPALIVE_S * 1.5 + 2
)  # idle connections expire after KEEPALIVE_S, swept every KEEPALIVE_S / 2
RSS_SAMPLE_S = 1.0
WORKER_HEADERS = (("x-agent-role", "worker"), ("x-agent-name", "coder"))
WORKER_CHAIN = [
    {"type": "worker_view"},
    {"type": "last_n_observations", "n": 5, "polling": 5},
    {"type": "token_limiter", "limit": 30000, "step": 4},
]


def proxy_config(upstream_port: int) -> dict[str, Any]:
    return {
        "upstreams": {"slow": {"base_url": f"http://{procs.LOOPBACK}:{upstream_port}/v1", "retries": 0}},
        "policies": {"roles": {"worker": WORKER_CHAIN}},
    }


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_mb(pid: int) -> float:
    return procs.memory_kb([pid], "VmRSS") / 1024


def added(proxy: dict[str, Any], direct: dict[str, Any], key: str) -> float:
    return (
        float(proxy[key] - direct[key])
        if proxy.get(key) is not None and direct.get(key) is not None
        else math.nan
    )


async def drive(
    target: Target, request: bytes, clients: int, seconds: float, timeout_s: float, stagger_s: float
) -> LoadResult:
    """``clients`` keep-alive clients, each sending its next request as soon as an answer ends, until
    ``seconds`` have passed. Client i starts ``i * stagger_s / clients`` late, so arrivals are spread
    over the run as independent agents' are, instead of all clients moving in lockstep."""

    async def client(index: int) -> LoadResult:
        delay = index * stagger_s / clients
        await asyncio.sleep(delay)
        return await run_load(
            target,
            [request],
            concurrency=1,
            max_requests=10_000_000,
            max_seconds=max(0.001, seconds - delay),
            timeout_s=timeout_s,
        )

    started, cpu_started = time.perf_counter(), time.process_time()
    merged = LoadResult()
    for part in await asyncio.gather(*(client(i) for i in range(clients))):
        merged.latencies_ms += part.latencies_ms
        merged.ttfb_ms += part.ttfb_ms
        for status, count in part.statuses.items():
            merged.statuses[status] = merged.statuses.get(status, 0) + count
        for sample in part.error_samples:
            merged.add_error(sample)
        merged.errors += part.errors - len(part.error_samples)
        merged.body_bytes += part.body_bytes
    merged.wall_s = time.perf_counter() - started
    merged.client_cpu_s = time.process_time() - cpu_started
    return merged


async def one_request(target: Target, request: bytes, timeout_s: float) -> LoadResult:
    return await run_load(
        target, [request], concurrency=1, max_requests=1, max_seconds=timeout_s, timeout_s=timeout_s
    )


async def soak(
    args: argparse.Namespace, proxy: procs.Started, proxy_port: int, upstream_port: int
) -> dict[str, Any]:
    body = encode(synthetic_body(args.messages, stream=True, model="bench-slow"))
    direct = Target("direct", procs.LOOPBACK, upstream_port)
    through = Target("history-proxy/worker", procs.LOOPBACK, proxy_port, headers=WORKER_HEADERS)
    stream_s = args.chunks * args.chunk_delay_ms / 1000
    timeout_s = stream_s + 30

    warm = await one_request(through, build_request(through, body), timeout_s)
    if warm.errors or not warm.ok:
        raise SystemExit(f"the proxy does not answer: {warm.error_samples}")
    start = {"rss_mb": rss_mb(proxy.pid), "fds": open_fds(proxy.pid)}

    print(
        f"baseline: {args.clients} clients straight to the upstream for {args.baseline_seconds:g} s",
        flush=True,
    )
    baseline = await drive(
        direct, build_request(direct, body), args.clients, args.baseline_seconds, timeout_s, stream_s
    )

    print(f"soak: {args.clients} clients through the proxy for {args.duration:g} s", flush=True)
    samples: list[tuple[float, float, int]] = []
    started = time.monotonic()

    async def sample() -> None:
        while True:
            samples.append(
                (round(time.monotonic() - started, 1), round(rss_mb(proxy.pid), 1), open_fds(proxy.pid))
            )
            await asyncio.sleep(RSS_SAMPLE_S)

    sampler = asyncio.create_task(sample())
    cpu_started = procs.cpu_seconds([proxy.pid])
    try:
        loaded = await drive(
            through, build_request(through, body), args.clients, args.duration, timeout_s, stream_s
        )
    finally:
        sampler.cancel()
    end_of_run = {"rss_mb": rss_mb(proxy.pid), "fds": open_fds(proxy.pid)}
    proxy_cpu_s = procs.cpu_seconds([proxy.pid]) - cpu_started

    print(f"idle: waiting {args.idle_seconds:g} s for pooled upstream connections to be swept", flush=True)
    await asyncio.sleep(args.idle_seconds)
    idle = {"rss_mb": rss_mb(proxy.pid), "fds": open_fds(proxy.pid)}
    probe = await one_request(through, build_request(through, body), timeout_s)

    direct_summary, proxy_summary = baseline.summary(), loaded.summary()
    ramped = [rss for at, rss, _ in samples if at >= 2 * stream_s]  # every client streaming by then
    return {
        "errors": loaded.errors + (0 if probe.ok else 1),
        "error_samples": loaded.error_samples,
        "requests": proxy_summary["requests"],
        "throughput_rps": proxy_summary["throughput_rps"],
        "proxy_cpu_ms_per_request": 1000 * proxy_cpu_s / max(1, proxy_summary["requests"]),
        "proxy_cpu_share_of_one_core": proxy_cpu_s / max(1e-9, proxy_summary["wall_s"]),
        "added_latency_ms": {
            "p50": added(proxy_summary, direct_summary, "p50_ms"),
            "p99": added(proxy_summary, direct_summary, "p99_ms"),
            "ttfb_p50": added(proxy_summary, direct_summary, "ttfb_p50_ms"),
            "ttfb_p99": added(proxy_summary, direct_summary, "ttfb_p99_ms"),
        },
        "rss_mb": {
            "start": round(start["rss_mb"], 1),
            "all_streaming": ramped[0] if ramped else None,
            "peak": round(procs.memory_kb([proxy.pid], "VmHWM") / 1024, 1),
            "end_of_run": round(end_of_run["rss_mb"], 1),
            "idle_after": round(idle["rss_mb"], 1),
        },
        "open_fds": {"before": start["fds"], "end_of_run": end_of_run["fds"], "idle_after": idle["fds"]},
        "direct": direct_summary,
        "proxy": proxy_summary,
        "samples_s_rss_mb_fds": samples,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    procs.raise_fd_limit(4 * args.clients + 256)
    available = procs.cores()
    proxy_cpus = client_cpus = None
    if len(available) >= 2:
        proxy_cpus, client_cpus = {available[0]}, set(available[1:])
        procs.pin(0, client_cpus)
    with tempfile.TemporaryDirectory(prefix="history-proxy-soak-") as scratch, procs.terminate_on_sigterm():
        workdir = Path(scratch)
        upstream_port, proxy_port = procs.free_port(), procs.free_port()
        upstream_command = [
            sys.executable, "-m", "bench.fast_upstream", "--port", str(upstream_port),
            "--chunks", str(args.chunks), "--chunk-delay-ms", str(args.chunk_delay_ms),
        ]  # fmt: skip
        config_path = workdir / "soak-config.yaml"
        config_path.write_text(yaml.safe_dump(proxy_config(upstream_port), sort_keys=False))
        proxy_command = [
            sys.executable, "-m", "history_proxy", "serve", "--config", str(config_path), "--host", procs.LOOPBACK,
            "--port", str(proxy_port), "--workers", "1", "--log-level", args.proxy_log_level,
        ]  # fmt: skip
        upstream = procs.start("upstream", upstream_command, workdir, cpus=client_cpus, cwd=ROOT)
        with procs.running(upstream):
            procs.wait_ready(upstream, upstream_port, "/v1/models", timeout_s=20)
            proxy = procs.start("proxy", proxy_command, workdir, cpus=proxy_cpus, cwd=ROOT)
            with procs.running(proxy):
                procs.wait_ready(proxy, proxy_port, "/healthz")
                figures = run_fast(soak(args, proxy, proxy_port, upstream_port))
                figures["proxy_log_tail"] = proxy.log_tail(5)
    return {
        "what": "bench.soak",
        "args": {key: str(value) if isinstance(value, Path) else value for key, value in vars(args).items()},
        "pinning": f"proxy on CPU {sorted(proxy_cpus)}; clients and upstream on {sorted(client_cpus)}"
        if proxy_cpus and client_cpus
        else "none",
        "machine": procs.machine_description(ROOT),
        **figures,
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=500, help="concurrent streaming clients (default 500)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load (default 60)")
    parser.add_argument(
        "--baseline-seconds", type=float, default=None, help="direct run (default duration/6, >= 5)"
    )
    parser.add_argument("--chunks", type=int, default=20, help="SSE events per answer (default 20)")
    parser.add_argument(
        "--chunk-delay-ms", type=float, default=500.0, help="pause between events (default 500)"
    )
    parser.add_argument("--messages", type=int, default=20, help="messages per request body (default 20)")
    parser.add_argument(
        "--proxy-log-level", default="warning", help="the proxy's --log-level (default warning)"
    )
    parser.add_argument(
        "--idle-seconds",
        type=float,
        default=SWEPT_AFTER_S,
        help=f"idle time before the last fd count (default {SWEPT_AFTER_S:g}: pooled connections swept by then)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="where to write soak-<stamp>.json")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.clients = max(1, min(MAX_CLIENTS, args.clients))
    args.duration = max(1.0, min(MAX_DURATION_S, args.duration))
    args.baseline_seconds = max(5.0, min(args.duration, args.baseline_seconds or args.duration / 6))
    print(f"load average at start: {os.getloadavg()}", flush=True)
    result = run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = args.out / f"soak-{stamp}.json"
    path.write_text(json.dumps(jsonable(result), indent=2) + "\n", encoding="utf-8")
    short = {
        key: result[key]
        for key in (
            "errors",
            "requests",
            "throughput_rps",
            "proxy_cpu_share_of_one_core",
            "added_latency_ms",
            "rss_mb",
            "open_fds",
        )
    }
    print(json.dumps(jsonable(short), indent=2))
    print(f"written to {path}")
    return 0 if result["errors"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
