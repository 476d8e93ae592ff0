"""Large request bodies are parsed, and their new long strings tokenized, off the event loop.

Counting tokens is the proxy's heaviest work per byte (tiktoken: ~6 MB/s of prose here). Done on
the event loop, one 30 MB body held every other client and tenant for seconds. Two measures:

- :func:`read_request` joins and parses a body of :data:`PARSE_OFF_LOOP_BYTES` or more in a worker
  thread, one top-level element per call past :data:`history_proxy.server.body.PARSE_IN_STEPS_BYTES`.
- :func:`counted_off_loop` runs a request's shaping with a budget of :data:`LOOP_CHARS` characters
  to tokenize on the loop (:data:`history_proxy.core.string_counts.LOOP_BUDGET`). A request that needs more
  (new long texts: a large tool output, a hostile run of one character) stops at once
  (``CountLater``); its long strings (and the call arguments the Messages view makes of ``tool_use``
  inputs) are counted in a worker thread (tiktoken releases the GIL) into the shared count cache,
  and the shaping runs again, finding them counted. The sender waits for its own counting; the loop
  serves everyone else meanwhile. A request whose new text fits the budget (an agent's usual turn)
  never leaves the loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from history_proxy.core.string_counts import LOOP_BUDGET, CountLater
from history_proxy.core.tokens import TokenCounter, TokenCounters
from history_proxy.server.body import (
    joined,
    parse_body,
    parse_pieces,
    read_pieces,
)
from history_proxy.server.edge import Call
from history_proxy.surfaces.messages import tool_use_arguments

T = TypeVar("T")
PARSE_OFF_LOOP_BYTES = 1024 * 1024
"""Bodies at least this large are parsed in a worker thread."""
LOOP_CHARS = 32 * 1024
"""Characters a request may tokenize on the event loop (about 5 ms) before the rest goes to a thread."""
LONG_STRING = 256
"""Strings at least this long are counted in the worker thread (shorter ones cost microseconds)."""
WORKERS = 2
"""Threads parsing and counting (per process): a flood of huge bodies queues here, not on the loop."""

_executor: ThreadPoolExecutor | None = None


async def read_request(call: Call, history: str = "messages") -> dict[str, Any]:
    """The request body as a JSON object (413/400 as :func:`parse_body`, naming the surface's ``history``
    field), parsed off the loop when large."""
    limits = call.state.config.limits
    pieces = await read_pieces(call.headers, call.stream(), limits.max_body_bytes)
    if sum(map(len, pieces)) < PARSE_OFF_LOOP_BYTES:
        return parse_body(joined(pieces), limits.max_json_containers, history)
    # joined too in the thread: a copy of tens of megabytes is itself a wait for the loop
    return await asyncio.get_running_loop().run_in_executor(
        _workers(), parse_pieces, pieces, limits.max_json_containers, history
    )


async def counted_off_loop(shaping: Callable[[], Awaitable[T]], body: Any, tokens: TokenCounters) -> T:
    """``await shaping()`` with at most :data:`LOOP_CHARS` tokenized on the loop; past that, the
    body's long strings are counted in a worker thread and ``shaping`` runs again (unbudgeted)."""
    budget = LOOP_BUDGET.set([LOOP_CHARS])
    try:
        return await shaping()
    except CountLater:
        pass
    finally:
        LOOP_BUDGET.reset(budget)
    model = body.get("model") if isinstance(body, dict) else None
    counter = tokens.get(model=model if isinstance(model, str) else "")
    counted = await asyncio.get_running_loop().run_in_executor(_workers(), _count_long_strings, body, counter)
    for text, count in counted:
        counter.keep(text, count)
    return await shaping()


def _workers() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(WORKERS, thread_name_prefix="history-proxy-count")
    return _executor


def _count_long_strings(body: Any, counter: TokenCounter) -> list[tuple[str, int]]:
    """Every long string in ``body`` not yet counted, with its tokens (run in a worker thread)."""
    length = counter.length
    found: dict[str, int] = {}
    for text in _long_strings(body):
        if text not in found and not counter.remembers(text):
            found[text] = length(text)
    return list(found.items())


def _long_strings(body: Any) -> list[str]:
    out: list[str] = []
    stack = [body]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            if len(value) >= LONG_STRING:
                out.append(value)
        elif isinstance(value, dict):
            if value.get("type") == "tool_use" and "input" in value:
                arguments = tool_use_arguments(value["input"])
                if len(arguments) >= LONG_STRING:
                    out.append(arguments)
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return out
