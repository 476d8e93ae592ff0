"""LiteLLM's proxy with its ``headroom`` guardrail pointed at `history-proxy serve` (the engine contract).

LiteLLM (pinned in ``tests/support/litellm-requirements.txt``, in its own venv ``.venv-litellm``, built by
.ci/run or here on first use) runs with ``guardrail: headroom``, ``mode: pre_call``, ``api_base`` = the
proxy and ``api_key`` = a gateway key whose ``auth.keys[].role`` is ``worker``; its models go to a
recording upstream (the built-in mock behind :class:`tests.support.recorder.Recorder`). A recorded
tool loop is sent through LiteLLM on ``/v1/chat/completions`` and on ``/v1/messages``, growing as an
agent grows it, and the upstream must receive the chain's output: the rows LiteLLM sent to
``/v1/compress`` (read back from the proxy's access line, ``log_bodies: true``) replaced by the
engine's answer, every other row as the client sent it. The same conversation sent whole to
``/v1/compress`` and through the proxy's own route gives the same messages.

Skips, with the reason, when pip cannot build the venv (no package index).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support.processes import NETWORK_ERRORS
from tests.support.recorder import Recorder
from tests.support.serve_process import free_port, serving

pytestmark = [pytest.mark.gateways, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[1]
REQUIREMENTS = REPO / "tests" / "support" / "litellm-requirements.txt"
VENV = Path(os.environ.get("HISTORY_PROXY_LITELLM_VENV", REPO / ".venv-litellm"))
GATEWAY_KEY = "gw-key-PLANTED-0123456789abcdef"
AGENT_KEY = "agent-key-PLANTED-0123456789abcd"
MASTER_KEY = "sk-litellm-master-PLANTED-0123456789"
LONG = "\n".join(f"line {n} of /repo/src/module_{n}.py" for n in range(40))
OUTPUTS = [LONG, LONG.replace("line", "row"), LONG.replace("line", "entry"), "tests pass: 1234 passed"]


def litellm_binary() -> Path:
    """LiteLLM's CLI in its venv, built once (re-built when the requirements change)."""
    stamp, binary = VENV / ".installed", VENV / "bin" / "litellm"
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    if stamp.exists() and stamp.read_text().strip() == digest and binary.exists():
        return binary
    shutil.rmtree(VENV, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True, timeout=120)
    install = subprocess.run(
        [str(VENV / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
         "-r", str(REQUIREMENTS)],
        capture_output=True, text=True, timeout=1200, check=False,
    )  # fmt: skip
    if install.returncode != 0:
        shutil.rmtree(VENV, ignore_errors=True)
        out = install.stdout + install.stderr
        if any(error in out for error in NETWORK_ERRORS):
            pytest.skip(f"pip cannot reach the package index to build {VENV.name}: {out[-300:]}")
        pytest.fail(f"pip install -r {REQUIREMENTS} failed:\n{out[-3000:]}")
    stamp.write_text(digest + "\n")
    return binary


@contextlib.contextmanager
def litellm_proxy(binary: Path, config: dict[str, Any], work: Path) -> Iterator[str]:
    path, log = work / "litellm.yaml", work / "litellm.log"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    env = {**os.environ, "LITELLM_MASTER_KEY": MASTER_KEY, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [str(binary), "--config", str(path), "--host", "127.0.0.1", "--port", str(port)],
            cwd=work, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert process.poll() is None, log.read_text()[-3000:]
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/health/liveliness", timeout=1).status_code == 200:
                    break
            assert time.monotonic() < deadline, f"LiteLLM did not start:\n{log.read_text()[-3000:]}"
            time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@pytest.fixture(scope="module")
def stack(
    recorder: tuple[Recorder, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Recorder, str, str, Path]]:
    """The recording upstream, `history-proxy serve` and LiteLLM's proxy: (recorder, proxy, LiteLLM, log)."""
    binary = litellm_binary()
    upstream, upstream_url = recorder
    work = tmp_path_factory.mktemp("litellm")
    proxy_config = {
        "upstreams": {"main": {"base_url": upstream_url, "api_key": "upstream-key"}},
        "auth": {
            "keys": [
                {"key": GATEWAY_KEY, "tenant": "gateway", "role": "worker"},
                {"key": AGENT_KEY, "tenant": "gateway"},
            ]
        },
        "policies": {"roles": {"worker": [{"type": "last_n_observations", "n": 1}]}},
        "log_bodies": True,
    }
    (work / "proxy.yaml").write_text(yaml.safe_dump(proxy_config))
    with serving(work / "proxy.yaml", work) as (proxy_url, _):
        guardrail = {
            "guardrail": "headroom",
            "mode": "pre_call",
            "api_base": proxy_url,
            "api_key": GATEWAY_KEY,
        }
        litellm_config = {
            "model_list": [
                {
                    "model_name": "gpt-4o",
                    "litellm_params": {"model": "openai/gpt-4o", "api_base": upstream_url, "api_key": "k"},
                },
                {
                    "model_name": "claude-test",
                    "litellm_params": {
                        "model": "anthropic/claude-sonnet-4-5",
                        "api_base": upstream_url.removesuffix("/v1"),
                        "api_key": "k",
                    },
                },
            ],
            "guardrails": [
                {"guardrail_name": "history-proxy", "litellm_params": {**guardrail, "default_on": True}}
            ],
        }
        with litellm_proxy(binary, litellm_config, work) as litellm_url:
            yield upstream, proxy_url, litellm_url, work / "serve.log"


def chat_loop() -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing test."},
    ]
    for i, output in enumerate(OUTPUTS):
        call = {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": "bash", "arguments": f'{{"step": {i}}}'},
        }
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{i}", "content": output},
        ]
    return messages


