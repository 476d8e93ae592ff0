"""Each surface's cost in the proxy, in process: parse, chain over the view, write back, encode.

``python -m bench.surfaces [--repeats N]`` writes the synthetic agent conversations of ``bench.bodies``
(20, 100 and 400 messages) as chat-completions, Responses, Messages and Gemini ``generateContent``
requests (with a reasoning item or a signed thinking block on a third of the assistant steps of the
Responses and Messages ones), and times, interleaved in one
run, what the proxy does to each before it forwards it: ``parse_body`` of the request bytes, the
caller's chain (``shape``: the view, ``Pipeline.run``, the native rebuild) and ``encode_json`` of
the body sent. Two ways, for the ``passthrough`` and ``worker`` chains:

- ``next turn``: as in an agent loop, each timed request follows (untimed) the same conversation's
  previous turn (the history before its last assistant step), on every surface; a serving proxy's
  view memo (``history_proxy.surfaces.memo``) then converts only the new step;
- ``cold``: no memo (a conversation's first request, or ``limits.surface_memo_messages: 0``).

It prints the median per request and each surface's ratio to chat completions measured in the same
run, and writes ``bench/results/surfaces-<UTC stamp>.json``. The HTTP around it (reading, relaying)
is the same code for all three surfaces.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

from bench.bodies import SIZES, encode, synthetic_messages
from bench.report import RESULTS_DIR, jsonable
from history_proxy.config.models import Config, LimitsConfig
from history_proxy.core.identity import Identity
from history_proxy.core.messages import Message
from history_proxy.core.tokens import TokenCounters
from history_proxy.pipeline.run import Pipeline
from history_proxy.server.body import encode_json, parse_body
from history_proxy.surfaces.memo import ViewMemo
from history_proxy.surfaces.shape import SurfaceName, shape
from tests.surface_bodies import anthropic_chat, gemini_body, messages_body, plain_chat, responses_body

WORKER_CHAIN: list[dict[str, Any]] = [
    {"type": "worker_view"},
    {"type": "last_n_observations", "n": 5, "polling": 5},
    {"type": "token_limiter", "limit": 30000, "step": 4},
]
SURFACES: tuple[SurfaceName, ...] = ("chat", "responses", "messages", "gemini")
MODES = ("next turn", "cold")
EXTRAS = [1, 0, 0]


def bodies(chat: list[Message]) -> dict[SurfaceName, bytes]:
    """One conversation as a request of each surface."""
    return {
        "chat": encode({"model": "gpt-4o", "messages": plain_chat(chat)}),
        "responses": encode(responses_body(plain_chat(chat), EXTRAS)),
        "messages": encode({**messages_body(anthropic_chat(chat), EXTRAS), "model": "gpt-4o"}),
        "gemini": encode(gemini_body(chat)),  # the model is in the path: shape() is told it
    }


def previous_turn(chat: list[Message]) -> list[Message]:
    """The conversation before its last assistant step (the request the agent sent one turn earlier)."""
    last = max(i for i, message in enumerate(chat) if message["role"] == "assistant")
    return chat[:last]


def pipeline(chain: list[dict[str, Any]]) -> Pipeline:
    config = Config.model_validate(
        {
            "upstreams": {"u": {"base_url": "mock://", "cache_control": True}},
            "cache_control": {},
            "policies": {"roles": {"worker": chain}},
        }
    )
    return Pipeline(config, TokenCounters())


async def once(p: Pipeline, surface: SurfaceName, raw: bytes, who: Identity, memo: ViewMemo | None) -> float:
    started = time.perf_counter()
    body = parse_body(raw)
    shaped = await shape(surface, p, body, who, "u", memo, model="gpt-4o" if surface == "gemini" else None)
    encode_json(shaped.body)
    return (time.perf_counter() - started) * 1000


async def measure(repeats: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    who = Identity(role="worker", agent="coder")
    chains: tuple[tuple[str, list[dict[str, Any]]], ...] = (
        ("passthrough", [{"type": "passthrough"}]),
        ("worker", WORKER_CHAIN),
    )
    for chain_name, chain in chains:
        p = pipeline(chain)
        for size in SIZES:
            chat = synthetic_messages(size)
            raw, before = bodies(chat), bodies(previous_turn(chat))
            for mode in MODES:
                memo = ViewMemo(LimitsConfig().surface_memo_messages) if mode == "next turn" else None
                times: dict[SurfaceName, list[float]] = {s: [] for s in SURFACES}
                for surface in SURFACES:  # warm the token-count cache, as a serving proxy is
                    await once(p, surface, raw[surface], who, memo)
                for _ in range(repeats):
                    for surface in SURFACES:  # interleaved: drift hits every surface alike
                        if memo is not None:
                            await once(p, surface, before[surface], who, memo)
                        times[surface].append(await once(p, surface, raw[surface], who, memo))
                chat_ms = statistics.median(times["chat"])
                for surface in SURFACES:
                    ms = statistics.median(times[surface])
                    rows.append(
                        {
                            "chain": chain_name,
                            "messages": size,
                            "mode": mode,
                            "surface": surface,
                            "median_ms": round(ms, 3),
                            "vs_chat": round(ms / chat_ms, 3),
                        }
                    )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.surfaces", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repeats", type=int, default=50, help="timed requests per surface and body (default 50)"
    )
    args = parser.parse_args(argv)
    rows = asyncio.run(measure(args.repeats))
    print("| chain | messages | mode | surface | median ms | vs chat |")
    print("|---|---:|---|---|---:|---:|")
    for row in rows:
        print(
            f"| {row['chain']} | {row['messages']} | {row['mode']} | {row['surface']} "
            f"| {row['median_ms']:.3f} | {row['vs_chat']:.2f}x |"
        )
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out = RESULTS_DIR / f"surfaces-{stamp}.json"
    out.write_text(json.dumps(jsonable({"repeats": args.repeats, "rows": rows}), indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
