"""The mock's failure-test headers (``x-mock-status``, ``x-mock-delay-ms``) on every route, each
answered in its API's own error shape."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from history_proxy.mock.upstream import create_mock_app

BODIES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    "/v1/responses": {"model": "m", "input": "hi"},
    "/v1/messages": {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
}


def post(path: str, headers: dict[str, str]) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=create_mock_app())
        async with httpx.AsyncClient(transport=transport, base_url="http://mock") as client:
            return await client.post(path, json=BODIES[path], headers=headers)

    return asyncio.run(go())


def error_message(response: httpx.Response) -> str:
    body = response.json()
    if "type" in body:  # Anthropic's shape
        assert body["type"] == "error"
    message = body["error"]["message"]
    assert isinstance(message, str)
    return message


@pytest.mark.parametrize("path", sorted(BODIES))
def test_a_forced_status_is_answered_after_the_asked_delay_in_the_routes_shape(path: str) -> None:
    started = time.perf_counter()
    response = post(path, {"x-mock-status": "429", "x-mock-delay-ms": "50"})
    assert time.perf_counter() - started >= 0.05
    assert response.status_code == 429 and response.headers["retry-after"] == "1"
    assert error_message(response) == "mock: forced status 429"


@pytest.mark.parametrize("path", sorted(BODIES))
@pytest.mark.parametrize(
    ("headers", "said"),
    [
        ({"x-mock-delay-ms": "soon"}, "x-mock-delay-ms must be a number of milliseconds"),
        ({"x-mock-status": "200"}, "x-mock-status must be an HTTP error status (400-599)"),
        ({"x-mock-status": "abc"}, "x-mock-status must be an HTTP error status (400-599)"),
    ],
)
def test_a_bad_control_header_is_a_400_naming_it(path: str, headers: dict[str, str], said: str) -> None:
    response = post(path, headers)
    assert response.status_code == 400
    assert error_message(response) == said


@pytest.mark.parametrize("path", sorted(BODIES))
def test_without_control_headers_the_route_answers(path: str) -> None:
    assert post(path, {"x-mock-delay-ms": "0"}).status_code == 200
