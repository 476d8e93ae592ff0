"""Child processes a test starts and stops, and the pip errors that mean the package index is unreachable."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

NETWORK_ERRORS = (
    "NewConnectionError",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "Connection refused",
    "ConnectTimeoutError",
    "ReadTimeoutError",
    "No matching distribution",
    "Could not find a version",
    "ProxyError",
    "SSLError",
    "Max retries exceeded",
)


def spawn(cmd: list[str], log: Path, **kwargs: Any) -> subprocess.Popen[bytes]:
    """Start a process writing stdout and stderr to ``log`` (the child keeps its own handle)."""
    with log.open("w") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, **kwargs)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
