"""One command for the whole benchmark: ``python -m bench.run [--quick] [--cells ...] [--duration S]``.

It starts the fast mock upstream and the proxy (``python -m history_proxy serve --workers 1``) on free
loopback ports, pins the proxy to one core and this process (the load generator) and the upstream to
another, then for every cell (body size x non-stream/stream x concurrency) runs the targets in a
palindrome (direct, history_proxy/passthrough, history_proxy/worker, [peers,] then the same backwards, per round)
and writes ``bench/results/<UTC stamp>.json|.md`` and ``bench/results/latest.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fnmatch
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from bench import procs
from bench.bodies import SIZES, encode, synthetic_body
from bench.fast_upstream import run_fast
from bench.floor import UPSTREAM_ENV as FLOOR_UPSTREAM_ENV
from bench.loadgen import Target, build_request, run_load
from bench.report import DIRECT, RESULTS_DIR, summarise_cell, write_results

ROOT = Path(__file__).resolve().parent.parent
CONCURRENCIES = (1, 8, 64)
FLOOR = "floor (uvicorn + orjson + transport)"
CHAINS: dict[str, dict[str, Any]] = {
    "passthrough": {"model": "bench-plain", "headers": (("x-agent-role", "passthrough"),)},
    "worker": {"model": "bench-cached", "headers": (("x-agent-role", "worker"), ("x-agent-name", "coder"))},
}
WORKER_CHAIN = [
    {"type": "worker_view"},
    {"type": "last_n_observations", "n": 5, "polling": 5},
    {"type": "token_limiter", "limit": 30000, "step": 4},
]
QUICK_CELLS = ("100-nonstream-c1", "100-stream-c1", "20-nonstream-c64")
SLOW_MODEL = "bench-slow"
CLAUDE = "-claude"
"""Model suffix of the Messages surface's requests (routed to the ``api: anthropic`` upstreams)."""
SURFACE_PATHS = ("/v1/responses", "/v1/messages")
GEMINI = "-gemini"
"""Model suffix of the Gemini surface's requests (routed to the ``api: google`` upstreams)."""
GEMINI_PATH = "/v1beta/models/{model}:generateContent"
"""The Gemini surface's target (``--surfaces``; not in ``bench.compare``: trees before it have no such route);
its requests name the chain's model in the path and stream on ``:streamGenerateContent?alt=sse``."""
MAX_SEGMENT_SECONDS = 60.0
RSS_SAMPLE_S = 0.1


@dataclass(frozen=True)
class Cell:
    """One point of the matrix: body size, streaming or not, concurrency."""

    messages: int
    stream: bool
    concurrency: int

    @property
    def id(self) -> str:
        return f"{self.messages}-{'stream' if self.stream else 'nonstream'}-c{self.concurrency}"


def all_cells() -> list[Cell]:
    return [Cell(m, s, c) for m in SIZES for s in (False, True) for c in CONCURRENCIES]


def select_cells(patterns: Sequence[str]) -> list[Cell]:
    """Cells whose id matches any glob (``100-*-c1``, ``20-nonstream-c64``), in matrix order."""
    chosen = [c for c in all_cells() if any(fnmatch.fnmatchcase(c.id, p) for p in patterns)]
    if not chosen:
        raise SystemExit(f"no cell matches {list(patterns)}; ids look like {all_cells()[0].id}")
    return chosen


def surface_body(path: str, chat: dict[str, Any]) -> dict[str, Any]:
    """The same conversation as a Responses or Messages request (a reasoning item or a signed thinking
    block on every third assistant step), for the surface cells."""
    from tests.surface_bodies import anthropic_chat, messages_body, plain_chat, responses_body

    extras = [1, 0, 0]
    if path.endswith("/responses"):
        body = responses_body(plain_chat(chat["messages"]), extras)
        model = chat["model"]
    else:
        body = messages_body(anthropic_chat(chat["messages"]), extras)
        model = chat["model"] + CLAUDE
    return {**body, "model": model, **({"stream": True} if chat.get("stream") else {})}


