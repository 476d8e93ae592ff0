"""Two trees of the proxy in one run: one upstream, segments interleaved, so drift cancels.

``python -m bench.compare OLD NEW [--cells 20-nonstream-c64 100-nonstream-c1] [--chains worker]
[--seconds 3] [--rounds 1] [--surfaces] [--memory 3] [--slow-streams 1000] [--telemetry] [--env-old K=V]
[--env-new K=V]``

``--surfaces`` also sends each cell's conversation as a Responses and a Messages request (the
bodies of ``bench.run --surfaces``), so one run compares all three surfaces of both trees.

``--telemetry`` turns ``telemetry.enabled`` on in the config and starts an OTLP/HTTP collector
stand-in (:mod:`bench.otlp_sink`) whose URL replaces ``{sink}`` in ``--env-old``/``--env-new``
values: the same tree twice with other environments compares tracing off
(``OTEL_SDK_DISABLED=true``), on with a live collector
(``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT={sink}``), on with a slow one (``--sink-delay-s``) and on
with a dead one (a port nobody listens on).

OLD and NEW are directories holding the project, e.g. ``git worktree add /tmp/old <commit>``. Each
proxy runs from its own tree with this interpreter (``python -m history_proxy`` imports the ``history_proxy``
package of the directory it starts in) and serves the benchmark config of ``bench.run``, pinned to
the proxy core, against one fast upstream on the other core. Per cell and chain, every round runs
old, new, new, old, old, new segments (each after a short warm-up); the table gives per tree the
medians of throughput, p50 and p99 latency and the proxy's CPU per request. ``--memory K`` also measures
the slow-streams memory figure K times per tree, a fresh proxy each time, trees alternating (peak:
the larger of the sampled RSS and the process's VmHWM; and how many streams ended whole). It prints
a markdown table and writes
``bench/results/compare-<UTC stamp>.json``.

This machine's speed drifts between minutes; only figures of one run, interleaved, compare.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from bench import procs
from bench.bodies import encode, synthetic_body
from bench.fast_upstream import run_fast
from bench.loadgen import Target, build_request, run_load
from bench.otlp_sink import Sink
from bench.report import RESULTS_DIR, jsonable
from bench.run import (
    CHAINS,
    SLOW_MODEL,
    SURFACE_PATHS,
    Cell,
    Runner,
    build_parser,
    select_cells,
    surface_body,
)

ORDER = (0, 1, 1, 0, 0, 1)
"""Segments of one round, by tree: old new new old old new."""
TREES = ("old", "new")
WARMUP_REQUESTS = 300
CHAT_PATH = "/v1/chat/completions"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("old", type=Path, help="the tree measured first (a checkout of the project)")
    parser.add_argument("new", type=Path, help="the tree compared with it")
    parser.add_argument(
        "--cells", nargs="+", default=["20-nonstream-c64", "100-nonstream-c1"], metavar="GLOB"
    )
    parser.add_argument("--chains", nargs="+", choices=sorted(CHAINS), default=["worker", "passthrough"])
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per segment")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of old new new old old new")
    parser.add_argument(
        "--surfaces", action="store_true", help="each cell also as Responses and Messages requests"
    )
    parser.add_argument("--memory", type=int, default=0, help="slow-streams memory runs per tree")
    parser.add_argument("--slow-streams", type=int, default=1000, help="concurrent streams per memory run")
    parser.add_argument("--slow-chunk-delay-ms", type=float, default=500.0)
    parser.add_argument("--no-pin", action="store_true", help="do not pin processes to cores")
    parser.add_argument("--results", type=Path, default=RESULTS_DIR)
    parser.add_argument("--telemetry", action="store_true", help="telemetry.enabled in the config; a sink")
    parser.add_argument("--sink-delay-s", type=float, default=0.0, help="the sink answers after this long")
    parser.add_argument(
        "--env-old", nargs="*", default=[], metavar="K=V", help="environment of the old proxy"
    )
    parser.add_argument(
        "--env-new", nargs="*", default=[], metavar="K=V", help="environment of the new proxy"
    )
    args = parser.parse_args(argv)
    for tree in (args.old, args.new):
        if not (tree / procs.package_of(tree) / "__main__.py").is_file():
            parser.error(f"{tree} does not hold the project (no history_proxy/__main__.py)")
    return args


def enable_telemetry(config_path: Path) -> None:
    config = yaml.safe_load(config_path.read_text())
    config_path.write_text(yaml.safe_dump({**config, "telemetry": {"enabled": True}}, sort_keys=False))


@contextlib.contextmanager
def environment(pairs: list[str], sink: str) -> Iterator[None]:
    """``os.environ`` with ``pairs`` (``K=V``, ``{sink}`` replaced) set while a proxy starts."""
    given = dict(pair.split("=", 1) for pair in pairs)
    saved = {name: os.environ.get(name) for name in given}
    os.environ.update({name: value.replace("{sink}", sink) for name, value in given.items()})
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def runner_args(args: argparse.Namespace) -> argparse.Namespace:
    """``bench.run``'s settings with this run's segment length and slow-stream pacing."""
    settings = build_parser().parse_args(["--no-pin"] if args.no_pin else [])
    settings.duration = args.seconds
    settings.slow_chunk_delay_ms = args.slow_chunk_delay_ms
    return settings


async def throughput(
    runner: Runner, ports: list[int], started: list[procs.Started], args: argparse.Namespace
) -> list[dict[str, Any]]:
    """Each cell and chain: segments of both proxies in the order :data:`ORDER`, medians per tree."""
    rows = []
    paths = [CHAT_PATH, *(SURFACE_PATHS if args.surfaces else ())]
    for cell in select_cells(args.cells):
        for chain in args.chains:
            for path in paths:
                row = await compare_cell(runner, ports, started, args, cell, chain, path)
                rows.append(row)
                print(format_row(row), flush=True)
    return rows


async def compare_cell(
    runner: Runner,
    ports: list[int],
    started: list[procs.Started],
    args: argparse.Namespace,
    cell: Cell,
    chain: str,
    path: str,
) -> dict[str, Any]:
    """One cell, chain and surface: segments of both proxies in the order :data:`ORDER`, medians per tree."""
    spec = CHAINS[chain]
    chat = synthetic_body(cell.messages, stream=cell.stream, model=spec["model"])
    body = encode(chat if path == CHAT_PATH else surface_body(path, chat))
    targets = [
        Target(f"{tree}/{chain}", procs.LOOPBACK, port, path=path, headers=spec["headers"])
        for tree, port in zip(TREES, ports, strict=True)
    ]
    requests = [build_request(target, body) for target in targets]
    segments: list[list[dict[str, Any]]] = [[], []]
    for _ in range(args.rounds):
        for index in ORDER:
            target, request, proxy = targets[index], requests[index], started[index]
            await run_load(
                target,
                [request],
                concurrency=cell.concurrency,
                max_requests=WARMUP_REQUESTS,
                max_seconds=0.5,
                timeout_s=30,
            )
            pids = procs.descendants(proxy.process.pid)
            summary = await runner.segment(target, request, proxy, pids, cell.concurrency, warmup=0)
            segments[index].append(summary)
    surface = path.removeprefix("/v1/")
    row: dict[str, Any] = {"cell": cell.id, "chain": chain, "surface": surface}
    for tree, runs in zip(TREES, segments, strict=True):
        row[tree] = {
            "rps": statistics.median(s["throughput_rps"] for s in runs),
            "p50_ms": statistics.median(s["p50_ms"] for s in runs),
            "p99_ms": statistics.median(s["p99_ms"] for s in runs),
            "cpu_ms_per_request": statistics.median(s["cpu_ms_per_request"] for s in runs),
            "errors": sum(s["errors"] for s in runs),
            "segments": len(runs),
        }
    return row


async def memory(
    runner: Runner, trees: list[Path], cpus: set[int] | None, args: argparse.Namespace
) -> dict[str, list[dict[str, Any]]]:
    """Peak RSS of ``--slow-streams`` concurrent streams, a fresh proxy per run, trees alternating."""
    spec = CHAINS["worker"]
    warm_body = encode(synthetic_body(20, stream=False, model=spec["model"]))
    slow_body = encode(synthetic_body(20, stream=True, model=SLOW_MODEL))
    peaks: dict[str, list[dict[str, Any]]] = {tree: [] for tree in TREES}
    for run in range(args.memory):
        order = (0, 1) if run % 2 == 0 else (1, 0)
        for index in order:
            port = procs.free_port()
            name = f"proxy-{TREES[index]}-memory-{run}"
            with runner.proxy_running(name, port, trees[index], cpus) as started:
                target = Target(f"{TREES[index]}/slow", procs.LOOPBACK, port, headers=spec["headers"])
                warm = build_request(target, warm_body)
                await run_load(
                    target, [warm], concurrency=8, max_requests=WARMUP_REQUESTS, max_seconds=2, timeout_s=30
                )
                pids = procs.descendants(started.process.pid)
                count = args.slow_streams
                request = build_request(target, slow_body)
                summary = await runner.segment(
                    target, request, started, pids, count, warmup=0, max_requests=count
                )
                peak_kb = max(summary["rss_peak_kb"], procs.memory_kb(pids, "VmHWM"))
                peaks[TREES[index]].append(
                    {"rss_peak_mb": peak_kb / 1024, "ok": summary["ok"], "errors": summary["errors"]}
                )
        figures = ", ".join(
            f"{tree} {peaks[tree][-1]['rss_peak_mb']:.0f} MB ({peaks[tree][-1]['ok']} streams whole, "
            f"{peaks[tree][-1]['errors']} errors)"
            for tree in TREES
        )
        print(f"memory run {run + 1}: {figures}", flush=True)
    return peaks


def format_row(row: dict[str, Any]) -> str:
    cells = [f"{row['cell']} {row['chain']} {row.get('surface', 'chat/completions')}"]
    for tree in TREES:
        figures = row[tree]
        cells.append(
            f"{figures['rps']:.0f} rps, p50 {figures['p50_ms']:.2f} ms, p99 {figures['p99_ms']:.2f} ms, "
            f"CPU {figures['cpu_ms_per_request']:.3f} ms, {figures['errors']} errors"
        )
    return "| " + " | ".join(cells) + " |"


def speaks_gemini(tree: Path) -> bool:
    """Whether the tree has the Gemini surface (``api: google`` upstreams; trees before issue 36 refuse them)."""
    return any((tree / package / "surfaces" / "gemini.py").exists() for package in ("history_proxy", "proxy"))


def without_google(config_path: Path) -> None:
    """The benchmark config less its ``api: google`` upstreams and their routes (compare sends no
    Gemini request; an older tree would refuse the config)."""
    config = yaml.safe_load(config_path.read_text())
    google = {name for name, upstream in config["upstreams"].items() if upstream.get("api") == "google"}
    config["upstreams"] = {name: u for name, u in config["upstreams"].items() if name not in google}
    config["routes"] = [route for route in config["routes"] if route["upstream"] not in google]
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    settings = runner_args(args)
    procs.raise_fd_limit(4 * max(args.slow_streams, 64) + 256)
    trees = [args.old.resolve(), args.new.resolve()]
    began = time.time()
    with procs.terminate_on_sigterm(), contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="history-proxy-compare-")))
        runner = Runner(settings, workdir, stack)
        cpus, _ = runner.start_upstreams()
        sink = stack.enter_context(Sink(args.sink_delay_s)) if args.telemetry else None
        if sink is not None:
            enable_telemetry(runner.config_path)
        if not all(speaks_gemini(tree) for tree in trees):
            without_google(runner.config_path)
        ports = [procs.free_port() for _ in trees]
        started = []
        for tree, port, path, env in zip(TREES, ports, trees, (args.env_old, args.env_new), strict=True):
            with environment(env, sink.url if sink else ""):
                started.append(runner.start_proxy(f"proxy-{tree}", port, path, cpus))
        print(f"old: {trees[0]}\nnew: {trees[1]}\n{runner.pinning}\n", flush=True)
        print("| cell, chain, surface | old | new |\n|---|---|---|", flush=True)
        rows = run_fast(throughput(runner, ports, started, args))
        peaks = run_fast(memory(runner, trees, cpus, args)) if args.memory > 0 else {}
    described = {tree: procs.machine_description(path) for tree, path in zip(TREES, trees, strict=True)}
    result = {
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(began)),
        "trees": {"old": str(trees[0]), "new": str(trees[1])},
        "order": " ".join(TREES[i] for i in ORDER),
        "pinning": runner.pinning,
        "segment_seconds": args.seconds,
        "rounds": args.rounds,
        **described["new"],
        "commits": {tree: description.get("commit") for tree, description in described.items()},
        "rows": rows,
        "memory": peaks,
    }
    args.results.mkdir(parents=True, exist_ok=True)
    path = args.results / f"compare-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(began))}.json"
    path.write_text(json.dumps(jsonable(result), indent=2) + "\n")
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