def last_compress(log: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The messages of the newest ``/v1/compress`` call, from its access line, and that line."""
    lines = [json.loads(line) for line in log.read_text().splitlines() if '"path":"/v1/compress"' in line]
    return lines[-1]["body"]["messages"], lines[-1]


def compress(proxy_url: str, messages: list[dict[str, Any]], **headers: str) -> dict[str, Any]:
    answer = httpx.post(
        f"{proxy_url}/v1/compress",
        json={"messages": messages, "model": "gpt-4o"},
        headers={"Authorization": f"Bearer {GATEWAY_KEY}", **headers},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def replaced(
    conversation: list[dict[str, Any]], sent: list[dict[str, Any]], answer: list[dict[str, Any]]
) -> list[Any]:
    """``conversation`` with the rows LiteLLM sent (in order) replaced by the engine's answer for them."""
    out, at = [], 0
    for message in conversation:
        if at < len(sent) and all(
            message.get(k) == sent[at].get(k) for k in ("role", "tool_call_id", "content")
        ):
            out.append(answer[at])
            at += 1
        else:
            out.append(message)
    assert at == len(sent), "every row LiteLLM sent is a row of the conversation"
    return out


@pytest.mark.timeout(900)
def test_litellm_sends_the_chains_output_upstream_on_chat_completions(
    stack: tuple[Recorder, str, str, Path],
) -> None:
    upstream, proxy_url, litellm_url, log = stack
    conversation = chat_loop()
    elided = 0
    for end in range(
        5, len(conversation) + 1, 2
    ):  # the loop as the agent grows it, one tool result at a time
        grown = conversation[:end]
        answer = httpx.post(
            f"{litellm_url}/v1/chat/completions",
            json={"model": "gpt-4o", "messages": grown},
            headers={"Authorization": f"Bearer {MASTER_KEY}"},
            timeout=60,
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["choices"][0]["message"]["content"].startswith("mock: received")
        received = upstream.last("/v1/chat/completions")["body"]["messages"]
        sent, line = last_compress(log)
        assert line["role"] == "worker" and line["tenant"] == "gateway", "the gateway key's tenant and role"
        expected = replaced(grown, sent, compress(proxy_url, sent)["messages"])
        assert [{k: v for k, v in m.items() if v is not None} for m in received] == [
            {k: v for k, v in m.items() if v is not None} for m in expected
        ]
        elided = sum("Old environment output" in str(m.get("content")) for m in received)
    assert elided >= 1, "the worker chain elided an old observation upstream"


@pytest.mark.timeout(900)
def test_litellm_sends_the_chains_output_upstream_on_messages(stack: tuple[Recorder, str, str, Path]) -> None:
    upstream, _, litellm_url, _ = stack
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing test."}]
    for i, output in enumerate(OUTPUTS):
        use = {"type": "tool_use", "id": f"toolu_{i}", "name": "bash", "input": {"step": i}}
        messages += [
            {"role": "assistant", "content": [use]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": output}],
            },
        ]
    body = {
        "model": "claude-test",
        "max_tokens": 64,
        "system": "You are a coding agent.",
        "messages": messages,
    }
    answer = httpx.post(
        f"{litellm_url}/v1/messages", json=body, headers={"Authorization": f"Bearer {MASTER_KEY}"}, timeout=60
    )
    assert answer.status_code == 200, answer.text
    received = upstream.last("/v1/messages")["body"]
    assert "You are a coding agent." in json.dumps(received["system"])
    results = [
        b
        for m in received["messages"]
        for b in m["content"]
        if isinstance(b, dict) and b["type"] == "tool_result"
    ]
    uses = [
        b
        for m in received["messages"]
        for b in m["content"]
        if isinstance(b, dict) and b["type"] == "tool_use"
    ]
    assert [r["tool_use_id"] for r in results] == [u["id"] for u in uses] == [f"toolu_{i}" for i in range(4)]
    texts = [json.dumps(r["content"]) for r in results]
    assert "Old environment output: (40 lines omitted)" in texts[0], "an old observation is elided upstream"
    assert "tests pass: 1234 passed" in texts[-1], "the newest exchange is kept"


def test_the_same_conversation_through_the_engine_and_the_proxy_route_gives_the_same_messages(
    stack: tuple[Recorder, str, str, Path],
) -> None:
    upstream, proxy_url, _, _ = stack
    conversation = chat_loop()
    engine = compress(proxy_url, conversation, **{"X-Agent-Role": "worker"})
    routed = httpx.post(
        f"{proxy_url}/v1/chat/completions",
        json={"model": "gpt-4o", "messages": conversation},
        headers={"Authorization": f"Bearer {AGENT_KEY}", "X-Agent-Role": "worker"},
        timeout=30,
    )
    assert routed.status_code == 200, routed.text
    received = upstream.last("/v1/chat/completions")["body"]["messages"]
    assert received == engine["messages"]
    assert engine["tokens_saved"] > 0 and engine["transforms_applied"] == ["last_n_observations"]
