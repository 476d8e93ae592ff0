"""The real `history-proxy serve` (or `mock-upstream`) as a subprocess on a free loopback port."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT_S = 60


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


UPSTREAM_VARIABLES = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_UPSTREAM_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_UPSTREAM_URL",
    "HISTORY_PROXY_CONFIG",
    "HISTORY_PROXY_MOCK",
)
"""What the default config reads (keys, URLs, the mock switch): never inherited by a test's server."""


def offline_env(**extra: str) -> dict[str, str]:
    """The test's environment without any upstream key or URL, plus ``extra``. The default config then
    reaches the real providers, so a test serving it passes ``--mock`` (or sets its URLs to local ones)."""
    env = {k: v for k, v in os.environ.items() if k not in UPSTREAM_VARIABLES}
    return {**env, **extra}


@dataclass
class Server:
    """A `python -m history_proxy ...` subprocess listening on ``port``."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def wait_ready(self, path: str) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"server exited with {self.process.returncode} while starting:\n{self.output()}")
            try:
                if httpx.get(self.url + path, timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        pytest.fail(f"server not ready on {self.url}{path} after {STARTUP_TIMEOUT_S}s:\n{self.output()}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def start(*args: str, log: Path, ready_path: str, env: dict[str, str] | None = None) -> Iterator[Server]:
    """``python -m history_proxy ARGS --port P`` in the repository, ``env`` added to :func:`offline_env`."""
    port = free_port()
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "history_proxy", *args, "--port", str(port)],
            cwd=REPO,
            env=offline_env(**(env or {})),
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    server = Server(process, port, log)
    try:
        server.wait_ready(ready_path)
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def serving(path: Path, tmp_path: Path, *options: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``history-proxy serve`` of the file at ``path``, up and answering; its log in ``tmp_path``."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {k: v for k, v in offline_env().items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    log = (tmp_path / "serve.log").open("wb")
    command = [
        sys.executable,
        "-m",
        "history_proxy",
        "serve",
        "--config",
        str(path),
        "--port",
        str(port),
        *options,
    ]
    server = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, (tmp_path / "serve.log").read_text()
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            assert time.monotonic() < deadline, "serve did not start"
            time.sleep(0.1)
        yield url, server
        assert server.poll() is None, (tmp_path / "serve.log").read_text()
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # with --workers N: the supervisor and its workers
        server.wait(timeout=20)
        log.close()
