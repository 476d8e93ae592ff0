"""A real trace viewer: Arize Phoenix receives history-proxy's spans over OTLP/HTTP and returns them.

Phoenix runs from its own venv (``.venv-phoenix``, ``arize-phoenix`` installed once; the test skips
with the reason when pip cannot reach the index), on free loopback ports with a temporary working
directory. The proxy (``history-proxy serve``, the built-in mock upstream) exports to it; the test
reads the spans back from Phoenix's REST API and, where Chromium is installed, screenshots the
trace view headless (``scripts/telemetry_demo.py`` makes the picture in docs/telemetry.md).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import httpx
import openai
import pytest

from tests.support.client_spans import client_span, root_trace
from tests.support.processes import NETWORK_ERRORS, spawn, stop
from tests.support.serve_process import Server, free_port, start

pytestmark = pytest.mark.phoenix

REPO = Path(__file__).resolve().parents[1]
PHOENIX = "arize-phoenix==20.26.1"
VENV = Path(os.environ.get("HISTORY_PROXY_PHOENIX_VENV", REPO / ".venv-phoenix"))
INSTALL_TIMEOUT_S = 900
START_TIMEOUT_S = 180


def phoenix_command() -> Path:
    """The venv's ``phoenix`` command, installed once."""
    stamp, command = VENV / ".installed", VENV / "bin" / "phoenix"
    if stamp.exists() and stamp.read_text().strip() == PHOENIX and command.exists():
        return command
    shutil.rmtree(VENV, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True, timeout=120)
    pip = [str(VENV / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", PHOENIX]
    try:
        installed = subprocess.run(pip, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        shutil.rmtree(VENV, ignore_errors=True)
        pytest.skip(f"pip install {PHOENIX} took over {INSTALL_TIMEOUT_S}s (package index unreachable?)")
    if installed.returncode != 0:
        out = installed.stdout + installed.stderr
        shutil.rmtree(VENV, ignore_errors=True)
        if any(error in out for error in NETWORK_ERRORS):
            pytest.skip(f"pip cannot install {PHOENIX}: {out.strip().splitlines()[-1][:300]}")
        pytest.fail(f"pip install {PHOENIX} failed:\n{out[-3000:]}")
    stamp.write_text(PHOENIX + "\n")
    return command


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    command = phoenix_command()
    folder = tmp_path_factory.mktemp("phoenix")
    port = free_port()
    env = {
        **os.environ,
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(free_port()),
        "PHOENIX_WORKING_DIR": str(folder),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    process = spawn([str(command), "serve"], folder / "phoenix.log", env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"phoenix did not start:\n{(folder / 'phoenix.log').read_text()[-3000:]}")
            time.sleep(0.5)
        yield url
    finally:
        stop(process)


@pytest.fixture(scope="module")
def proxy(phoenix: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("proxy")
    config = folder / "config.yaml"
    config.write_text(
        f"""
upstreams:
  mock: {{base_url: "mock://"}}
telemetry: {{enabled: true, endpoint: "{phoenix}/v1/traces", service_name: history-proxy}}
policies:
  roles:
    coder: [{{type: tool_result_truncation, keep_recent: 1, max_chars: 20}}]
""",
        encoding="utf-8",
    )
    with mock.patch.dict(os.environ, {"OTEL_BSP_SCHEDULE_DELAY": "100"}):
        yield from start("serve", "--config", str(config), log=folder / "proxy.log", ready_path="/healthz")


def phoenix_spans(phoenix: str, trace_id: str) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        answer = httpx.get(f"{phoenix}/v1/projects/default/spans", params={"limit": 100}, timeout=10)
        if answer.status_code == 200:
            found = [s for s in answer.json()["data"] if s["context"]["trace_id"] == trace_id]
            if any(s["name"].startswith("chat ") for s in found):
                return found
        time.sleep(0.5)
    return []


def test_phoenix_shows_the_proxys_span_with_the_role_and_the_chains_figures(
    phoenix: str, proxy: Server, tmp_path: Path
) -> None:
    span, headers = client_span()
    history: Any = [
        {"role": "user", "content": "fix the bug"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "cat", "arguments": "{}"}}
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "x" * 400},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c2", "type": "function", "function": {"name": "cat", "arguments": "{}"}}
        ]},
        {"role": "tool", "tool_call_id": "c2", "content": "y" * 400},
    ]  # fmt: skip
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="k", max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=history, extra_headers={**headers, "X-Agent-Role": "coder"}
    )
    span.end()
    spans = phoenix_spans(phoenix, root_trace(span))
    chat = [s for s in spans if s["name"] == "chat gpt-4o-mini"]
    assert chat, f"phoenix has no proxy span: {[s['name'] for s in spans]}"
    attributes = chat[0]["attributes"]
    assert chat[0]["span_kind"] == "LLM"  # Phoenix read the GenAI conventions
    assert chat[0]["parent_id"] == f"{span.get_span_context().span_id:016x}"
    assert attributes["history_proxy.role"] == "coder"
    assert attributes["history_proxy.chain"] == ["tool_result_truncation"]
    assert attributes["history_proxy.tokens_before"] == int(raw.headers["x-history-tokens-before"])
    assert attributes["history_proxy.tokens_after"] == int(raw.headers["x-history-tokens-after"])
    assert attributes["history_proxy.tokens_after"] < attributes["history_proxy.tokens_before"]
    assert {s["name"] for s in spans} >= {"history_proxy.shape", "upstream mock"}
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        return
    project = httpx.get(f"{phoenix}/v1/projects").json()["data"][0]["id"]
    picture = tmp_path / "trace.png"
    subprocess.run(
        [
            chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--disable-background-networking", "--disable-component-update", "--no-first-run",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",  # loopback only
            f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1600,1000",
            "--virtual-time-budget=20000", f"--screenshot={picture}",
            f"{phoenix}/projects/{project}/traces/{root_trace(span)}",
        ],
        capture_output=True,
        timeout=120,
        check=False,
    )  # fmt: skip
    assert picture.exists() and picture.stat().st_size > 20_000  # the trace view drawn, not a blank page
