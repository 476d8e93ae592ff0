"""How long other clients wait while the proxy takes one huge request (issue 26, N2).

    python -m bench.stall TREE SIZE [SIZE ...]

Serves TREE (a checkout) with a separate `history-proxy mock-upstream` process on loopback, sends one
request of SIZE characters of ``a`` to `/v1/history/preview` and then to `/v1/chat/completions`, and
probes `/healthz` every 10 ms meanwhile; prints the worst probe wait and the request's own time. The
probe shares this process with the sender, whose body is encoded before the probing starts (its
encoding was in the worst wait before 2026-12-02).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(url: str) -> None:
    for _ in range(300):
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)


def probe(url: str, path: str, size: int) -> str:
    """The worst /healthz wait while one request of ``size`` characters of ``a`` is answered."""
    done = threading.Event()
    status: list[int] = []
    payload = {"model": "gpt-4o", "messages": [{"role": "user", "content": "a" * size}]}
    raw = json.dumps(payload).encode()

    def send() -> None:
        headers = {"content-type": "application/json"}
        status.append(httpx.post(f"{url}{path}", content=raw, headers=headers, timeout=600).status_code)
        done.set()

    started = time.perf_counter()
    thread = threading.Thread(target=send)
    thread.start()
    time.sleep(0.1)
    worst, probes = 0.0, 0
    while not done.is_set():
        at = time.perf_counter()
        httpx.get(f"{url}/healthz", timeout=600)
        worst, probes = max(worst, time.perf_counter() - at), probes + 1
        time.sleep(0.01)
    thread.join()
    took = time.perf_counter() - started
    return f"{size} {path} {status}: healthz worst {worst:.3f} s over {probes} probes, request {took:.2f} s"


def main() -> None:
    tree, sizes = sys.argv[1], [int(size) for size in sys.argv[2:]]
    upstream, port = free_port(), free_port()
    env = {"PYTHONPATH": tree, "PATH": "/usr/bin:/bin"}
    quiet = {"cwd": tree, "env": env, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    mock = subprocess.Popen(
        [sys.executable, "-m", "history_proxy", "mock-upstream", "--port", str(upstream)], **quiet
    )  # type: ignore[call-overload]
    config = Path(tempfile.mkdtemp()) / "config.yaml"
    config.write_text(f'upstreams:\n  openai: {{base_url: "http://127.0.0.1:{upstream}/v1"}}\n')
    serve = [sys.executable, "-m", "history_proxy", "serve", "--config", str(config), "--port", str(port)]
    proxy = subprocess.Popen(serve, **quiet)  # type: ignore[call-overload]
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url)
        for size in sizes:
            for path in ("/v1/history/preview", "/v1/chat/completions"):
                print(tree, probe(url, path, size), flush=True)
    finally:
        proxy.terminate()
        mock.terminate()


if __name__ == "__main__":
    main()
