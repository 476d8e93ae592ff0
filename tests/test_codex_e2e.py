"""The real Codex CLI through `history-proxy serve` on the worker role, in a loopback-only network namespace.

``@openai/codex`` (pinned, :data:`CODEX_VERSION`) is installed once with npm into ``.npm-clients``
(gitignored; ``HISTORY_PROXY_NPM_CLIENTS`` moves it) and configured in a temporary ``CODEX_HOME`` with a
``model_providers`` entry: ``base_url`` = the proxy, ``wire_api = "responses"``,
``http_headers = {"X-Agent-Role" = "worker"}``. The proxy runs the default config (its worker chain)
with ``OPENAI_BASE_URL`` = the scripted recorder ``tests/corpus/recording/responses_recorder.py``,
which answers in OpenAI's Responses SSE format: a reasoning item and a shell call first, then text.
Everything runs under ``unshare -n`` with only ``lo`` up, so nothing can reach anything else.

Skips, with the reason, when npm cannot reach the registry, or unshare/ip are missing or not allowed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.clients

REPO = Path(__file__).resolve().parents[1]
CODEX_VERSION = "0.171.0"
CLIENTS = Path(os.environ.get("HISTORY_PROXY_NPM_CLIENTS", REPO / ".npm-clients"))
CODEX = CLIENTS / "node_modules" / ".bin" / "codex"
RECORDER = REPO / "tests" / "corpus" / "recording" / "responses_recorder.py"
UPSTREAM_PORT, PROXY_PORT = 18401, 18402
PROMPT = "Run echo codex-e2e-marker in the shell and tell me what it printed."
CODEX_RETRIES = 5
"""Codex's default ``stream_max_retries``: it tries a rate-limited turn 1 + 5 times on its own."""

SCRIPT = f"""
set -u
ip link set lo up
"$PYTHON" "$RECORDER" --port {UPSTREAM_PORT} --out "$WORK/upstream.jsonl" --fail "$FAIL" $RECORDER_ARGS \\
    > "$WORK/recorder.log" 2>&1 &
recorder=$!
OPENAI_UPSTREAM_URL=http://127.0.0.1:{UPSTREAM_PORT}/v1 OPENAI_API_KEY=upstream-key \\
    "$PYTHON" -m history_proxy serve --host 127.0.0.1 --port {PROXY_PORT} $PROXY_ARGS > "$WORK/proxy.log" 2>&1 &
proxy=$!
for _ in $(seq 100); do
    "$PYTHON" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:{PROXY_PORT}/healthz')" \\
        2>/dev/null && break
    sleep 0.1
done
cd "$WORK/repo"
CODEX_HOME="$WORK/home" PROXY_KEY=client-key OPENAI_API_KEY=client-key timeout 90 "$CODEX" exec \\
    --skip-git-repo-check --sandbox danger-full-access "$PROMPT" > "$WORK/codex.out" 2> "$WORK/codex.err"
echo $? > "$WORK/codex.rc"
if [ -n "$RESUME" ]; then
    CODEX_HOME="$WORK/home" PROXY_KEY=client-key OPENAI_API_KEY=client-key timeout 90 "$CODEX" exec \\
        --skip-git-repo-check --sandbox danger-full-access resume --last "$RESUME" \\
        > "$WORK/codex2.out" 2> "$WORK/codex2.err"
    echo $? > "$WORK/codex2.rc"
fi
kill $proxy $recorder
wait
"""

CONFIG = f"""
model = "gpt-5"
model_provider = "proxy"

[model_providers.proxy]
name = "history-proxy"
base_url = "http://127.0.0.1:{PROXY_PORT}/v1"
wire_api = "responses"
env_key = "PROXY_KEY"
http_headers = {{ "X-Agent-Role" = "worker" }}
"""


def codex_installed() -> bool:
    package = CLIENTS / "node_modules" / "@openai" / "codex" / "package.json"
    return CODEX.exists() and package.exists() and json.loads(package.read_text())["version"] == CODEX_VERSION


