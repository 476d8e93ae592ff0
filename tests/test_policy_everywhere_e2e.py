"""The global secret filter reaches every message the proxy forwards, through the real `history-proxy serve`.

Config: ``config/default.yaml`` (its global ``remove_regex`` strips ``sk-...`` keys) with its upstreams
pointed at the built-in mock behind a recorder, so each test checks what the upstream received. Two
places the filter used to miss: the pinned messages of ``/v1/messages`` (mid-conversation ``system``
messages and unknown roles), and an assistant message whose whole text is a secret.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
import yaml

from history_proxy.filters.remove_regex import PLACEHOLDER
from history_proxy.surfaces.history_free import INSTRUCTIONS_FILTERED
from history_proxy.surfaces.messages_pinned import PINNED_FILTERED
from history_proxy.surfaces.messages_valid import REMOVED
from tests.support.recorder import Recorder, recorder  # noqa: F401 - the fixture
from tests.support.serve_process import Server, start

REPO = Path(__file__).resolve().parents[1]
SECRET = "sk-" + "Zq9Xw8Vu7T" * 3
ROLES = ("default", "worker", "orchestrator")


@pytest.fixture(scope="module")
def proxy(recorder: tuple[Recorder, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:  # noqa: F811
    folder = tmp_path_factory.mktemp("policy_everywhere")
    raw = yaml.safe_load((REPO / "config" / "default.yaml").read_text(encoding="utf-8"))
    url = recorder[1]
    raw["upstreams"] = {
        "openai": {"base_url": url},
        "claude": {"base_url": url, "api": "anthropic", "api_key": "sk-ant-upstream"},
    }
    raw["routes"] = [{"model": "claude-*", "upstream": "claude"}]
    config = folder / "config.yaml"
    config.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    yield from start("serve", "--config", str(config), log=folder / "proxy.log", ready_path="/healthz")


@pytest.fixture
def upstream(recorder: tuple[Recorder, str]) -> Recorder:  # noqa: F811
    """What the upstream received (the recorder behind the proxy)."""
    return recorder[0]


OPEN: list[anthropic.Anthropic | openai.OpenAI] = []
"""The SDK clients a test made, closed after it (an unclosed socket warns later, in another test)."""


@pytest.fixture(autouse=True)
def close_clients() -> Iterator[None]:
    yield
    while OPEN:
        OPEN.pop().close()


def claude(server: Server, role: str) -> anthropic.Anthropic:
    client = anthropic.Anthropic(
        base_url=server.url, api_key="client-key", max_retries=0, default_headers={"X-Agent-Role": role}
    )
    OPEN.append(client)
    return client


def oai(server: Server, role: str) -> openai.OpenAI:
    client = openai.OpenAI(
        base_url=f"{server.url}/v1",
        api_key="client-key",
        max_retries=0,
        default_headers={"X-Agent-Role": role},
    )
    OPEN.append(client)
    return client


def with_pinned_secrets() -> list[Any]:
    """Claude Code's shape: mid-conversation system messages (string and text blocks) holding a key.

    ``list[Any]``: the SDK's types do not model a system message carrying ``output_config``."""
    return [
        {"role": "user", "content": [{"type": "text", "text": "read a.txt"}]},
        {"role": "system", "content": f"# Environment\nkey: {SECRET}", "output_config": {"effort": "low"}},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "A says hi"}]},
        {"role": "assistant", "content": "a.txt says hi"},
        {"role": "user", "content": "now b.txt"},
        {
            "role": "system",
            "content": [
                {
                    "type": "text",
                    "text": f"reminder {SECRET} b is big",
                    "cache_control": {"type": "ephemeral"},
                },
                {"type": "text", "text": SECRET},
            ],
        },
    ]


@pytest.mark.parametrize("role", ROLES)
def test_a_secret_in_a_mid_conversation_system_message_never_reaches_the_upstream(
    proxy: Server,
    upstream: Recorder,
    role: str,
) -> None:
    raw = claude(proxy, role).messages.with_raw_response.create(
        model="claude-test-model",
        max_tokens=64,
        tools=[{"name": "Read", "input_schema": {"type": "object"}}],
        messages=with_pinned_secrets(),
    )
    assert raw.parse().type == "message"
    sent = upstream.last("/v1/messages")["body"]["messages"]
    assert SECRET not in json.dumps(sent)
    systems = [m for m in sent if m["role"] == "system"]
    assert systems == [  # kept, in place, every other field and block as sent; the emptied block gone
        {"role": "system", "content": "# Environment\nkey: ", "output_config": {"effort": "low"}},
        {
            "role": "system",
            "content": [
                {"type": "text", "text": "reminder  b is big", "cache_control": {"type": "ephemeral"}}
            ],
        },
    ]
    assert sent[-1] == systems[-1]
    assert PINNED_FILTERED in raw.headers["x-history-notes"].split(",")


