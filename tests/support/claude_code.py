"""The pinned Claude Code CLI (installed once with npm) and a loopback-only network namespace to run it in."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLAUDE_CODE_VERSION = "2.1.332"
"""The Claude Code release the tests run (npm ``@anthropic-ai/claude-code``)."""
NPM_CLIENTS = Path(os.environ.get("HISTORY_PROXY_NPM_CLIENTS", REPO / ".npm-clients"))
DRIVER = REPO / "tests" / "clients" / "claude_code_netns.py"
INSTALL_TIMEOUT_S = 600


def claude_binary() -> Path:
    """The pinned CLI, installed once into the cache directory (skips when npm cannot get it)."""
    prefix = NPM_CLIENTS / f"claude-code-{CLAUDE_CODE_VERSION}"
    binary = prefix / "node_modules" / ".bin" / "claude"
    if binary.exists():
        return binary
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed: cannot install the Claude Code CLI (.ci/run installs it)")
    prefix.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(
            [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--loglevel=error",
             f"@anthropic-ai/claude-code@{CLAUDE_CODE_VERSION}"],
            capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.skip(f"npm install of @anthropic-ai/claude-code took over {INSTALL_TIMEOUT_S} s")
    if done.returncode != 0 or not binary.exists():
        shutil.rmtree(prefix, ignore_errors=True)
        pytest.skip(
            f"npm could not install @anthropic-ai/claude-code@{CLAUDE_CODE_VERSION}: {done.stderr[-400:]}"
        )
    return binary


def netns_command() -> list[str]:
    """``unshare -n`` (as root) or ``unshare -rn`` (a user namespace) when it works here; skips if neither."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("unshare or ip is not installed (util-linux, iproute2; .ci/run installs them)")
    errors = []
    for command in (["unshare", "-n"], ["unshare", "-rn"]):
        probe = subprocess.run(
            [*command, "ip", "link", "set", "lo", "up"], capture_output=True, text=True, check=False
        )
        if probe.returncode == 0:
            return command
        errors.append(probe.stderr.strip()[:200])
    pytest.skip(f"cannot make a loopback-only network namespace here: {errors}")
