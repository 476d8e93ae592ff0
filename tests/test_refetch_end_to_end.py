"""Re-fetches counted live through `history-proxy serve` on chat, Responses and Messages (issue 23).

An agent reads a.py, then b.py, then asks for a.py again after the worker chain elided its first
read: that last call is a re-fetch. The proxy says so in ``x-history-notes``, in the access line and
in ``history_proxy_refetch_total{role}``; a call that repeats nothing hidden is not counted.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest
from anthropic.types import MessageParam, ToolUseBlockParam
from openai.types.chat import ChatCompletionMessageFunctionToolCallParam, ChatCompletionMessageParam
from openai.types.responses import ResponseInputParam

from tests.support.serve_process import Server, start

CONFIG = """\
upstreams:
  openai: {base_url: "mock://"}
policies:
  roles:
    worker: [{type: last_n_observations, n: 1}]
"""
A_PY = "def alpha():\n    return 4417\n" * 20
B_PY = "def beta():\n    return 8812\n" * 20


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("refetch")
    config = folder / "config.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    yield from start("serve", "--config", str(config), log=folder / "proxy.log", ready_path="/healthz")


def refetch_total(server: Server) -> float:
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    found = re.search(r'history_proxy_refetch_total\{role="worker"\} ([0-9.e+]+)', text)
    return float(found.group(1)) if found else 0.0


def access_refetches(server: Server, request_id: str) -> int:
    for _ in range(50):  # the line is written just after the answer
        for line in server.output().splitlines():
            if request_id in line and line.startswith("{"):
                fields: dict[str, Any] = json.loads(line)
                if fields.get("request_id") == request_id:
                    return int(fields["refetches"])
        time.sleep(0.1)
    raise AssertionError(f"no access line for {request_id}:\n{server.output()}")


def chat_history(again: str) -> list[ChatCompletionMessageParam]:
    def call(i: int, path: str) -> ChatCompletionMessageFunctionToolCallParam:
        arguments = json.dumps({"path": path})
        return {"id": f"c{i}", "type": "function", "function": {"name": "read_file", "arguments": arguments}}

    return [
        {"role": "user", "content": "fix alpha"},
        {"role": "assistant", "content": None, "tool_calls": [call(1, "a.py")]},
        {"role": "tool", "tool_call_id": "c1", "content": A_PY},
        {"role": "assistant", "content": None, "tool_calls": [call(2, "b.py")]},
        {"role": "tool", "tool_call_id": "c2", "content": B_PY},
        {"role": "assistant", "content": None, "tool_calls": [call(3, again)]},
        {"role": "tool", "tool_call_id": "c3", "content": A_PY if again == "a.py" else "new"},
    ]


def responses_input(again: str) -> ResponseInputParam:
    items: ResponseInputParam = [{"role": "user", "content": "fix alpha"}]
    for i, (path, output) in enumerate([("a.py", A_PY), ("b.py", B_PY), (again, A_PY)], start=1):
        arguments = json.dumps({"path": path})
        items.append(
            {"type": "function_call", "call_id": f"c{i}", "name": "read_file", "arguments": arguments}
        )
        items.append({"type": "function_call_output", "call_id": f"c{i}", "output": output})
    return items


def messages_history(again: str) -> list[MessageParam]:
    history: list[MessageParam] = [{"role": "user", "content": "fix alpha"}]
    for i, (path, output) in enumerate([("a.py", A_PY), ("b.py", B_PY), (again, A_PY)], start=1):
        use: ToolUseBlockParam = {
            "type": "tool_use",
            "id": f"tu{i}",
            "name": "read_file",
            "input": {"path": path},
        }
        history.append({"role": "assistant", "content": [use]})
        history.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"tu{i}", "content": output}]}
        )
    return history


def send(server: Server, surface: str, again: str, request_id: str) -> httpx2.Headers:
    headers = {"X-Agent-Role": "worker", "x-request-id": request_id}
    if surface in ("chat", "responses"):
        with openai.OpenAI(
            base_url=f"{server.url}/v1", api_key="k", max_retries=0, default_headers=headers
        ) as client:
            if surface == "chat":
                return client.chat.completions.with_raw_response.create(
                    model="gpt-4o-mini",
                    messages=chat_history(again),
                ).headers
            return client.responses.with_raw_response.create(
                model="gpt-4o-mini",
                input=responses_input(again),
            ).headers
    with anthropic.Anthropic(
        base_url=server.url, api_key="k", max_retries=0, default_headers=headers
    ) as claude:
        return claude.messages.with_raw_response.create(
            model="claude-test-model",
            max_tokens=50,
            messages=messages_history(again),
        ).headers


@pytest.mark.parametrize("surface", ["chat", "responses", "messages"])
def test_asking_again_for_an_elided_output_is_counted_as_a_refetch(proxy: Server, surface: str) -> None:
    before = refetch_total(proxy)
    headers = send(proxy, surface, "a.py", f"refetch-{surface}")
    assert "refetch:1" in headers.get("x-history-notes", "").split(",")
    assert "refetch" not in headers["x-history-filters"]
    assert access_refetches(proxy, f"refetch-{surface}") == 1
    assert refetch_total(proxy) == before + 1


@pytest.mark.parametrize("surface", ["chat", "responses", "messages"])
def test_a_call_that_repeats_nothing_hidden_is_not_a_refetch(proxy: Server, surface: str) -> None:
    before = refetch_total(proxy)
    headers = send(proxy, surface, "c.py", f"fresh-{surface}")
    assert "refetch" not in headers.get("x-history-notes", "")
    assert access_refetches(proxy, f"fresh-{surface}") == 0
    assert refetch_total(proxy) == before
