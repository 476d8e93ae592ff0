"""Redaction of logged request bodies holds for any JSON the proxy accepts, however deeply nested; the JSON
line's time and the access record's origin are those ``logging`` would give."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import respx

from history_proxy.config.loading import parse_config
from history_proxy.observability import metrics
from history_proxy.observability.logs import REDACTED, JsonFormatter, redact
from history_proxy.server.app import create_app
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


@pytest.mark.parametrize(
    "created",
    [
        1_700_000_000.0,
        1_000_000.0004999,
        1_000_000.0005,
        1_000_000.9994999,
        1_700_000_000.9995,
        1_700_000_000.9999994,
        1_700_000_000.9999996,  # rounds up into the next second
        1_700_000_059.9999999,  # ... and the next minute
        1_234_567_890.123456,
    ],
)
def test_the_json_line_time_is_the_records_utc_time_to_the_millisecond(created: float) -> None:
    record = logging.LogRecord("history_proxy.test", logging.INFO, __file__, 1, "hello", (), None)
    record.created = created
    expected = datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    for _ in range(2):  # the second time from the second's cached text
        assert json.loads(JsonFormatter().format(record))["ts"] == expected


def test_a_json_line_with_non_string_keys_is_still_one_json_object() -> None:
    record = logging.LogRecord("history_proxy.access", logging.INFO, __file__, 1, "ignored", (), None)
    record.access = {"request_id": "r1", "tokens_by_role_before": {1: 2, "user": 3}, "status": 200}
    line = json.loads(JsonFormatter().format(record))
    assert line["tokens_by_role_before"] == {"1": 2, "user": 3} and line["status"] == 200
    assert list(line)[:4] == ["ts", "level", "logger", "request_id"]


async def test_the_access_record_says_it_comes_from_metrics_finish_as_logger_info_would(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger="history_proxy.access")
    config = parse_config({"upstreams": {"main": {"base_url": MAIN}}}, env={})
    app = create_app(config)
    with respx.mock(using=UPSTREAM_MOCKER) as router:
        router.post(f"{MAIN}/chat/completions").mock(return_value=httpx.Response(200, json=COMPLETION))
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://p") as client,
        ):
            body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
            await client.post("/v1/chat/completions", json=body)
            monkeypatch.setattr(logging, "_srcfile", None)  # the documented switch that skips the lookup
            await client.post("/v1/chat/completions", json=body)
    first, second = [r for r in caplog.records if r.name == "history_proxy.access"]
    assert (first.pathname, first.funcName, first.module) == (metrics.__file__, "finish", "metrics")
    assert first.lineno > 0 and first.levelname == "INFO" and vars(first)["access"]["status"] == 200
    assert (second.pathname, second.lineno, second.funcName) == ("(unknown file)", 0, "(unknown function)")
    assert json.loads(second.getMessage())["status"] == 200
