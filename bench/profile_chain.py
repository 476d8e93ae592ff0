"""The worker chain alone, in process (no HTTP): what the token-count cache saves, and where time goes.

``python -m bench.profile_chain [--repeats N] [--cprofile]`` prints two tables and writes
``bench/results/chain-<UTC stamp>.json``:

1. replay: every corpus conversation replayed request by request as the agent grew it; the median
   ``Pipeline.run`` time per request with one shared ``TokenCounters`` for the whole replay (the
   proxy's per-string count cache: only new messages are tokenized) and with a fresh one per request
   (no cache), plus how many strings each request had to tokenize;
2. breakdown: per body (synthetic 20/100/400 messages and the largest corpus bodies) the median of
   parse (the proxy's ``parse_body`` of the request bytes), chain (``Pipeline.run``, warm and cold
   cache) and serialise (the proxy's ``encode_json`` of the forwarded body).

Every request body is parsed fresh from bytes before it is timed, as the proxy does, so cached
counts are looked up with newly built strings.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

from bench.bodies import SIZES, corpus_bodies, encode, replay_prefixes, synthetic_body
from bench.report import RESULTS_DIR, jsonable
from history_proxy.config.loading import parse_config
from history_proxy.config.models import Config
from history_proxy.core.identity import Identity
from history_proxy.core.tokens import TokenCounters
from history_proxy.pipeline.run import Pipeline
from history_proxy.server.body import encode_json, parse_body

T = TypeVar("T")
WORKER = Identity(role="worker", agent="coder")
WORKER_CHAIN = [
    {"type": "worker_view"},
    {"type": "last_n_observations", "n": 5, "polling": 5},
    {"type": "token_limiter", "limit": 30000, "step": 4},
]
UPSTREAM = "cached"


def worker_config() -> Config:
    """The realistic worker chain, routed to an upstream that takes cache marks (never contacted)."""
    return parse_config(
        {
            "upstreams": {UPSTREAM: {"base_url": "http://127.0.0.1:9/v1", "cache_control": True}},
            "policies": {"roles": {"worker": WORKER_CHAIN}},
            "cache_control": {"last_n_messages": 2},
        }
    )


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Drive a coroutine that never really waits (the chain without ``summarize``) without a loop."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coroutine.close()
    raise RuntimeError("the chain awaited real I/O; profile_chain only measures filters that do not")


def timed_request(config: Config, counters: TokenCounters, raw: bytes) -> dict[str, float]:
    """Parse, run the chain and serialise one request; milliseconds of each and strings tokenized."""
    pipeline = Pipeline(config, counters)
    counter = counters.get(model=json.loads(raw).get("model", ""))
    misses_before = counter.misses
    t0 = time.perf_counter()
    body = parse_body(raw)
    t1 = time.perf_counter()
    result = run_sync(pipeline.run(body, WORKER, UPSTREAM))
    t2 = time.perf_counter()
    encode_json(result.body)
    t3 = time.perf_counter()
    return {
        "parse_ms": (t1 - t0) * 1000,
        "chain_ms": (t2 - t1) * 1000,
        "serialise_ms": (t3 - t2) * 1000,
        "tokenized": float(counter.misses - misses_before),
    }


def replay(config: Config, name: str, body: dict[str, Any], repeats: int) -> dict[str, Any]:
    """One conversation replayed ``repeats`` times with and without the shared cache."""
    requests = [encode({**body, "messages": prefix}) for prefix in replay_prefixes(body["messages"])]
    with_cache: list[list[dict[str, float]]] = []
    without: list[list[dict[str, float]]] = []
    for _ in range(repeats):
        shared = TokenCounters()
        with_cache.append([timed_request(config, shared, raw) for raw in requests])
        without.append([timed_request(config, TokenCounters(), raw) for raw in requests])

    def per_request(runs: list[list[dict[str, float]]], key: str) -> list[float]:
        return [statistics.median(run[i][key] for run in runs) for i in range(len(requests))]

    cached_ms, cold_ms = per_request(with_cache, "chain_ms"), per_request(without, "chain_ms")
    return {
        "conversation": name,
        "requests": len(requests),
        "final_messages": len(body["messages"]),
        "chain_ms_median_with_cache": statistics.median(cached_ms),
        "chain_ms_median_without_cache": statistics.median(cold_ms),
        "chain_ms_total_with_cache": sum(cached_ms),
        "chain_ms_total_without_cache": sum(cold_ms),
        "strings_tokenized_median_with_cache": statistics.median(per_request(with_cache, "tokenized")),
        "strings_tokenized_median_without_cache": statistics.median(per_request(without, "tokenized")),
        "chain_ms_per_request_with_cache": cached_ms,
        "chain_ms_per_request_without_cache": cold_ms,
    }


def breakdown(config: Config, name: str, body: dict[str, Any], repeats: int) -> dict[str, Any]:
    """Median parse / chain / serialise of one body, warm (shared cache) and cold (fresh cache)."""
    raw = encode(body)
    shared = TokenCounters()
    timed_request(config, shared, raw)  # fill the cache once: later runs are the steady state
    warm = [timed_request(config, shared, raw) for _ in range(repeats)]
    cold = [timed_request(config, TokenCounters(), raw) for _ in range(max(1, repeats // 3))]
    result = run_sync(Pipeline(config, shared).run(json.loads(raw), WORKER, UPSTREAM))
    return {
        "body": name,
        "bytes": len(raw),
        "messages": len(body["messages"]),
        "messages_after": len(result.body["messages"]),
        "parse_ms": statistics.median(r["parse_ms"] for r in warm),
        "chain_ms_warm": statistics.median(r["chain_ms"] for r in warm),
        "chain_ms_cold": statistics.median(r["chain_ms"] for r in cold),
        "serialise_ms": statistics.median(r["serialise_ms"] for r in warm),
        "filters_ms": {f"{f['type']}": f["ms"] for f in result.report.get("filters", [])},
    }


def cprofile_text(config: Config, messages: int, runs: int, top: int = 25) -> str:
    """cProfile (CPU time) of ``runs`` warm ``Pipeline.run`` calls on a synthetic body, by own time."""
    raw = encode(synthetic_body(messages, model="bench-cached"))
    counters = TokenCounters()
    timed_request(config, counters, raw)
    bodies = [json.loads(raw) for _ in range(runs)]
    pipeline = Pipeline(config, counters)
    profiler = cProfile.Profile(time.process_time)
    profiler.enable()
    for body in bodies:
        run_sync(pipeline.run(body, WORKER, UPSTREAM))
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def _table(rows: list[dict[str, Any]], columns: list[tuple[str, str, str]]) -> str:
    head = "| " + " | ".join(title for _, title, _ in columns) + " |"
    rule = "|" + "|".join("---" if fmt == "s" else "---:" for _, _, fmt in columns) + "|"
    body = ["| " + " | ".join(format(row[key], fmt) for key, _, fmt in columns) + " |" for row in rows]
    return "\n".join([head, rule, *body])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.profile_chain", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--repeats", type=int, default=3, help="replays / runs per body (median taken)")
    parser.add_argument(
        "--max-seconds", type=float, default=300.0, help="stop replaying new conversations after this"
    )
    parser.add_argument(
        "--largest", type=int, default=5, help="corpus bodies in the breakdown, largest first"
    )
    parser.add_argument(
        "--cprofile",
        type=int,
        default=0,
        metavar="MESSAGES",
        help="also print a cProfile of warm Pipeline.run on a synthetic body of this size (e.g. 100)",
    )
    parser.add_argument("--no-write", action="store_true", help="print only, write no result file")
    args = parser.parse_args(argv)
    repeats = max(1, min(50, args.repeats))
    config = worker_config()
    TokenCounters().get(model="bench-cached")  # load the encoding before anything is timed
    corpus = corpus_bodies()
    deadline = time.monotonic() + max(1.0, args.max_seconds)
    replays: list[dict[str, Any]] = []
    for name, body in corpus.items():
        if time.monotonic() > deadline:
            print(f"(stopped after {len(replays)} conversations: --max-seconds reached)")
            break
        replays.append(replay(config, name, body, repeats))
    print("Replay (worker chain per request, ms; strings = strings tokenized per request):")
    print(
        _table(
            replays,
            [
                ("conversation", "conversation", "s"),
                ("requests", "requests", "d"),
                ("chain_ms_median_with_cache", "median with cache", ".3f"),
                ("chain_ms_median_without_cache", "median without", ".3f"),
                ("strings_tokenized_median_with_cache", "strings with", ".0f"),
                ("strings_tokenized_median_without_cache", "strings without", ".0f"),
            ],
        )
    )
    bodies = {f"synthetic-{n}": synthetic_body(n, model="bench-cached") for n in SIZES}
    largest = sorted(corpus.items(), key=lambda item: -len(encode(item[1])))[: max(0, args.largest)]
    bodies.update({name: body for name, body in largest})
    parts = [breakdown(config, name, body, max(3, repeats * 3)) for name, body in bodies.items()]
    print("\nBreakdown (median ms; chain warm = counts cached, cold = fresh counters):")
    print(
        _table(
            parts,
            [
                ("body", "body", "s"),
                ("bytes", "bytes", "d"),
                ("messages", "messages", "d"),
                ("messages_after", "after", "d"),
                ("parse_ms", "parse", ".3f"),
                ("chain_ms_warm", "chain warm", ".3f"),
                ("chain_ms_cold", "chain cold", ".3f"),
                ("serialise_ms", "serialise", ".3f"),
            ],
        )
    )
    profile = cprofile_text(config, args.cprofile, 50) if args.cprofile else ""
    if profile:
        print(
            f"\ncProfile, 50 warm Pipeline.run calls on a {args.cprofile}-message body (CPU time):\n{profile}"
        )
    if not args.no_write:
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        path = RESULTS_DIR / f"chain-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
        path.write_text(
            json.dumps(
                jsonable(
                    {"worker_chain": WORKER_CHAIN, "replay": replays, "breakdown": parts, "cprofile": profile}
                ),
                indent=2,
            )
            + "\n"
        )
        print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
