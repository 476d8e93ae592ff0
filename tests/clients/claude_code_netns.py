#!/usr/bin/env python3
"""Run the real Claude Code CLI against ``history-proxy serve`` inside a loopback-only network namespace.

Started by tests/test_claude_code_e2e.py as ``unshare -n python claude_code_netns.py SPEC.json``: the
namespace has only ``lo``, so neither the CLI nor the proxy can reach anything but each other and
the scripted upstream (``tests/corpus/recording/anthropic_recorder.py``), all started here. SPEC
names the ``claude`` binary, the work directory, the proxy config to write, the recorder's
``fail_first`` and ``profile``, ``tap`` (the CLI talks to the proxy through
tests/corpus/recording/answer_tap.py, which writes what it got back to ``<work>/answers.jsonl``) and the
prompts (``[args, prompt]`` pairs, run in order, each a ``claude -p``).
The results (each run's exit code, stdout, stderr) go to ``<work>/results.json``; the recorder's
requests to ``<work>/upstream.jsonl``. With ``"direct": true`` no proxy runs: the CLI talks to the
recorder itself (tests/corpus/recording/record_claude_code.py records what it sends that way).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tests" / "corpus" / "recording"))
from answer_tap import AnswerTap  # noqa: E402
from anthropic_recorder import AnthropicRecorder  # noqa: E402

UPSTREAM_PORT = 18555
PROXY_PORT = 18080
TAP_PORT = 18090
RUN_TIMEOUT_S = 120


def _wait(url: str, process: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the proxy exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {timeout_s} s")


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    work = Path(spec["work"])
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    recorder = AnthropicRecorder(
        work / "upstream.jsonl",
        port=UPSTREAM_PORT,
        fail_first=spec.get("fail_first", 0),
        profile=spec.get("profile", "lenient"),
    )
    recorder.start()
    tap = AnswerTap(work / "answers.jsonl", PROXY_PORT, TAP_PORT) if spec.get("tap") else None
    if tap is not None:
        tap.start()
    config = work / "proxy.yaml"
    config.write_text(
        spec["config"].replace("UPSTREAM", f"http://127.0.0.1:{UPSTREAM_PORT}/v1"), encoding="utf-8"
    )
    log = (work / "proxy.log").open("wb")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    direct = spec.get("direct", False)  # no proxy: the CLI talks to the recorder (to record what it sends)
    port = UPSTREAM_PORT if direct else TAP_PORT if tap is not None else PROXY_PORT
    command = [
        sys.executable,
        "-m",
        "history_proxy",
        "serve",
        "--config",
        str(config),
        "--port",
        str(PROXY_PORT),
    ]
    proxy = subprocess.Popen(
        ["true"] if direct else command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    results = []
    try:
        if not direct:
            _wait(f"http://127.0.0.1:{PROXY_PORT}/healthz", proxy)
        home = work / "home"
        home.mkdir(exist_ok=True)
        client_env = {
            **env,
            "HOME": str(home),
            "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{port}",
            "ANTHROPIC_API_KEY": "sk-ant-dummy-key-for-the-test",
            "ANTHROPIC_CUSTOM_HEADERS": spec.get("headers", "X-Agent-Role: worker"),
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
        }
        for args, prompt in spec["runs"]:
            done = subprocess.run(
                [spec["claude"], "-p", *args, "--", prompt],
                cwd=work,
                env=client_env,
                capture_output=True,
                text=True,
                timeout=RUN_TIMEOUT_S,
                check=False,
            )
            results.append({"returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr})
    finally:
        proxy.terminate()
        try:
            proxy.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proxy.kill()
        log.close()
        recorder.stop()
        if tap is not None:
            tap.stop()
        (work / "results.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
