"""Processes under test: start (pinned, logged, tied to our life), wait until ready, measure, stop.

Every process is started by us, recorded, and stopped by its own id: SIGTERM, then SIGKILL after a
grace period. On Linux each child also gets ``PR_SET_PDEATHSIG`` so it dies with the harness even
if the harness itself is killed.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.metadata
import os
import platform
import resource
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LOOPBACK = "127.0.0.1"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PR_SET_PDEATHSIG = 1


def package_of(tree: Path) -> str:
    """The import package of the project in ``tree``: ``history_proxy``, or ``proxy`` in trees from before
    the rename (so ``bench.compare`` can still start an older commit)."""
    return "history_proxy" if (tree / "history_proxy" / "__main__.py").is_file() else "proxy"


def free_port() -> int:
    """A TCP port on loopback that is free right now."""
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


def cores() -> list[int]:
    """The CPUs this process may run on, sorted."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def pin(pid: int, cpus: set[int] | None) -> bool:
    """Restrict ``pid`` (0: this process) to ``cpus``; False where that is not possible."""
    if not cpus or not hasattr(os, "sched_setaffinity"):
        return False
    try:
        os.sched_setaffinity(pid, cpus)
    except OSError:
        return False
    return True


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class Started:
    """A process we started, its log file and the CPUs it is pinned to."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    cpus: set[int] | None

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""


def start(
    name: str,
    command: Sequence[str],
    log_dir: Path,
    *,
    cpus: set[int] | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> Started:
    """Start ``command`` with its output in ``log_dir/<name>.log`` (a file: never a pipe that fills up)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            list(command),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            preexec_fn=_die_with_parent if os.name == "posix" else None,
        )
    started = Started(name, process, log_path, cpus)
    pin(process.pid, cpus)
    return started


def stop(started: Started, grace_s: float = 5.0) -> None:
    """SIGTERM, wait up to ``grace_s``, then SIGKILL; always reaps the process."""
    process = started.process
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            process.wait(timeout=grace_s)


def http_ready(port: int, path: str = "/healthz", timeout_s: float = 0.5) -> bool:
    """True when a GET of ``path`` on loopback answers with any HTTP status below 500."""
    try:
        with socket.create_connection((LOOPBACK, port), timeout=timeout_s) as conn:
            conn.sendall(f"GET {path} HTTP/1.1\r\nhost: {LOOPBACK}\r\nconnection: close\r\n\r\n".encode())
            head = conn.recv(64)
    except OSError:
        return False
    parts = head.split(b" ", 2)
    return len(parts) >= 2 and parts[0].startswith(b"HTTP/") and parts[1][:1] in (b"1", b"2", b"3", b"4")


def wait_ready(started: Started, port: int, path: str = "/healthz", timeout_s: float = 60.0) -> None:
    """Poll until the process answers on ``port``; raise with its log tail if it dies or times out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if started.process.poll() is not None:
            raise RuntimeError(
                f"{started.name} exited with {started.process.returncode}:\n{started.log_tail()}"
            )
        if http_ready(port, path):
            return
        time.sleep(0.1)
    raise RuntimeError(
        f"{started.name} not ready on port {port} after {timeout_s:.0f} s:\n{started.log_tail()}"
    )


@contextlib.contextmanager
def running(started: Started) -> Iterator[Started]:
    """Stop the process when the block ends, however it ends."""
    try:
        yield started
    finally:
        stop(started)


# --- measuring a process tree via /proc ---------------------------------------------------


def descendants(pid: int) -> list[int]:
    """``pid`` and every live process below it."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = (entry / "stat").read_text()
            parent = int(stat[stat.rindex(")") + 2 :].split()[1])
            children.setdefault(parent, []).append(int(entry.name))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(children.get(current, []))
    return tree


def cpu_seconds(pids: Sequence[int]) -> float:
    """utime + stime of the given processes (those still alive), in seconds."""
    ticks = 0
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = Path(f"/proc/{pid}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return ticks / CLOCK_TICKS


def memory_kb(pids: Sequence[int], field: str = "VmHWM") -> int:
    """Sum of a ``/proc/<pid>/status`` memory field (VmHWM: peak RSS, VmRSS: current) in kB."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, ValueError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith(field + ":"):
                    total += int(line.split()[1])
                    break
    return total


def proc_available() -> bool:
    """Whether /proc measurements work here (Linux)."""
    return Path(f"/proc/{os.getpid()}/stat").exists()


# --- the machine and the harness process ----------------------------------------------------

VERSIONED_PACKAGES = ("history-proxy", "uvicorn", "starlette", "httpx", "uvloop", "httptools", "tiktoken")


def machine_description(repo: Path) -> dict[str, Any]:
    """CPU model and count, Python, platform, load average, commit and package versions."""
    cpu_model = "?"
    with contextlib.suppress(OSError):
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        cpu_model = next(
            (line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "?"
        )
    commit = "?"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=repo,
            capture_output=True,
            check=False,
            text=True,
            timeout=5,
        )
        commit = done.stdout.strip() or "?"
    versions = {}
    for package in VERSIONED_PACKAGES:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions[package] = importlib.metadata.version(package)
    return {
        "cpu_model": cpu_model,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average_at_start": os.getloadavg(),
        "commit": commit,
        "versions": versions,
    }


@contextlib.contextmanager
def terminate_on_sigterm() -> Iterator[None]:
    """Turn SIGTERM into SystemExit so every started process is stopped on the way out."""

    def handler(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def raise_fd_limit(needed: int) -> None:
    """Raise this process's open-file limit towards ``needed`` (children inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = max(soft, needed) if hard == resource.RLIM_INFINITY else min(hard, max(soft, needed))
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
