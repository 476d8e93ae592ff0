"""Real multi-agent frameworks through the proxy: does every agent's task statement reach the upstream?

AutoGen AgentChat (RoundRobinGroupChat: coder + reviewer) and CrewAI (hierarchical crew: manager,
researcher, writer) run unmodified in their own venv (``.venv-frameworks``, built once from
``tests/corpus/recording/requirements.txt``; the tests skip when pip cannot reach the index),
pointed at ``history-proxy serve`` on the default config's chains, whose single upstream is the
scripted recorder (``tests/corpus/recording/recorder.py``). The recorder keeps every body the
proxy forwarded; each agent is recognised by its system prompt (the proxy does not forward the
identity headers). For every request an agent sent, the task statement it was given must still be
in what the upstream received: the team task for the AutoGen agents and the CrewAI manager, the
delegated subtask for each CrewAI coworker (CrewAI never shows a coworker the crew's task).

Run with ``pytest -m frameworks tests/test_frameworks_e2e.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.processes import NETWORK_ERRORS, spawn, stop

pytestmark = pytest.mark.frameworks

REPO = Path(__file__).resolve().parents[1]
RECORDING = REPO / "tests" / "corpus" / "recording"
REQUIREMENTS = RECORDING / "requirements.txt"
FW_VENV = Path(os.environ.get("HISTORY_PROXY_FRAMEWORKS_VENV", REPO / ".venv-frameworks"))
INSTALL_TIMEOUT_S = 1200
RUN_TIMEOUT_S = 90

sys.path.insert(0, str(RECORDING))
import scenarios  # noqa: E402  (stdlib only: the task statements and the scripted answers)

sys.path.remove(str(RECORDING))

# scenario -> (recording script, --scenario, {agent: (system-prompt marker, role header, task statement)})
SCENARIOS: dict[str, tuple[str, str, dict[str, tuple[str, str, str]]]] = {
    "autogen-roundrobin": (
        "record_autogen.py",
        "roundrobin",
        {
            "coder": ("[agent:autogen-rr-coder]", "worker", scenarios.AUTOGEN_RR_TASK),
            "reviewer": ("[agent:autogen-rr-reviewer]", "worker", scenarios.AUTOGEN_RR_TASK),
        },
    ),
    "crewai-hierarchical": (
        "record_crewai.py",
        "hierarchical",
        {
            "manager": ("You are Crew Manager", "manager", scenarios.CREWAI_HIER_TASK),
            "researcher": ("[agent:crewai-researcher]", "worker", scenarios.CREWAI_RESEARCH_SUBTASK),
            "writer": ("[agent:crewai-writer]", "worker", scenarios.CREWAI_WRITE_SUBTASK),
        },
    ),
}
CASES = [(s, a) for s, (_, _, agents) in SCENARIOS.items() for a in agents]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_http(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: process exited {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} not ready after {timeout}s: {log.read_text()[-2000:]}")


def _frameworks_python() -> Path:
    """The frameworks venv's python, built once (re-built when requirements.txt changes)."""
    stamp = FW_VENV / ".installed"
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    python = FW_VENV / "bin" / "python"
    if stamp.exists() and stamp.read_text().strip() == digest and python.exists():
        return python
    shutil.rmtree(FW_VENV, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(FW_VENV)], check=True, timeout=120)
    try:
        proc = subprocess.run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "-q",
                "-r",
                str(REQUIREMENTS),
            ],
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        shutil.rmtree(FW_VENV, ignore_errors=True)
        pytest.skip(
            f"pip install -r {REQUIREMENTS.name} took over {INSTALL_TIMEOUT_S}s (package index unreachable?)"
        )
    if proc.returncode != 0:
        out = proc.stdout + proc.stderr
        shutil.rmtree(FW_VENV, ignore_errors=True)
        if any(e in out for e in NETWORK_ERRORS):
            pytest.skip(
                f"pip cannot reach the package index to install {REQUIREMENTS.name}: "
                f"{out.strip().splitlines()[-1][:300]}"
            )
        pytest.fail(f"pip install -r {REQUIREMENTS} failed:\n{out[-3000:]}")
    stamp.write_text(digest + "\n")
    return python


def _proxy_config(recorder_port: int) -> dict[str, Any]:
    """The default config's identity, limits and policy chains, with the recorder as the only upstream."""
    config: dict[str, Any] = yaml.safe_load((REPO / "config" / "default.yaml").read_text())
    config["upstreams"] = {"recorder": {"base_url": f"http://127.0.0.1:{recorder_port}/v1"}}
    config["routes"] = []
    return config


