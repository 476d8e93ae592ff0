"""The README walked top to bottom as a newcomer would (issue 35, H1): a copy of the clone in an empty
directory, nothing on PATH but the system's, `make run` as the first block says, then every shell and
Python block of the README in order, as written (only the port changed), each printed line it shows
checked. The demo's figures must differ between unfiltered and shaped.

Marked ``readme``: it builds a fresh .venv from the package index (a minute or two; pip's cache is
reused) and skips with pip's reason when the index cannot be reached.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.demo_table import ROW, number
from tests.support.processes import NETWORK_ERRORS
from tests.support.serve_process import UPSTREAM_VARIABLES, free_port

REPO = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
README_PORT = "127.0.0.1:8080"
SETUP_TIMEOUT_S = 900
BLOCK_TIMEOUT_S = 600
SHOWN = re.compile(r"^# (.+)$", re.MULTILINE)
PRINTED = re.compile(r"^\s*print\(.*\)\s+# (.+)$", re.MULTILINE)

pytestmark = [pytest.mark.readme, pytest.mark.timeout(SETUP_TIMEOUT_S + 20 * BLOCK_TIMEOUT_S)]


def readme_blocks() -> list[tuple[int, str, str]]:
    """(line, language, code) of every block of the README that runs, in order."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        info = match.group(1).strip()
        lang = info.split()[0] if info else ""
        if "illustrative" not in info and lang in ("sh", "python"):
            found.append((text.count("\n", 0, match.start()) + 1, lang, match.group(2)))
    return found


def fresh_clone(target: Path) -> Path:
    """The repository's files (tracked, and new ones not ignored) copied as a fresh clone holds them."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True, check=True
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, listed):
        source, copy = REPO / name, target / name
        if not source.exists() and not source.is_symlink():
            continue  # deleted in the working tree
        copy.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            copy.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, copy)
    return target


def newcomer_env() -> dict[str, str]:
    """The system's PATH without any virtualenv (this test's included), no keys, no mock switch."""
    env = {k: v for k, v in os.environ.items() if k not in UPSTREAM_VARIABLES and k != "VIRTUAL_ENV"}
    env.pop("MAKELEVEL", None)
    env.pop("MAKEFLAGS", None)
    venv_bin = str(Path(sys.prefix) / "bin")
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if p and p != venv_bin and "/.venv" not in p
    )
    return env


@pytest.fixture(scope="module")
def walked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, int, dict[str, str]]]:
    """The copy of the clone with `make run` serving on a free port (the README's first block)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    clone = fresh_clone(tmp_path_factory.mktemp("empty") / "history-proxy")
    env = newcomer_env()
    port = free_port()
    log = clone.parent / "make-run.log"
    with log.open("wb") as sink:
        server = subprocess.Popen(
            ["make", "run", f"PORT={port}"],
            cwd=clone,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + SETUP_TIMEOUT_S
        while True:
            if server.poll() is not None:
                out = log.read_text(errors="replace")
                if any(error in out for error in NETWORK_ERRORS):
                    pytest.skip(
                        f"make run cannot reach the package index: {out.strip().splitlines()[-1][:300]}"
                    )
                pytest.fail(f"make run exited {server.returncode}:\n{out[-3000:]}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            assert time.monotonic() < deadline, f"make run not serving after {SETUP_TIMEOUT_S}s"
            time.sleep(0.5)
        assert "MOCK: every answer comes from the built-in mock" in log.read_text()
        yield clone, port, env
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def run(lang: str, code: str, clone: Path, port: int, env: dict[str, str]) -> str:
    code = code.replace(README_PORT, f"127.0.0.1:{port}")
    # a Python block runs with the python the README's set-up gave (.venv, activated)
    command = (
        ["bash", "-euo", "pipefail", "-c", code]
        if lang == "sh"
        else [str(clone / ".venv/bin/python"), "-c", code]
    )
    done = subprocess.run(
        command, cwd=clone, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S
    )
    output = done.stdout + done.stderr
    if done.returncode != 0 and any(error in output for error in NETWORK_ERRORS):
        pytest.skip(f"a README block cannot reach the package index: {output.strip().splitlines()[-1][:300]}")
    assert done.returncode == 0, f"README {lang} block failed:\n{code}\n{output[-3000:]}"
    return output


def test_every_readme_block_runs_as_written_from_an_empty_directory(
    walked: tuple[Path, int, dict[str, str]],
) -> None:
    clone, port, env = walked
    blocks = readme_blocks()
    assert len(blocks) >= 6
    assert not (clone / ".venv" / "bin" / "pytest").exists(), (
        "make run installs what serving needs, not the tests"
    )
    demo_output = ""
    for line, lang, code in blocks:
        output = run(lang, code, clone, port, env)
        pattern = SHOWN if lang == "sh" else PRINTED
        for shown in pattern.findall(code):
            assert shown.partition("...")[0].strip() in output, (
                f"README.md:{line}: the README says it prints {shown!r}"
            )
        if "history-proxy demo" in code:
            demo_output = output
    rows = {m["role"]: m for text in demo_output.splitlines() if (m := ROW.match(text))}
    worker = rows["worker"]
    assert number(worker["c1"]) != number(worker["c0"]), "the demo shows a cost that differs"
    # the evidence figure, on both sides (the default worker chain keeps this conversation's in place)
    assert worker["n0"].isdigit() and worker["n1"].isdigit() and int(worker["n0"]) > 0, "and the evidence"
    assert (clone / "demo.html").is_file()
