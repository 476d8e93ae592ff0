"""Upstreams are never a surprise: the default config reaches the providers with the client's key, and
the built-in mock answers only when chosen (``serve --mock``, ``HISTORY_PROXY_MOCK=1``), saying so.

The providers here are local recorded stand-ins shaped like OpenAI's and Anthropic's answers (no
``x-history-mock`` header), reached through ``OPENAI_UPSTREAM_URL`` and ``ANTHROPIC_UPSTREAM_URL``.
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
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.support.recorder import serve_in_thread
from tests.support.serve_process import Server, start

CLIENT_KEY = "sk-client-key-0123456789abcdefghij"


class Provider:
    """A provider stand-in: records each request's headers and body, answers in the provider's shape."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/v1/messages", self.messages, methods=["POST"]),
            ]
        )

    async def _record(self, request: Request) -> dict[str, Any]:
        body: dict[str, Any] = json.loads(await request.body())
        self.seen.append({"path": request.url.path, "headers": dict(request.headers), "body": body})
        return body

    async def chat(self, request: Request) -> JSONResponse:
        body = await self._record(request)
        message = {"role": "assistant", "content": "from the provider", "refusal": None}
        return JSONResponse(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 1,
                "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}],
                "usage": {"prompt_tokens": 8, "completion_tokens": 3, "total_tokens": 11},
            }
        )

    async def messages(self, request: Request) -> JSONResponse:
        body = await self._record(request)
        return JSONResponse(
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": [{"type": "text", "text": "from anthropic"}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 8, "output_tokens": 3},
            }
        )


@pytest.fixture(scope="module")
def providers() -> Iterator[tuple[Provider, str]]:
    provider = Provider()
    for url in serve_in_thread(provider.app):
        yield provider, url


@pytest.fixture(scope="module")
def default_config(
    providers: tuple[Provider, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """``history-proxy serve`` on the default config, no server key, the providers' URLs pointed here."""
    _, url = providers
    env = {"OPENAI_UPSTREAM_URL": url, "ANTHROPIC_UPSTREAM_URL": url}
    log = tmp_path_factory.mktemp("default-config") / "serve.log"
    yield from start("serve", log=log, ready_path="/healthz", env=env)


def test_a_client_key_reaches_the_openai_upstream_under_the_default_config(
    default_config: Server, providers: tuple[Provider, str]
) -> None:
    provider, _ = providers
    with openai.OpenAI(base_url=f"{default_config.url}/v1", api_key=CLIENT_KEY, max_retries=0) as client:
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "Hello"}]
        )
    assert raw.parse().choices[0].message.content == "from the provider"
    assert "x-history-mock" not in raw.headers
    assert provider.seen[-1]["headers"]["authorization"] == f"Bearer {CLIENT_KEY}"