def proxy_config(upstream_port: int, slow_port: int) -> dict[str, Any]:
    """The proxy config under test: both chains, a plain and a cache-marking upstream, a slow one."""
    base = f"http://{procs.LOOPBACK}:{upstream_port}/v1"
    return {
        "upstreams": {
            "plain": {"base_url": base},
            "cached": {"base_url": base, "cache_control": True},
            "slow": {"base_url": f"http://{procs.LOOPBACK}:{slow_port}/v1"},
            "plain-anthropic": {"base_url": base, "api": "anthropic"},  # the Messages surface
            "plain-google": {"base_url": base, "api": "google"},  # the Gemini surface
            "cached-google": {"base_url": base, "api": "google", "cache_control": True},
            "cached-anthropic": {"base_url": base, "api": "anthropic", "cache_control": True},
        },
        "routes": [
            {"model": "bench-cached", "upstream": "cached"},
            {"model": f"bench-plain{CLAUDE}", "upstream": "plain-anthropic"},
            {"model": f"bench-cached{CLAUDE}", "upstream": "cached-anthropic"},
            {"model": f"bench-plain{GEMINI}", "upstream": "plain-google"},
            {"model": f"bench-cached{GEMINI}", "upstream": "cached-google"},
            {"model": SLOW_MODEL, "upstream": "slow"},
        ],
        "identity": {"default_role": "passthrough"},
        "policies": {"roles": {"passthrough": [{"type": "passthrough"}], "worker": WORKER_CHAIN}},
        "cache_control": {"last_n_messages": 2},
    }


