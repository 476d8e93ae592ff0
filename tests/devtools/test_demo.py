"""`history-proxy demo` through a running `serve --mock`: shaping seen in one command (issue 35, H3)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from history_proxy.devtools.demo import demo_conversation
from tests.support.demo_table import ROW, number
from tests.support.serve_process import REPO, Server, free_port, offline_env, start


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("demo-proxy") / "serve.log"
    yield from start("serve", "--mock", log=log, ready_path="/healthz")


def demo(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "history_proxy", "demo", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env=offline_env(),
    )


def test_the_demo_shows_each_role_unfiltered_beside_shaped(proxy: Server, tmp_path: Path) -> None:
    done = demo("--url", proxy.url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = {m["role"]: m for line in done.stdout.splitlines() if (m := ROW.match(line))}
    assert list(rows) == ["orchestrator", "manager", "worker", "planner", "default"], done.stdout
    worker = rows["worker"]
    assert number(worker["t1"]) < number(worker["t0"]), "the worker's chain sends fewer tokens"
    assert number(worker["c1"]) < number(worker["c0"]), "and costs less with caching"
    # the evidence the next answers took, counted on both sides (the default chain keeps all 13 of this
    # conversation's in place; the orchestrator's view loses some on other conversations: docs/cost.md)
    assert worker["n0"] == rows["orchestrator"]["n0"] and int(worker["n0"]) > 0
    assert rows["default"]["t0"] == rows["default"]["t1"], "the default role forwards everything"
    assert "not triggered: under budget" in done.stdout, "an idle filter says why"
    page = (tmp_path / "demo.html").read_text(encoding="utf-8")
    assert "<svg" in page and "role worker" in page
    assert "wrote demo.html" in done.stdout


def test_the_demo_conversation_is_a_tool_loop_from_the_corpus() -> None:
    body = demo_conversation()
    corpus = REPO / "tests" / "corpus" / "openhands-codeact-ponylang-ponyc-4593.json"
    assert body == json.loads(corpus.read_text(encoding="utf-8"))
    assert len(body["messages"]) == 68


def test_without_a_running_proxy_the_demo_says_how_to_start_one(tmp_path: Path) -> None:
    done = demo("--url", f"http://127.0.0.1:{free_port()}", cwd=tmp_path)
    assert done.returncode == 1
    assert "no proxy answers at" in done.stderr and "make run" in done.stderr
    assert "Traceback" not in done.stderr
