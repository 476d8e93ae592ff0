"""Recover from overflow: a request the upstream refuses as too long is fitted and sent once more (issue 18)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import respx

from history_proxy.core.messages import Message
from history_proxy.core.tokens import TokenCounters
from history_proxy.pipeline.overflow import Overflow, overflow_of
from tests.factories import exchange, system, user
from tests.support.access_app import COMPLETION, MAIN, access_lines, make_config, serve
from tests.upstream_respx import UPSTREAM_MOCKER

WINDOW = 2000
"""The mock upstream refuses bodies whose messages hold more tokens than this."""


def openai_refusal(tokens: int) -> dict[str, Any]:
    return {
        "error": {
            "message": f"This model's maximum context length is {WINDOW} tokens. However, your messages "
            f"resulted in {tokens} tokens. Please reduce the length of the messages.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }


def test_openai_and_anthropic_refusals_for_length_are_recognised_with_their_figures() -> None:
    assert overflow_of(400, json.dumps(openai_refusal(2600)).encode()) == Overflow(window=2000, counted=2600)
    anthropic = {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "prompt is too long: 208000 tokens > 200000 maximum",
        },
    }
    assert overflow_of(400, json.dumps(anthropic).encode()) == Overflow(window=200000, counted=208000)
    other = {"error": {"message": "Invalid value for 'temperature'", "type": "invalid_request_error"}}
    assert overflow_of(400, json.dumps(other).encode()) is None
    assert overflow_of(429, b"not json") is None


def long_conversation() -> list[Message]:
    messages = [system(), user("fix the build")]
    for k in range(12):
        messages += exchange("bash", output=f"step {k}: " + "compiling module ... ok\n" * 30)
    return messages


@pytest.fixture
def small_window() -> Iterator[respx.MockRouter]:
    counter = TokenCounters().get(model="gpt-4o")

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        tokens = counter.messages(body["messages"])
        if tokens > WINDOW:
            return httpx.Response(400, json=openai_refusal(tokens))
        return httpx.Response(
            200, json={**COMPLETION, "usage": {"prompt_tokens": tokens, "completion_tokens": 1}}
        )

    with respx.mock(assert_all_called=False, using=UPSTREAM_MOCKER) as router:
        router.post(f"{MAIN}/chat/completions").mock(side_effect=answer)
        yield router


def passthrough_config() -> Any:
    return make_config(policies={"roles": {"worker": [{"type": "passthrough"}]}})


@pytest.mark.anyio
async def test_a_request_refused_as_too_long_is_retried_once_fitted_and_says_so(
    small_window: respx.MockRouter, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="history_proxy.access")
    messages = long_conversation()
    async with serve(passthrough_config()) as client:
        response = await client.post(
            "/v1/chat/completions",
            json={"model": "gpt-4o", "messages": messages},
            headers={"x-agent-role": "worker"},
        )
        metrics = (await client.get("/metrics")).text
    assert response.status_code == 200
    first, second = (json.loads(c.request.content) for c in small_window.calls)
    assert len(first["messages"]) == len(messages)
    retried = second["messages"]
    assert TokenCounters().get(model="gpt-4o").messages(retried) <= WINDOW
    assert retried[:2] == messages[:2] and retried[-2:] == messages[-2:]  # system, task, newest group kept
    budget = int(response.headers["x-history-overflow-retry"])
    assert 0 < budget < WINDOW
    [line] = access_lines(caplog)
    assert line["overflow_retry"] == budget and line["status"] == 200
    assert 'history_proxy_overflow_retries_total{outcome="retried",upstream="main"} 1.0' in metrics


@pytest.mark.anyio
async def test_a_refusal_nothing_smaller_can_answer_goes_back_as_it_came(
    small_window: respx.MockRouter,
) -> None:
    huge = [system(), user("word " * 3000)]  # the newest user message alone is over the window
    async with serve(passthrough_config()) as client:
        response = await client.post(
            "/v1/chat/completions",
            json={"model": "gpt-4o", "messages": huge},
            headers={"x-agent-role": "worker"},
        )
        metrics = (await client.get("/metrics")).text
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"
    assert "x-history-overflow-retry" not in response.headers
    assert len(small_window.calls) == 1
    assert 'history_proxy_overflow_retries_total{outcome="unfitted",upstream="main"} 1.0' in metrics


@pytest.mark.anyio
async def test_another_client_error_is_passed_through_without_a_retry() -> None:
    refusal = {
        "error": {"message": "Invalid value for 'temperature'", "type": "invalid_request_error", "code": None}
    }
    with respx.mock(assert_all_called=False, using=UPSTREAM_MOCKER) as router:
        router.post(f"{MAIN}/chat/completions").mock(return_value=httpx.Response(400, json=refusal))
        async with serve(passthrough_config()) as client:
            response = await client.post(
                "/v1/chat/completions",
                json={"model": "gpt-4o", "messages": long_conversation()},
                headers={"x-agent-role": "worker"},
            )
        assert len(router.calls) == 1
    assert response.status_code == 400 and response.json() == refusal