@dataclass
class Runner:
    """The started processes and the targets the load generator drives."""

    args: argparse.Namespace
    workdir: Path
    stack: contextlib.ExitStack
    targets: list[tuple[Target, str | None, procs.Started]] = field(default_factory=list)
    """Each target with the proxy chain it exercises (None: direct or a peer) and its process."""
    upstream_port: int = 0
    slow_port: int = 0
    proxy_port: int = 0
    pinning: str = "none"

    def start(self) -> None:
        proxy_cpus, upstream = self.start_upstreams()
        self.proxy_port = procs.free_port()
        proxy = self.start_proxy("proxy", self.proxy_port, ROOT, proxy_cpus)
        self.targets.append((Target(DIRECT, procs.LOOPBACK, self.upstream_port), None, upstream))
        for chain, spec in CHAINS.items():
            if chain in self.args.chains:
                target = Target(
                    f"history-proxy/{chain}", procs.LOOPBACK, self.proxy_port, headers=spec["headers"]
                )
                self.targets.append((target, chain, proxy))
                for path in (*SURFACE_PATHS, GEMINI_PATH) if self.args.surfaces else ():
                    name = f"history-proxy/{chain}" + (
                        "/gemini" if path == GEMINI_PATH else path.removeprefix("/v1")
                    )
                    surface = Target(
                        name, procs.LOOPBACK, self.proxy_port, path=path, headers=spec["headers"]
                    )
                    self.targets.append((surface, chain, proxy))
        if self.args.floor:
            self.targets.append(self._floor(proxy_cpus))
        if self.args.peers:
            from bench.peers import start_peers

            for target, started in start_peers(
                self.args.peers, self.upstream_port, self.workdir, self.stack, proxy_cpus
            ):
                self.targets.append((target, None, started))

    def start_upstreams(self) -> tuple[set[int] | None, procs.Started]:
        """Pin, start both mock upstreams and write the proxy config; returns the proxy's cores and
        the main upstream."""
        available = procs.cores()
        proxy_cpus = client_cpus = None
        if len(available) >= 2 and not self.args.no_pin:
            proxy_cpus, client_cpus = {available[0]}, set(available[1:])
            procs.pin(0, client_cpus)
            self.pinning = (
                f"proxy and peers on CPU {available[0]}; load generator and upstream on {sorted(client_cpus)}"
            )
        upstream = self._upstream("upstream", self.args.chunks, self.args.chunk_delay_ms, client_cpus)
        self.upstream_port = upstream[1]
        slow = self._upstream(
            "slow-upstream", self.args.slow_chunks, self.args.slow_chunk_delay_ms, client_cpus
        )
        self.slow_port = slow[1]
        config = proxy_config(self.upstream_port, self.slow_port)
        from history_proxy.config.loading import ConfigError, parse_config

        try:
            parse_config(config)  # stop here, with the proxy's own message, before anything is measured
        except ConfigError as exc:
            raise SystemExit(f"the proxy rejects the benchmark config: {exc}") from None
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        return proxy_cpus, upstream[0]

    @property
    def config_path(self) -> Path:
        return self.workdir / "bench-config.yaml"

    def proxy_command(self, port: int, tree: Path = ROOT) -> list[str]:
        """``python -m history_proxy serve`` on ``port`` with the bench config (started in a tree: that tree's)."""
        return [
            sys.executable,
            "-m",
            procs.package_of(tree),
            "serve",
            "--config",
            str(self.config_path),
            "--host",
            procs.LOOPBACK,
            "--port",
            str(port),
            "--workers",
            str(self.args.workers),
            "--log-level",
            self.args.proxy_log_level,
        ]

    @contextlib.contextmanager
    def proxy_running(
        self, name: str, port: int, tree: Path, cpus: set[int] | None
    ) -> Iterator[procs.Started]:
        """The proxy of ``tree`` (its own package) on ``port``, ready, stopped on exit."""
        command = self.proxy_command(port, tree)
        with procs.running(procs.start(name, command, self.workdir, cpus=cpus, cwd=tree)) as started:
            procs.wait_ready(started, port, "/healthz")
            yield started

    def start_proxy(self, name: str, port: int, tree: Path, cpus: set[int] | None) -> procs.Started:
        """:meth:`proxy_running` until the runner's stack closes."""
        return self.stack.enter_context(self.proxy_running(name, port, tree, cpus))

    def _floor(self, cpus: set[int] | None) -> tuple[Target, str | None, procs.Started]:
        """``bench/floor.py`` served as the proxy is (one uvicorn worker, same loop and parser)."""
        from history_proxy.serve import uvicorn_options as _uvicorn_options

        port = procs.free_port()
        options = _uvicorn_options()
        command = [
            sys.executable, "-m", "uvicorn", "bench.floor:app", "--host", procs.LOOPBACK, "--port", str(port),
            "--loop", options["loop"], "--http", options["http"], "--log-level", "warning", "--no-access-log",
        ]  # fmt: skip
        env = {**os.environ, FLOOR_UPSTREAM_ENV: f"http://{procs.LOOPBACK}:{self.upstream_port}"}
        started = self.stack.enter_context(
            procs.running(procs.start(FLOOR, command, self.workdir, cpus=cpus, env=env, cwd=ROOT))
        )
        procs.wait_ready(started, port, "/healthz")
        return Target(FLOOR, procs.LOOPBACK, port), None, started

    def _upstream(
        self, name: str, chunks: int, delay_ms: float, cpus: set[int] | None
    ) -> tuple[procs.Started, int]:
        port = procs.free_port()
        command = [
            sys.executable,
            "-m",
            "bench.fast_upstream",
            "--port",
            str(port),
            "--chunks",
            str(chunks),
            "--chunk-delay-ms",
            str(delay_ms),
        ]
        started = self.stack.enter_context(
            procs.running(procs.start(name, command, self.workdir, cpus=cpus, cwd=ROOT))
        )
        procs.wait_ready(started, port, "/v1/models", timeout_s=20)
        return started, port

    def request_for(self, target: Target, chain: str | None, messages: int, stream: bool) -> bytes:
        model = CHAINS[chain or "passthrough"]["model"]
        body = synthetic_body(messages, stream=stream, model=model)
        if target.path in SURFACE_PATHS:
            body = surface_body(target.path, body)
        elif target.path == GEMINI_PATH:
            from tests.surface_bodies import gemini_body

            action = "streamGenerateContent?alt=sse" if stream else "generateContent"
            target = replace(target, path=f"/v1beta/models/{model}{GEMINI}:{action}")
            body = gemini_body(body["messages"])
        return build_request(target, encode(body))

    async def segment(
        self,
        target: Target,
        request: bytes,
        started: procs.Started,
        pids: list[int],
        concurrency: int,
        *,
        warmup: int = 1,
        max_requests: int | None = None,
    ) -> dict[str, Any]:
        """One bounded load run on one target, with the target's CPU and sampled RSS."""
        peak = 0
        stop = asyncio.Event()

        async def sample() -> None:
            nonlocal peak
            while not stop.is_set():
                peak = max(peak, procs.memory_kb(pids, "VmRSS"))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), RSS_SAMPLE_S)

        sampler = asyncio.create_task(sample())
        result = await run_load(
            target,
            [request],
            concurrency=concurrency,
            max_requests=max_requests or self.args.max_requests,
            max_seconds=self.args.duration,
            timeout_s=self.args.timeout,
            warmup=warmup,
            probe=lambda: procs.cpu_seconds(pids),
        )
        stop.set()
        await sampler
        summary = result.summary()
        done = summary["requests"] or 1
        summary["cpu_ms_per_request"] = 1000 * result.probe_delta / done
        summary["rss_peak_kb"] = peak or procs.memory_kb(pids, "VmHWM")
        summary["process"] = started.name
        return summary

    async def cell(self, cell: Cell) -> dict[str, Any]:
        """Warm every target up, then run the palindrome ``rounds`` times."""
        requests = {
            t.name: self.request_for(t, chain, cell.messages, cell.stream) for t, chain, _ in self.targets
        }
        trees = {t.name: procs.descendants(started.pid) for t, _, started in self.targets}
        for target, _, _ in self.targets:
            await run_load(
                target,
                [requests[target.name]],
                concurrency=cell.concurrency,
                max_requests=max(20, 2 * cell.concurrency),
                max_seconds=min(1.0, self.args.duration),
                timeout_s=self.args.timeout,
            )
        order = [*self.targets, *reversed(self.targets)] * self.args.rounds
        segments: dict[str, list[dict[str, Any]]] = {t.name: [] for t, _, _ in self.targets}
        for target, _, started in order:
            segments[target.name].append(
                await self.segment(
                    target, requests[target.name], started, trees[target.name], cell.concurrency
                )
            )
        figures = summarise_cell(segments, cell.stream)
        for target, chain, _started in self.targets:
            figures[target.name]["chain"] = chain or ("-" if target.name != DIRECT else None)
        return {
            "id": cell.id,
            "messages": cell.messages,
            "stream": cell.stream,
            "concurrency": cell.concurrency,
            "figures": figures,
            "segments": segments,
        }

    async def slow_streams(self, count: int) -> dict[str, Any]:
        """``count`` concurrent slow streams through the proxy's worker chain; peak RSS while they run."""
        proxy = next((t, s) for t, chain, s in self.targets if chain == "worker" or chain == "passthrough")
        target = Target(
            "history-proxy/slow", procs.LOOPBACK, self.proxy_port, headers=CHAINS["worker"]["headers"]
        )
        body = synthetic_body(self.args.slow_streams_messages, stream=True, model=SLOW_MODEL)
        seconds = self.args.slow_chunks * self.args.slow_chunk_delay_ms / 1000
        pids = procs.descendants(proxy[1].pid)
        request = build_request(target, encode(body))
        summary = await self.segment(target, request, proxy[1], pids, count, warmup=0, max_requests=count)
        # the process's high-water mark too: a burst between two samples still counts (it also covers
        # the cells before, which only ever makes the figure larger)
        peak_kb = max(summary["rss_peak_kb"], procs.memory_kb(pids, "VmHWM"))
        return {
            "streams": count,
            "seconds_per_stream": seconds,
            "chain": "worker",
            "messages": self.args.slow_streams_messages,
            "rss_peak_mb": peak_kb / 1024,
            "ok": summary["ok"],
            "errors": summary["errors"],
            "error_samples": summary["error_samples"],
            "p50_ms": summary["p50_ms"],
            "ttfb_p50_ms": summary["ttfb_p50_ms"],
        }