@pytest.fixture(scope="module")
def codex() -> Path:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("needs unshare (util-linux) and ip (iproute2) for a loopback-only network namespace")
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"unshare -n is not allowed here: {probe.stderr.decode().strip()}")
    if not codex_installed():
        if shutil.which("npm") is None:
            pytest.skip("needs npm to install @openai/codex (.ci/run installs it)")
        CLIENTS.mkdir(parents=True, exist_ok=True)
        install = subprocess.run(
            [
                "npm",
                "install",
                "--no-audit",
                "--no-fund",
                "--prefix",
                str(CLIENTS),
                f"@openai/codex@{CODEX_VERSION}",
            ],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if install.returncode != 0 or not codex_installed():
            pytest.skip(
                f"npm could not install @openai/codex@{CODEX_VERSION}: {install.stderr.strip()[-400:]}"
            )
    return CODEX


def run_codex(
    codex: Path,
    work: Path,
    fail: int = 0,
    *,
    config: str = CONFIG,
    prompt: str = PROMPT,
    resume: str = "",
    recorder_args: str = "",
    proxy_args: str = "",
) -> tuple[int, str, list[dict[str, Any]]]:
    """One ``codex exec`` turn in its own network namespace (then a ``resume --last`` turn when ``resume``
    says one): exit code, stdout, what the upstream received."""
    (work / "home").mkdir(parents=True)
    (work / "repo").mkdir()
    (work / "home" / "config.toml").write_text(config)
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "RECORDER": str(RECORDER),
        "WORK": str(work),
        "FAIL": str(fail),
        "CODEX": str(codex),
        "PROMPT": prompt,
        "RESUME": resume,
        "RECORDER_ARGS": recorder_args,
        "PROXY_ARGS": proxy_args,
    }
    env.pop("OPENAI_API_KEY", None)
    subprocess.run(["unshare", "-n", "bash", "-c", SCRIPT], env=env, cwd=REPO, timeout=150, check=False)
    rc = int((work / "codex.rc").read_text().strip() or "-1")
    upstream = work / "upstream.jsonl"
    received = [json.loads(line) for line in upstream.read_text().splitlines()] if upstream.exists() else []
    return rc, (work / "codex.out").read_text(), received


@pytest.mark.timeout(900)
def test_a_codex_tool_loop_completes_through_the_worker_view_with_its_instructions_and_tools(
    codex: Path, tmp_path: Path
) -> None:
    rc, out, received = run_codex(codex, tmp_path)
    logs = (tmp_path / "codex.err").read_text()[-2000:] + (tmp_path / "proxy.log").read_text()[-2000:]
    assert rc == 0, logs
    assert "The command printed: codex-e2e-marker" in out, logs
    assert len(received) == 2, "the shell call, then the answer"
    first, second = (r["body"] for r in received)
    assert "x-agent-role" not in received[0]["headers"], "identity headers stay at the proxy"
    for body in (first, second):
        developer = [i for i in body["input"] if i.get("role") == "developer"]
        assert developer and "Codex" in json.dumps(developer[0]), "the instructions reach the model"
        assert body["input"][: len(developer)] == developer, "the instructions lead"
        tools = [t.get("name") for t in body.get("tools") or []] + [
            t.get("name") for i in body["input"] if i.get("type") == "additional_tools" for t in i["tools"]
        ]
        assert "exec_command" in tools or "shell" in tools
        assert any(PROMPT in json.dumps(i) for i in body["input"] if i.get("role") == "user"), "the task"
    kinds = [i.get("type") for i in second["input"]]
    assert kinds[-3:] == ["reasoning", "function_call", "function_call_output"], "the agent's own work"
    reasoning = second["input"][-3]
    assert reasoning["encrypted_content"] == "gAAAAB-recorded-opaque-reasoning-state"
    assert "codex-e2e-marker" in second["input"][-1]["output"]
    assert second["input"][: len(first["input"])] == first["input"], "the worker view kept the whole turn"
    access = [
        json.loads(line)
        for line in (tmp_path / "proxy.log").read_text().splitlines()
        if '"path":"/v1/responses"' in line
    ]
    assert [a["role"] for a in access] == ["worker", "worker"], "shaped on the worker role"
    assert all("worker_view" in [f["type"] for f in a["filters"]] for a in access)


@pytest.mark.timeout(300)
def test_a_rate_limited_codex_turn_costs_no_more_upstream_calls_than_codexs_own_tries(
    codex: Path, tmp_path: Path
) -> None:
    rc, _, received = run_codex(codex, tmp_path, fail=100)
    assert rc != 0, "every try was rate limited"
    assert len(received) == 1 + CODEX_RETRIES, "the proxy left the retries to Codex (was 18 calls)"
    assert {r["headers"].get("originator") for r in received} == {"codex_exec"}