def test_a_claude_model_reaches_the_anthropic_upstream_with_the_clients_key(
    default_config: Server, providers: tuple[Provider, str]
) -> None:
    """M3: the Messages quick start works against a real provider, not only while the mock answers."""
    provider, _ = providers
    with anthropic.Anthropic(base_url=default_config.url, api_key=CLIENT_KEY, max_retries=0) as client:
        message = client.messages.create(
            model="claude-sonnet-4-6", max_tokens=64, messages=[{"role": "user", "content": "Hello"}]
        )
    block = message.content[0]
    assert isinstance(block, anthropic.types.TextBlock) and block.text == "from anthropic"
    assert provider.seen[-1]["path"] == "/v1/messages"
    sent = provider.seen[-1]["headers"]  # the SDK sends its key as a Bearer token; x-api-key goes on alike
    assert sent.get("authorization") == f"Bearer {CLIENT_KEY}" or sent.get("x-api-key") == CLIENT_KEY
    httpx.post(
        f"{default_config.url}/v1/messages",
        headers={"x-api-key": CLIENT_KEY},
        json={"model": "claude-x", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
    ).raise_for_status()
    assert provider.seen[-1]["headers"]["x-api-key"] == CLIENT_KEY


def test_the_startup_line_names_each_upstream_and_where_its_key_comes_from(
    default_config: Server, providers: tuple[Provider, str]
) -> None:
    _, url = providers
    line = next(line for line in default_config.output().splitlines() if "serving on" in line)
    assert f"openai = {url} (key: client)" in line and f"anthropic = {url} (key: client)" in line
    assert "MOCK" not in default_config.output()


def test_a_server_key_is_named_as_the_servers(providers: tuple[Provider, str], tmp_path: Path) -> None:
    provider, url = providers
    env = {"OPENAI_UPSTREAM_URL": url, "ANTHROPIC_UPSTREAM_URL": url, "OPENAI_API_KEY": "sk-server-side"}
    for server in start("serve", log=tmp_path / "serve.log", ready_path="/healthz", env=env):
        assert f"openai = {url} (key: server)" in server.output()
        assert f"anthropic = {url} (key: client)" in server.output()
        httpx.post(
            f"{server.url}/v1/chat/completions",
            headers={"Authorization": f"Bearer {CLIENT_KEY}"},
            json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Hi"}]},
        ).raise_for_status()
        assert provider.seen[-1]["headers"]["authorization"] == "Bearer sk-server-side"


@pytest.mark.parametrize("how", ["--mock", "HISTORY_PROXY_MOCK=1"])
def test_the_mock_answers_only_when_chosen_and_every_answer_says_so(how: str, tmp_path: Path) -> None:
    flags, env = (["--mock"], {}) if how == "--mock" else ([], {"HISTORY_PROXY_MOCK": "1"})
    for server in start("serve", *flags, log=tmp_path / "serve.log", ready_path="/healthz", env=env):
        assert "MOCK: every answer comes from the built-in mock" in server.output()
        assert "openai = built-in mock (key: none)" in server.output()
        chat = httpx.post(
            f"{server.url}/v1/chat/completions",
            json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Hello"}]},
        )
        streamed = httpx.post(
            f"{server.url}/v1/messages",
            json={
                "model": "claude-x",
                "max_tokens": 8,
                "stream": True,
                "messages": [{"role": "user", "content": "hi"}],
            },
        )
        refused = httpx.post(
            f"{server.url}/v1/chat/completions",
            headers={"x-mock-status": "429"},
            json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Hello"}]},
        )
        for answer in (chat, streamed, refused):
            assert answer.headers["x-history-mock"] == "1", answer.text
        assert chat.json()["choices"][0]["message"]["content"].startswith("mock: received 1 messages")


def test_an_unreachable_provider_says_how_to_answer_offline(tmp_path: Path) -> None:
    """No network and the default config: a 502 that names the mock instead of a silent fake answer."""
    env = {"OPENAI_UPSTREAM_URL": "http://127.0.0.1:9/v1"}
    for server in start("serve", log=tmp_path / "serve.log", ready_path="/healthz", env=env):
        answer = httpx.post(
            f"{server.url}/v1/chat/completions",
            json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Hello"}]},
            timeout=60,
        )
        assert answer.status_code == 502 and "x-history-mock" not in answer.headers
        assert (
            "`history-proxy serve --mock` answers from the built-in mock" in answer.json()["error"]["message"]
        )


def test_openai_base_url_is_named_as_the_clients_setting_not_read(
    providers: tuple[Provider, str], tmp_path: Path
) -> None:
    """The old README's OPENAI_BASE_URL is a client setting: the startup says where the address comes from."""
    _, url = providers
    env = {"OPENAI_BASE_URL": url}
    for server in start("serve", log=tmp_path / "serve.log", ready_path="/healthz", env=env):
        assert "note: OPENAI_BASE_URL is set but this config takes the OpenAI upstream's address from" in (
            server.output()
        )
        assert "openai = https://api.openai.com/v1 (key: client)" in server.output()
