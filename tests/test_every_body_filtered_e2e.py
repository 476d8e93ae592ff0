"""Every body that carries a conversation passes the global policies, through the real `history-proxy serve`.

Issue 34, R4: ``POST /v1/responses/compact``, ``/v1/responses/input_tokens``, ``/v1/messages/batches`` and
``/v1/completions`` used to be forwarded raw, so a key in them reached the upstream while the same body
on ``/v1/responses`` was filtered. Config: ``config/default.yaml`` (its global ``remove_regex`` strips
``sk-...`` keys) with its upstreams pointed at the built-in mock behind a recorder; each test sends a
secret with the official SDK and checks what the upstream received. An unknown path stays raw.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
import yaml

from tests.support.recorder import Recorder, recorder  # noqa: F401 - the fixture
from tests.support.serve_process import Server, start

REPO = Path(__file__).resolve().parents[1]
SECRET = "sk-" + "Rt5Yu6Io7P" * 3


@pytest.fixture(scope="module")
def proxy(recorder: tuple[Recorder, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:  # noqa: F811
    folder = tmp_path_factory.mktemp("every_body")
    raw = yaml.safe_load((REPO / "config" / "default.yaml").read_text(encoding="utf-8"))
    url = recorder[1]
    raw["upstreams"] = {
        "openai": {"base_url": url, "responses_compaction": "native"},
        "claude": {"base_url": url, "api": "anthropic", "api_key": "sk-ant-upstream"},
    }
    raw["routes"] = [{"model": "claude-*", "upstream": "claude"}]
    config = folder / "config.yaml"
    config.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    yield from start("serve", "--config", str(config), log=folder / "proxy.log", ready_path="/healthz")


@pytest.fixture
def upstream(recorder: tuple[Recorder, str]) -> Recorder:  # noqa: F811
    return recorder[0]


@pytest.fixture
def oai(proxy: Server) -> Iterator[openai.OpenAI]:
    client = openai.OpenAI(
        base_url=f"{proxy.url}/v1",
        api_key="client-key",
        max_retries=0,
        default_headers={"X-Agent-Role": "worker"},
    )
    yield client
    client.close()


def history() -> list[Any]:
    """A Codex-like Responses history with a key in the task, a tool output and an assistant message."""
    return [
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": f"deploy with {SECRET}"}],
        },
        {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": '{"cmd": "env"}'},
        {"type": "function_call_output", "call_id": "c1", "output": f"OPENAI_API_KEY={SECRET}\nPATH=/bin"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": f"found {SECRET}"}],
        },
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "now compact"}]},
    ]


def test_a_secret_in_a_compact_body_never_reaches_the_upstream_and_the_role_chain_applies(
    oai: openai.OpenAI, upstream: Recorder
) -> None:
    raw = oai.responses.with_raw_response.compact(model="gpt-5", input=history())
    compacted = raw.parse()
    assert compacted.object == "response.compaction"
    assert compacted.output[-1].type == "compaction"
    sent = upstream.last("/v1/responses/compact")["body"]
    assert SECRET not in json.dumps(sent)
    assert "OPENAI_API_KEY=" in json.dumps(sent)  # the rest of the output is still there
    assert raw.headers["x-history-role"] == "worker"
    assert "worker_view" in raw.headers["x-history-filters"]  # the caller's chain: its output is the history


def test_a_secret_in_an_input_tokens_body_never_reaches_the_upstream(
    oai: openai.OpenAI, upstream: Recorder
) -> None:
    with pytest.raises(openai.NotFoundError):  # the mock has no input_tokens route: it answers 404
        oai.responses.input_tokens.count(model="gpt-5", input=history(), instructions=f"key {SECRET}")
    sent = upstream.last("/v1/responses/input_tokens")["body"]
    assert SECRET not in json.dumps(sent)
    assert sent["input"][4] == history()[4]  # what the filter does not touch is sent as it came


@pytest.mark.parametrize("prompt", [f"complete: {SECRET} is", [f"a {SECRET}", "plain", f"{SECRET}"]])
def test_a_secret_in_a_legacy_completions_prompt_never_reaches_the_upstream(
    oai: openai.OpenAI, upstream: Recorder, prompt: str | list[str]
) -> None:
    with pytest.raises(openai.NotFoundError):
        oai.completions.create(model="gpt-3.5-turbo-instruct", prompt=prompt, max_tokens=4)
    sent = upstream.last("/v1/completions")["body"]
    assert SECRET not in json.dumps(sent)
    assert type(sent["prompt"]) is type(prompt)
    assert sent["max_tokens"] == 4
    if isinstance(prompt, list):
        assert sent["prompt"][1] == "plain"


def test_a_secret_in_each_request_of_a_messages_batch_never_reaches_the_upstream(
    proxy: Server, upstream: Recorder
) -> None:
    client = anthropic.Anthropic(base_url=proxy.url, api_key="client-key", max_retries=0)
    requests: Any = [
        {
            "custom_id": f"r{n}",
            "params": {
                "model": "claude-test-model",
                "max_tokens": 16,
                "system": f"deploy key {SECRET}",
                "messages": [
                    {"role": "user", "content": f"use {SECRET} please"},
                    {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
                    {"role": "user", "content": [{"type": "text", "text": f"again {SECRET}"}]},
                ],
            },
        }
        for n in range(3)
    ]
    with client, pytest.raises(anthropic.NotFoundError):
        client.messages.batches.create(requests=requests)
    sent = upstream.last("/v1/messages/batches")["body"]
    assert SECRET not in json.dumps(sent)
    assert [r["custom_id"] for r in sent["requests"]] == ["r0", "r1", "r2"]
    assert sent["requests"][2]["params"]["messages"][1] == requests[2]["params"]["messages"][1]


def test_a_listing_of_batches_is_forwarded_as_a_get(proxy: Server, upstream: Recorder) -> None:
    answer = httpx.get(f"{proxy.url}/v1/messages/batches", headers={"x-api-key": "k"})
    assert answer.status_code == 404  # the mock's own answer: the proxy forwarded it
    assert upstream.seen[-1]["path"] == "/v1/messages/batches"


def test_an_unknown_path_is_forwarded_raw(proxy: Server, upstream: Recorder) -> None:
    body = {"model": "gpt-5", "messages": [{"role": "user", "content": SECRET}]}
    httpx.post(f"{proxy.url}/v1/some/new/endpoint", json=body)
    assert upstream.last("/v1/some/new/endpoint")["body"] == body