COMPACTING = f"""
model = "gpt-5"
model_provider = "openai"
openai_base_url = "http://127.0.0.1:{PROXY_PORT}/v1"
model_context_window = 10000
model_auto_compact_token_limit = 100000
model_post_turn_compact_threshold_percent = 50
"""
"""Codex on its built-in OpenAI provider (the one it compacts remotely for) pointed at the proxy, compacting
after a turn past half of a 10k window: its remote compaction v2, a streamed ``/v1/responses`` ending with a
``compaction_trigger`` item, answered by exactly one ``compaction`` item."""
SECRET = "sk-" + "Cx7Dv8Ew9F" * 3
SEALED = "gAAAAB-recorded-compaction-state"


def notes_of(work: Path) -> str:
    """Every note of the proxy's ``/v1/responses`` access lines, comma-joined."""
    access = [
        json.loads(line)
        for line in (work / "proxy.log").read_text().splitlines()
        if '"path":"/v1/responses"' in line
    ]
    return ",".join(",".join(a.get("notes") or []) for a in access)


def compaction_items(received: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        item
        for r in received
        for item in r["body"].get("input") or []
        if item.get("type") in ("compaction", "compaction_trigger")
    ]


@pytest.mark.timeout(600)
def test_codex_compacts_through_the_proxy_against_an_upstream_without_compaction(
    codex: Path, tmp_path: Path
) -> None:
    prompt = f"{PROMPT} The deploy key is {SECRET}."
    rc, out, received = run_codex(codex, tmp_path, config=COMPACTING, prompt=prompt, resume="Run it again.")
    logs = (tmp_path / "codex.err").read_text()[-2000:] + (tmp_path / "proxy.log").read_text()[-2000:]
    assert rc == 0 and (tmp_path / "codex2.rc").read_text().strip() == "0", logs
    assert "context compacted" in (tmp_path / "codex.err").read_text() + out, "Codex compacted"
    notes = notes_of(tmp_path)
    assert "responses_compaction:emulated" in notes, "the proxy answered the trigger itself"
    assert "responses_compaction:expanded" in notes, "the resumed turn's compaction item was expanded"
    assert any(r["path"].endswith("/chat/completions") for r in received), "a summary call wrote it"
    assert all(SECRET not in json.dumps(r["body"]) for r in received), "the compacted history was filtered"
    assert compaction_items(received) == [], "the upstream without compaction never saw a compaction item"
    resumed = [r["body"] for r in received if r["path"].endswith("/responses")][-1]
    developer = [i for i in resumed["input"] if i.get("role") == "developer"]
    assert any("Summary (recorder)" in json.dumps(i) for i in developer), "the summary stands in the history"


@pytest.mark.timeout(600)
def test_codex_compacts_natively_through_the_proxy_against_an_upstream_with_compaction(
    codex: Path, tmp_path: Path
) -> None:
    raw = yaml.safe_load((REPO / "config" / "default.yaml").read_text(encoding="utf-8"))
    raw["upstreams"]["openai"]["responses_compaction"] = "native"
    config = tmp_path / "proxy.yaml"
    config.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    work = tmp_path / "run"
    rc, _, received = run_codex(
        codex,
        work,
        config=COMPACTING,
        prompt=f"{PROMPT} The deploy key is {SECRET}.",
        resume="Run it again.",
        recorder_args="--compaction",
        proxy_args=f"--config {config}",
    )
    logs = (work / "codex.err").read_text()[-2000:] + (work / "proxy.log").read_text()[-2000:]
    assert rc == 0 and (work / "codex2.rc").read_text().strip() == "0", logs
    triggers = [
        r["body"] for r in received if r["body"].get("input", [{}])[-1].get("type") == "compaction_trigger"
    ]
    assert len(triggers) >= 1, "the trigger went to the upstream that compacts"
    assert SECRET not in json.dumps(triggers), "the history it compacts passed the secret filter"
    resumed = [r["body"] for r in received if r["path"].endswith("/responses")][-1]
    assert any(i.get("encrypted_content") == SEALED for i in resumed["input"]), "its sealed item went back"
    assert not any(r["path"].endswith("/chat/completions") for r in received), "nothing was emulated"
