"""CPU per upstream answer of the lean transport's parser, in process, against another tree's.

``python -m bench.parse_cost OLD_TREE [--answers N] [--runs R]`` feeds a 20-event SSE answer (head
and events in separate reads, as they arrive) and a small JSON answer to this tree's
:class:`history_proxy.upstream.connection.Connection` and to ``OLD_TREE``'s, alternating runs, over a fake
socket (no I/O, no event loop turns), and prints the median microseconds per answer of each. It
isolates what a change to the parser costs from the proxy's other work and from a busy machine.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import time
from pathlib import Path
from typing import Any

from history_proxy.upstream.connection import Connection


class _Socket:
    def write(self, data: bytes) -> None: ...

    def writelines(self, data: Any) -> None: ...

    def close(self) -> None: ...

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def get_extra_info(self, name: str) -> None:
        return None


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


HEAD = (
    b"HTTP/1.1 200 OK\r\ndate: Tue, 24 Nov 2026 00:00:00 GMT\r\ncontent-type: text/event-stream\r\n"
    b"transfer-encoding: chunked\r\nx-request-id: req-1\r\nopenai-processing-ms: 12\r\n"
    b"cache-control: no-cache\r\n\r\n"
)
EVENTS = [
    _chunk(b'data: {"choices":[{"index":0,"delta":{"content":"piece %d "}}]}\n\n' % i) for i in range(20)
]
SSE = [HEAD + EVENTS[0], *EVENTS[1:], _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"]
BODY = b'{"id":"chatcmpl-1","object":"chat.completion","choices":[]}'
JSON = [
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\nx-request-id: req-1\r\n\r\n%b"
    % (len(BODY), BODY)
]


def _old_connection(tree: Path) -> type[Any]:
    spec = importlib.util.spec_from_file_location(
        "old_connection", tree / "history_proxy/upstream/connection.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Connection  # type: ignore[no-any-return]


def per_answer_us(kind: type[Any], reads: list[bytes], answers: int) -> float:
    loop = asyncio.new_event_loop()
    try:
        connection = kind(loop)
        connection.connection_made(_Socket())
        began = time.process_time()
        for _ in range(answers):
            connection.start(b"POST /v1/chat/completions HTTP/1.1\r\n\r\n", b"{}")
            for data in reads:
                connection.data_received(data)
            connection.chunks.clear()
            connection.buffered = 0
            if not connection.complete:
                raise SystemExit("the answer was not read whole")
        return (time.process_time() - began) / answers * 1e6
    finally:
        loop.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("old", type=Path, help="a checkout of the project to compare with")
    parser.add_argument("--answers", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    kinds = {"old": _old_connection(args.old), "new": Connection}
    for name, reads in (("SSE, 20 events", SSE), ("JSON, one read", JSON)):
        times: dict[str, list[float]] = {tree: [] for tree in kinds}
        for _ in range(args.runs):
            for tree, kind in kinds.items():
                times[tree].append(per_answer_us(kind, reads, args.answers))
        figures = ", ".join(f"{tree} {statistics.median(values):.2f} us" for tree, values in times.items())
        print(f"{name}: {figures} per answer (median of {args.runs} runs of {args.answers})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
