"""Same-run A/B of the performance tricks that reach into private attributes of pydantic and tiktoken.

A trick stays only where it gains at least 5 % (docs/performance.md lists the survivors with these
figures). ``python -m bench.tricks [--rounds N]`` measures, interleaved in one run:

- ``Filter.private(name)`` (reads ``__pydantic_private__`` directly) against ``getattr(self, name)``
  (pydantic's ``__getattr__``), through ``remove_regex`` and ``last_n_observations`` on a
  100-message conversation: CPU per ``apply``;
- ``release_rank_table`` (drops tiktoken's Python copy of the merge table once the encoding is
  built) against keeping it: the resident memory of a fresh process that loads ``o200k_base`` and
  ``cl100k_base``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from bench.bodies import synthetic_body
from history_proxy.filters.base import Filter, FilterContext
from history_proxy.filters.last_n_observations import LastNObservations
from history_proxy.filters.remove_regex import RemoveRegex

_RSS_PROBE = """
import resource, sys
import history_proxy.core.encodings as encodings
if sys.argv[1] == "keep":
    encodings.release_rank_table = lambda encoding: None
from history_proxy.core.tokens import TokenCounters
counters = TokenCounters()
counters.get(model="gpt-4o", encoding="auto", tokenizer="tiktoken").text("warm up")
counters.get(model="gpt-4", encoding="auto", tokenizer="tiktoken").text("warm up")
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


@contextmanager
def plain_private_reads() -> Iterator[None]:
    """Filters read private attributes through pydantic's ``__getattr__`` instead of the trick."""
    trick = Filter.private
    Filter.private = lambda self, name: getattr(self, name)  # type: ignore[method-assign]
    try:
        yield
    finally:
        Filter.private = trick  # type: ignore[method-assign]


def cpu_per_call_us(call: Callable[[], Any], repeats: int) -> float:
    started = time.process_time()
    for _ in range(repeats):
        call()
    return (time.process_time() - started) / repeats * 1e6


def private_reads(rounds: int, repeats: int) -> dict[str, dict[str, float]]:
    messages = synthetic_body(100)["messages"]
    ctx = FilterContext(role="worker")
    filters: dict[str, Filter] = {
        "remove_regex": RemoveRegex(type="remove_regex", remove=["sk-[A-Za-z0-9]{20,}", "AKIA[0-9A-Z]{16}"]),
        "last_n_observations": LastNObservations(type="last_n_observations", n=5, polling=5),
    }
    figures: dict[str, dict[str, list[float]]] = {name: {"trick": [], "plain": []} for name in filters}
    for _ in range(rounds):
        for order in (("trick", "plain"), ("plain", "trick")):
            for variant in order:
                for name, chain_filter in filters.items():

                    def apply(f: Filter = chain_filter) -> Any:
                        return f.apply(messages, ctx)

                    if variant == "plain":
                        with plain_private_reads():
                            figures[name][variant].append(cpu_per_call_us(apply, repeats))
                    else:
                        figures[name][variant].append(cpu_per_call_us(apply, repeats))
    return {
        name: {variant: statistics.median(values) for variant, values in variants.items()}
        for name, variants in figures.items()
    }


def rank_table_rss(rounds: int) -> dict[str, float]:
    found: dict[str, list[float]] = {"trick": [], "plain": []}
    for _ in range(rounds):
        for variant, argument in (
            ("trick", "release"),
            ("plain", "keep"),
            ("plain", "keep"),
            ("trick", "release"),
        ):
            out = subprocess.run(
                [sys.executable, "-c", _RSS_PROBE, argument], capture_output=True, text=True, check=True
            )
            found[variant].append(int(out.stdout.strip()) / 1024)
    return {variant: statistics.median(values) for variant, values in found.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=300)
    args = parser.parse_args(argv)
    print("trick                                   with trick   without   gain")
    for name, figures in private_reads(args.rounds, args.repeats).items():
        gain = 1 - figures["trick"] / figures["plain"]
        print(
            f"Filter.private via {name:<20} {figures['trick']:8.1f} us {figures['plain']:8.1f} us  {gain:6.1%}"
        )
    rss = rank_table_rss(max(1, args.rounds // 2))
    gain = 1 - rss["trick"] / rss["plain"]
    print(
        f"release_rank_table (peak RSS)           {rss['trick']:8.1f} MB {rss['plain']:8.1f} MB  {gain:6.1%}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
