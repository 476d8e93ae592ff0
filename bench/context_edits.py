"""CPU of the emulated Messages context edits, in process (docs/surfaces.md, context standards).

``python -m bench.context_edits [--calls N] [--runs R]`` builds a Claude Code-shaped tool loop of N
calls (each an assistant message with a signed thinking block and a ``tool_use``, and its
``tool_result``), and prints the median milliseconds over R runs of
:func:`history_proxy.surfaces.context_management.manage` in ``emulate`` mode for: a request without
the field, Claude Code's own edit (``clear_thinking`` keeping all), and ``clear_thinking`` plus a
triggered ``clear_tool_uses`` that clears all but 3 results; then the microseconds of the answer's
``message_delta`` rewrite (:class:`history_proxy.surfaces.context_answer.AppliedEdits`).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from history_proxy.core.tokens import TokenCounters
from history_proxy.surfaces.context_answer import AppliedEdits
from history_proxy.surfaces.context_management import manage
from history_proxy.surfaces.edit_common import EditInput

DELTA = (
    b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},'
    b'"usage":{"output_tokens":12}}\n\n'
)


def tool_loop(calls: int) -> list[dict[str, Any]]:
    """A Claude Code-shaped conversation of ``calls`` tool calls, each with a signed thinking block."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing test."}]
    for n in range(calls):
        thinking = {"type": "thinking", "thinking": f"step {n}: " + "reasoning " * 20, "signature": f"sig{n}"}
        use = {"type": "tool_use", "id": f"toolu_{n}", "name": "Read", "input": {"file_path": f"/src/{n}.py"}}
        result = {
            "type": "tool_result",
            "tool_use_id": f"toolu_{n}",
            "content": f"{n}: " + "line of code\n" * 40,
        }
        messages += [{"role": "assistant", "content": [thinking, use]}, {"role": "user", "content": [result]}]
    return messages


def median_ms(run: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        run()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.context_edits", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--calls", type=int, default=200, help="tool calls in the conversation (default 200)")
    parser.add_argument(
        "--runs", type=int, default=50, help="runs per case; the median is printed (default 50)"
    )
    args = parser.parse_args(argv)
    counter = TokenCounters().get(model="claude-sonnet-4-6")
    messages = tool_loop(args.calls)

    def env(_: dict[str, Any]) -> EditInput:
        return EditInput(input_tokens=200_000, tokens=counter.text, thinking=True)

    cases = {
        "no context_management": None,
        "clear_thinking keep all (Claude Code)": [{"type": "clear_thinking_20251015", "keep": "all"}],
        "clear_thinking + clear_tool_uses (clearing)": [
            {"type": "clear_thinking_20251015"},
            {"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 1000}},
        ],
    }
    print(f"{len(messages)} messages, median of {args.runs} runs")
    for name, edits in cases.items():
        body: dict[str, Any] = {"model": "claude-sonnet-4-6", "max_tokens": 1024, "messages": messages}
        if edits is not None:
            body["context_management"] = {"edits": edits}
        manage(body, "emulate", env)  # warm the counter's cache, as a conversation's next turn finds it

        def run(body: dict[str, Any] = body) -> object:
            return manage(body, "emulate", env)

        print(f"  {name}: {median_ms(run, args.runs):.3f} ms")
    rewrite = AppliedEdits({"applied_edits": []})
    per_event = median_ms(lambda: [rewrite.piece(DELTA) for _ in range(1000)], args.runs)
    print(f"  message_delta rewrite: {per_event:.3f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
