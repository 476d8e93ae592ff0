"""The real Gemini CLI through `history-proxy serve` on the worker role, in a loopback-only network namespace.

``@google/gemini-cli`` (pinned, :data:`GEMINI_CLI_VERSION`) is installed once with npm into
``.npm-clients`` (gitignored; ``HISTORY_PROXY_NPM_CLIENTS`` moves it) and run with a temporary ``HOME``
whose settings select the API-key auth and turn folder trust off, ``GOOGLE_GEMINI_BASE_URL`` = the proxy
and ``GEMINI_CLI_CUSTOM_HEADERS="X-Agent-Role: worker"``. The proxy runs the default config's chains
(the worker chain) with one more upstream, ``api: google``, whose own key replaces the CLI's: the
scripted recorder ``tests/clients/gemini_upstream.py`` (a shell call first, then text). Everything runs
under ``unshare -n`` with only ``lo`` up, so nothing can reach anything else.

Skips, with the reason, when npm cannot install the CLI, or unshare/ip are missing or not allowed.
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

from tests.support.claude_code import netns_command

pytestmark = pytest.mark.clients

REPO = Path(__file__).resolve().parents[1]
GEMINI_CLI_VERSION = "0.61.0"
CLIENTS = Path(os.environ.get("HISTORY_PROXY_NPM_CLIENTS", REPO / ".npm-clients"))
PREFIX = CLIENTS / f"gemini-cli-{GEMINI_CLI_VERSION}"
GEMINI = PREFIX / "node_modules" / ".bin" / "gemini"
RECORDER = REPO / "tests" / "clients" / "gemini_upstream.py"
UPSTREAM_PORT, PROXY_PORT = 18411, 18412
UPSTREAM_KEY = "upstream-gemini-PLANTED-key"
PROMPT = "Run echo gemini-e2e-marker in the shell and tell me what it printed."
SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
    "privacy": {"usageStatisticsEnabled": False},
}

SCRIPT = f"""
set -u
ip link set lo up
"$PYTHON" "$RECORDER" --port {UPSTREAM_PORT} --out "$WORK/upstream.jsonl" > "$WORK/recorder.log" 2>&1 &
recorder=$!
"$PYTHON" -m history_proxy serve --config "$WORK/config.yaml" --host 127.0.0.1 --port {PROXY_PORT} \\
    > "$WORK/proxy.log" 2>&1 &
proxy=$!
for _ in $(seq 100); do
    "$PYTHON" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:{PROXY_PORT}/healthz')" \\
        2>/dev/null && break
    sleep 0.1
done
cd "$WORK/repo"
HOME="$WORK/home" GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:{PROXY_PORT} GEMINI_API_KEY=client-key \\
    GEMINI_CLI_CUSTOM_HEADERS="X-Agent-Role: worker" timeout 120 "$GEMINI" --yolo -p "$PROMPT" \\
    > "$WORK/gemini.out" 2> "$WORK/gemini.err"
echo $? > "$WORK/gemini.rc"
kill $proxy $recorder
wait
"""


def gemini_installed() -> bool:
    package = PREFIX / "node_modules" / "@google" / "gemini-cli" / "package.json"
    return (
        GEMINI.exists()
        and package.exists()
        and json.loads(package.read_text())["version"] == GEMINI_CLI_VERSION
    )


@pytest.fixture(scope="module")
def gemini() -> Path:
    if not gemini_installed():
        if shutil.which("npm") is None:
            pytest.skip("needs npm to install @google/gemini-cli (.ci/run installs it)")
        PREFIX.mkdir(parents=True, exist_ok=True)
        install = subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", "--prefix", str(PREFIX),
             f"@google/gemini-cli@{GEMINI_CLI_VERSION}"],
            capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        if install.returncode != 0 or not gemini_installed():
            pytest.skip(
                f"npm could not install @google/gemini-cli@{GEMINI_CLI_VERSION}: {install.stderr[-400:]}"
            )
    return GEMINI


def proxy_config() -> dict[str, Any]:
    """The default config's chains, with a Gemini upstream (its own key) that ``gemini-*`` routes to."""
    config: dict[str, Any] = yaml.safe_load((REPO / "config" / "default.yaml").read_text())
    config["upstreams"] = {
        "gemini": {
            "base_url": f"http://127.0.0.1:{UPSTREAM_PORT}/v1beta",
            "api": "google",
            "api_key": UPSTREAM_KEY,
        }
    }
    config["routes"] = []
    return config


def run_gemini(gemini: Path, work: Path) -> tuple[int, str, list[dict[str, Any]]]:
    """One ``gemini -p`` turn in its own network namespace: exit code, stdout, what the upstream received."""
    (work / "home" / ".gemini").mkdir(parents=True)
    (work / "repo").mkdir()
    (work / "home" / ".gemini" / "settings.json").write_text(json.dumps(SETTINGS))
    (work / "config.yaml").write_text(yaml.safe_dump(proxy_config()))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("GEMINI_", "GOOGLE_"))},
        "PYTHON": sys.executable,
        "RECORDER": str(RECORDER),
        "WORK": str(work),
        "GEMINI": str(gemini),
        "PROMPT": PROMPT,
        "UPSTREAM_KEY": UPSTREAM_KEY,
    }
    subprocess.run([*netns_command(), "bash", "-c", SCRIPT], env=env, cwd=REPO, timeout=200, check=False)
    rc = int((work / "gemini.rc").read_text().strip() or "-1")
    upstream = work / "upstream.jsonl"
    received = [json.loads(line) for line in upstream.read_text().splitlines()] if upstream.exists() else []
    return rc, (work / "gemini.out").read_text(), received


@pytest.mark.timeout(900)
def test_a_gemini_cli_tool_loop_completes_through_the_worker_chain(gemini: Path, tmp_path: Path) -> None:
    rc, out, received = run_gemini(gemini, tmp_path)
    proxy_log = (tmp_path / "proxy.log").read_text()
    logs = (tmp_path / "gemini.err").read_text()[-2000:] + proxy_log[-2000:]
    assert rc == 0, logs
    assert "The command printed:" in out and "gemini-e2e-marker" in out, logs
    loop = [r for r in received if r["path"].endswith(":streamGenerateContent")]
    assert len(loop) == 2, "the shell call, then the answer"
    assert all(r["query"] == "alt=sse" for r in loop)
    first, second = (r["body"] for r in loop)
    assert first["systemInstruction"] == second["systemInstruction"], "the instruction goes as it came"
    parts = [next(iter(p)) for c in second["contents"] for p in c["parts"]]
    assert parts.count("functionCall") == parts.count("functionResponse") == 1, "the pair goes whole"
    for record in received:
        assert "x-agent-role" not in record["headers"], "identity headers stay at the proxy"
        assert record["headers"]["key-is-the-upstreams"] == "True", (
            "the upstream's own key replaces the CLI's"
        )
    lines = [json.loads(line) for line in proxy_log.splitlines() if '"history_proxy.access"' in line]
    shaped = [line for line in lines if line["path"].endswith(":streamGenerateContent")]
    assert len(shaped) == 2 and all(line["role"] == "worker" and line["status"] == 200 for line in shaped)
    assert all("worker_view" in [f["type"] for f in line["filters"]] for line in shaped), (
        "the worker chain ran"
    )
    assert shaped[-1]["upstream_cached_tokens"] > 0, "Gemini's cachedContentTokenCount is read"
    assert "client-key" not in proxy_log and UPSTREAM_KEY not in proxy_log