def _meta(args: argparse.Namespace, runner: Runner, started: float) -> dict[str, Any]:
    names = [t.name for t, _, _ in runner.targets]
    return {
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        **procs.machine_description(ROOT),
        "pinning": runner.pinning,
        "segment_seconds": args.duration,
        "segment_requests": args.max_requests,
        "rounds": args.rounds,
        "order": " ".join([*names, *reversed(names)]),
        "stream_chunks": args.chunks,
        "stream_chunk_delay_ms": args.chunk_delay_ms,
        "targets": names,
        "workers": args.workers,
        "proxy_log_level": args.proxy_log_level,
        "worker_chain": WORKER_CHAIN,
        "note": args.note,
    }


async def _measure(runner: Runner, cells: list[Cell], args: argparse.Namespace) -> dict[str, Any]:
    results = []
    for number, cell in enumerate(cells, 1):
        began = time.monotonic()
        outcome = await runner.cell(cell)
        results.append(outcome)
        brief = ", ".join(
            f"{name} +{fig.get('added_p50_ms', float('nan')):.2f} ms p50 {fig['throughput_rps']:.0f} rps"
            for name, fig in outcome["figures"].items()
            if name != DIRECT
        )
        print(f"[{number}/{len(cells)}] {cell.id} ({time.monotonic() - began:.1f} s): {brief}", flush=True)
    slow = await runner.slow_streams(args.slow_streams) if args.slow_streams > 0 else None
    return {"cells": results, "slow_streams": slow}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help=f"only {', '.join(QUICK_CELLS)}, 0.5 s segments, 1 round"
    )
    parser.add_argument(
        "--cells", nargs="+", metavar="GLOB", help="cell ids to run, e.g. '100-*-c1' (default: all 18)"
    )
    parser.add_argument("--chains", nargs="+", choices=sorted(CHAINS), default=sorted(CHAINS))
    parser.add_argument("--duration", type=float, help="seconds per segment (default 2; quick 0.5)")
    parser.add_argument("--max-requests", type=int, default=20_000, help="requests per segment at most")
    parser.add_argument("--rounds", type=int, help="palindromes per cell (default 2; quick 1)")
    parser.add_argument(
        "--timeout", type=float, default=30.0, help="seconds per request before it counts as an error"
    )
    parser.add_argument("--chunks", type=int, default=20, help="SSE content chunks per streamed answer")
    parser.add_argument("--chunk-delay-ms", type=float, default=1.0, help="pause between SSE chunks")
    parser.add_argument("--workers", type=int, default=1, help="proxy worker processes")
    parser.add_argument(
        "--proxy-log-level", default="info", help="the proxy's --log-level (its default: info)"
    )
    parser.add_argument(
        "--slow-streams",
        type=int,
        help="concurrent slow streams for the memory figure (default 1000; quick 0)",
    )
    parser.add_argument("--slow-streams-messages", type=int, default=20)
    parser.add_argument("--slow-chunks", type=int, default=10)
    parser.add_argument("--slow-chunk-delay-ms", type=float, default=500.0)
    parser.add_argument(
        "--peers", nargs="*", choices=("litellm", "portkey"), help="also run peers (no names: both)"
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also run bench/floor.py: uvicorn + orjson + the proxy's transport, nothing else (the floor)",
    )
    parser.add_argument(
        "--surfaces",
        action="store_true",
        help="also send each chain's requests as Responses and Messages requests (/v1/responses, /v1/messages)",
    )
    parser.add_argument("--no-pin", action="store_true", help="do not pin processes to cores")
    parser.add_argument("--results", type=Path, default=RESULTS_DIR, help="where result files go")
    parser.add_argument(
        "--note", default="", help="a line for the report (e.g. 'smoke run on a busy machine')"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cells = select_cells(args.cells) if args.cells else select_cells(QUICK_CELLS if args.quick else ["*"])
    args.duration = min(MAX_SEGMENT_SECONDS, args.duration or (0.5 if args.quick else 2.0))
    args.rounds = max(1, min(10, args.rounds or (1 if args.quick else 2)))
    args.slow_streams = max(
        0, min(5_000, args.slow_streams if args.slow_streams is not None else (0 if args.quick else 1000))
    )
    if args.peers is not None and not args.peers:
        args.peers = ["litellm", "portkey"]
    procs.raise_fd_limit(4 * max(args.slow_streams, max(CONCURRENCIES)) + 256)
    began = time.time()
    with procs.terminate_on_sigterm(), contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="history-proxy-bench-")))
        runner = Runner(args, workdir, stack)
        runner.start()
        print(f"targets: {', '.join(t.name for t, _, _ in runner.targets)}; {runner.pinning}", flush=True)
        measured = run_fast(_measure(runner, cells, args))
        result = {"meta": _meta(args, runner, began), **measured}
        result["meta"]["load_average_at_end"] = os.getloadavg()
        result["meta"]["proxy_log_tail"] = next(
            (s.log_tail(5) for t, c, s in runner.targets if c is not None), ""
        )
    json_path, md_path = write_results(result, args.results)
    print(f"wrote {json_path} and {md_path}", flush=True)
    print(md_path.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