@pytest.fixture(scope="module")
def upstream_received(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> dict[str, Any]:
    """Run both frameworks through the proxy once; what the upstream received, per scenario."""
    terminal = request.config.pluginmanager.get_plugin("terminalreporter")
    if terminal is not None and not (FW_VENV / ".installed").exists():  # say why nothing moves for a minute
        terminal.write_line(f"\ninstalling AutoGen and CrewAI into {FW_VENV} (about 1 GB, once)")
    fw_python = _frameworks_python()
    tmp = tmp_path_factory.mktemp("frameworks")
    procs: list[subprocess.Popen[bytes]] = []
    results: dict[str, Any] = {}
    try:
        for scenario, (script, arg, _agents) in SCENARIOS.items():
            # a fresh recorder and proxy per scenario, so each recording holds one framework's traffic
            rec_file = tmp / f"{scenario}.jsonl"
            rec_log = tmp / f"{scenario}-recorder.log"
            rec_port = _free_port()
            recorder = spawn(
                [
                    sys.executable,
                    str(RECORDING / "recorder.py"),
                    "--port",
                    str(rec_port),
                    "--out",
                    str(rec_file),
                ],
                rec_log,
                cwd=RECORDING,
            )
            procs.append(recorder)
            _wait_http(f"http://127.0.0.1:{rec_port}/healthz", recorder, rec_log)

            config_path = tmp / f"{scenario}-proxy.yaml"
            config_path.write_text(yaml.safe_dump(_proxy_config(rec_port), sort_keys=False))
            proxy_port = _free_port()
            proxy_log = tmp / f"{scenario}-proxy.log"
            env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
            proxy = spawn(
                [
                    str(Path(sys.executable).parent / "history-proxy"),
                    "serve",
                    "--config",
                    str(config_path),
                    "--port",
                    str(proxy_port),
                    "--log-format",
                    "text",
                ],
                proxy_log,
                env=env,
                cwd=REPO,
            )
            procs.append(proxy)
            _wait_http(f"http://127.0.0.1:{proxy_port}/healthz", proxy, proxy_log)

            fw_env = dict(
                env,
                CREWAI_DISABLE_TELEMETRY="true",
                CREWAI_TRACING_ENABLED="false",
                OTEL_SDK_DISABLED="true",
                PYTHONWARNINGS="ignore",
            )
            try:
                run = subprocess.run(
                    [
                        str(fw_python),
                        str(RECORDING / script),
                        "--scenario",
                        arg,
                        "--base-url",
                        f"http://127.0.0.1:{proxy_port}/v1",
                    ],
                    capture_output=True,
                    text=True,
                    timeout=RUN_TIMEOUT_S,
                    env=fw_env,
                    cwd=RECORDING,
                )
                returncode, output = run.returncode, run.stdout + run.stderr
            except subprocess.TimeoutExpired as e:
                returncode = None
                output = f"timed out after {RUN_TIMEOUT_S}s\n{_decoded(e.stdout)}{_decoded(e.stderr)}"
            stop(proxy)
            stop(recorder)
            records = (
                [json.loads(line) for line in rec_file.read_text().splitlines()] if rec_file.exists() else []
            )
            results[scenario] = {
                "returncode": returncode,
                "output": output,
                "records": records,
                "proxy_log": proxy_log.read_text(),
            }
    finally:
        for p in procs:
            stop(p)
    if os.environ.get("HISTORY_PROXY_FRAMEWORKS_DUMP"):  # everything received, for a look after a failure
        Path(os.environ["HISTORY_PROXY_FRAMEWORKS_DUMP"]).write_text(json.dumps(results, indent=1))
    return results


def _decoded(output: bytes | str | None) -> str:
    """What a timed-out run printed (bytes on POSIX even with ``text=True``)."""
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _shape(body: dict[str, Any]) -> str:
    """A one-line picture of a body's messages, for failure messages: role(name)."""
    return " ".join(
        m.get("role", "?") + (f"({m['name']})" if m.get("name") else "") for m in body["messages"]
    )


def _requests_of(records: list[dict[str, Any]], marker: str) -> list[dict[str, Any]]:
    return [
        r["body"]
        for r in records
        if any(marker in _text(m.get("content")) for m in r["body"].get("messages", []))
    ]


@pytest.mark.timeout(INSTALL_TIMEOUT_S + 600)
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_framework_run_completes_through_the_proxy(upstream_received: dict[str, Any], scenario: str) -> None:
    result = upstream_received[scenario]
    assert result["returncode"] == 0, (
        f"{scenario} did not finish through the proxy (exit {result['returncode']}):\n{result['output'][-3000:]}"
    )
    assert result["records"], f"{scenario}: the upstream received nothing"


@pytest.mark.timeout(INSTALL_TIMEOUT_S + 600)
@pytest.mark.parametrize(("scenario", "agent"), CASES, ids=[f"{s}-{a}" for s, a in CASES])
def test_every_request_keeps_the_agents_task_statement(
    upstream_received: dict[str, Any], scenario: str, agent: str
) -> None:
    marker, role, task = SCENARIOS[scenario][2][agent]
    records = upstream_received[scenario]["records"]
    bodies = _requests_of(records, marker)
    assert bodies, (
        f"{scenario}: no request from {agent} (role {role}) reached the upstream with its system prompt "
        f"{marker!r}; received: {[_shape(r['body']) for r in records]}"
    )
    missing = [
        i for i, b in enumerate(bodies) if not any(task in _text(m.get("content")) for m in b["messages"])
    ]
    assert not missing, (
        f"{scenario}: {len(missing)} of {len(bodies)} requests from {agent} (X-Agent-Role: {role}) reached the "
        f"upstream without its task statement {task[:60]!r}...; their messages: "
        + "; ".join(f"#{i}: {_shape(bodies[i])}" for i in missing)
    )
