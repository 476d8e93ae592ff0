"""Redaction of logged request bodies holds for any JSON the proxy accepts, however deeply nested."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest
import respx

from proxy.app import create_app
from proxy.config import parse_config
from proxy.logs import REDACTED, redact
from tests.upstream_respx import UPSTREAM_MOCKER

pytestmark = pytest.mark.anyio

MAIN = "https://upstream.test/v1"
SECRET = "sk-PLANTEDsecret0123456789abcdef"
COMPLETION = {"object": "chat.completion", "choices": [{"message": {"role": "assistant", "content": "ok"}}]}



def nested(depth: int, leaf: Any) -> Any:
    value = leaf
    for level in range(depth):
        value = {"inner": value} if level % 2 else [value]
    return value


def innermost(value: Any) -> Any:
    while isinstance(value, dict | list):
        value = value["inner"] if isinstance(value, dict) else value[0]
    return value


def test_a_body_nested_thousands_of_levels_deep_is_redacted_all_the_way_down() -> None:
    body = nested(10_000, f"key {SECRET}")
    redacted = redact(body)
    assert innermost(redacted) == f"key {REDACTED}"
    assert innermost(body) == f"key {SECRET}"  # the original is left as it was


def test_redaction_keeps_order_values_and_shape_and_replaces_secret_named_fields() -> None:
    body = {"a": [1, 2.5, None, True, "x", {"password": "hunter2", "note": "Bearer abcdefgh1234"}], "b": {}}
    assert redact(body, ["x"]) == {
        "a": [1, 2.5, None, True, REDACTED, {"password": REDACTED, "note": f"Bearer {REDACTED}"}],
        "b": {},
    }
    assert list(redact(body)) == ["a", "b"]


async def test_log_bodies_writes_the_access_line_for_a_deeply_nested_request(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="history_proxy.access")
    config = parse_config({"upstreams": {"main": {"base_url": MAIN}}, "log_bodies": True}, env={})
    app = create_app(config)
    body = {
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": "hi"}],
        "metadata": nested(600, SECRET),
    }
    with respx.mock(using=UPSTREAM_MOCKER) as router:
        router.post(f"{MAIN}/chat/completions").mock(return_value=httpx.Response(200, json=COMPLETION))
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://p") as client,
        ):
            answer = await client.post("/v1/chat/completions", json=body)
    assert answer.status_code == 200
    [line] = [r for r in caplog.records if r.name == "history_proxy.access"]
    fields = json.loads(line.getMessage())
    assert fields["status"] == 200 and innermost(fields["body"]["metadata"]) == REDACTED
    assert SECRET not in caplog.text