def test_a_pinned_message_made_only_of_a_secret_stays_with_a_placeholder(
    proxy: Server,
    upstream: Recorder,
) -> None:
    messages: Any = [
        {"role": "user", "content": "hi"},
        {"role": "system", "content": SECRET},
        {"role": "system", "content": [{"type": "text", "text": SECRET}, {"type": "text", "text": "rest"}]},
        {"role": "system", "content": [{"type": "text", "text": f" {SECRET} "}]},
    ]
    claude(proxy, "default").messages.create(model="claude-test-model", max_tokens=64, messages=messages)
    sent = upstream.last("/v1/messages")["body"]["messages"]
    assert sent == [
        {"role": "user", "content": "hi"},
        {"role": "system", "content": REMOVED},
        {"role": "system", "content": [{"type": "text", "text": "rest"}]},
        {"role": "system", "content": [{"type": "text", "text": REMOVED}]},
    ]


def test_a_request_of_pinned_messages_only_passes_the_secret_filter(
    proxy: Server,
    upstream: Recorder,
) -> None:
    messages: Any = [{"role": "system", "content": f"use {SECRET}"}]
    raw = claude(proxy, "worker").messages.with_raw_response.create(
        model="claude-test-model", max_tokens=64, messages=messages
    )
    assert raw.status_code == 200
    assert upstream.last("/v1/messages")["body"]["messages"] == [{"role": "system", "content": "use "}]
    assert PINNED_FILTERED in raw.headers["x-history-notes"].split(",")


@pytest.mark.parametrize("role", ROLES)
def test_an_assistant_message_made_only_of_a_secret_never_reaches_the_upstream_on_messages(
    proxy: Server,
    upstream: Recorder,
    role: str,
) -> None:
    messages: Any = [
        {"role": "user", "content": "what is the key?"},
        {"role": "assistant", "content": SECRET},
        {"role": "user", "content": "thanks; and the other one?"},
        {"role": "assistant", "content": [{"type": "text", "text": SECRET}]},
        {"role": "user", "content": "ok"},
    ]
    claude(proxy, role).messages.create(model="claude-test-model", max_tokens=64, messages=messages)
    sent = upstream.last("/v1/messages")["body"]["messages"]
    assert SECRET not in json.dumps(sent)
    assert [m["role"] for m in sent] == ["user", "assistant", "user", "assistant", "user"]
    assert PLACEHOLDER in json.dumps(sent[1]) and PLACEHOLDER in json.dumps(sent[3])


def test_an_assistant_message_made_only_of_a_secret_never_reaches_the_upstream_on_chat_and_responses(
    proxy: Server,
    upstream: Recorder,
) -> None:
    client = oai(proxy, "default")
    client.chat.completions.create(
        model="gpt-4o",
        messages=[
            {"role": "user", "content": "key?"},
            {"role": "assistant", "content": SECRET},
            {"role": "user", "content": "ok"},
        ],
    )
    sent = upstream.last("/v1/chat/completions")["body"]["messages"]
    assert sent[1] == {"role": "assistant", "content": PLACEHOLDER}
    said: list[Any] = [  # an output_text without annotations, as clients send it: not in the SDK's types
        {"role": "user", "content": "key?"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": SECRET}]},
        {"role": "user", "content": "ok"},
    ]
    client.responses.create(model="gpt-4o", input=said)
    items = upstream.last("/v1/responses")["body"]["input"]
    assert SECRET not in json.dumps(items)
    assert items[1]["content"] == [{"type": "output_text", "text": PLACEHOLDER}]


@pytest.mark.parametrize("previous", [None, "resp_1"])
def test_a_secret_in_responses_instructions_never_reaches_the_upstream(
    proxy: Server,
    upstream: Recorder,
    previous: str | None,
) -> None:
    extra: Any = {"previous_response_id": previous} if previous else {}
    raw = oai(proxy, "worker").responses.with_raw_response.create(
        model="gpt-4o", instructions=f"Be brief. Key: {SECRET}", input="hello", **extra
    )
    sent = upstream.last("/v1/responses")["body"]
    assert sent["instructions"] == "Be brief. Key: "
    assert sent["input"] == "hello" and sent.get("previous_response_id") == previous
    assert INSTRUCTIONS_FILTERED in raw.headers["x-history-notes"].split(",")
