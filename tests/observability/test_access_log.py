"""One structured access line per request: fields an operator greps, never content or keys (issue 7)."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import respx

from history_proxy.observability.logs import JsonFormatter, TextFormatter, redact
from tests.factories import user
from tests.support.access_app import (
    CLIENT_SECRET,
    COMPLETION,
    CONTENT,
    MAIN,
    PROXY_KEY,
    UPSTREAM_KEY,
    access_lines,
    conversation,
    make_config,
    serve,
)
from tests.upstream_respx import UPSTREAM_MOCKER

pytestmark = pytest.mark.anyio

FIELDS = {
    "request_id",
    "role",
    "agent",
    "tenant",
    "model",
    "upstream",
    "status",
    "stream",
    "mode",
    "messages_before",
    "messages_after",
    "tokens_before",
    "tokens_after",
    "tokens_by_role_before",
    "tokens_by_role_after",
    "filters",
    "overhead_ms",
    "total_ms",
}


@pytest.fixture
def mocked() -> Iterator[respx.MockRouter]:
    with respx.mock(assert_all_called=False, using=UPSTREAM_MOCKER) as router:
        router.post(f"{MAIN}/chat/completions").mock(return_value=httpx.Response(200, json=COMPLETION))
        yield router


async def test_each_request_writes_one_json_line_with_who_where_and_what_the_chain_did(
    mocked: respx.MockRouter, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="history_proxy.access")
    async with serve(make_config()) as client:
        response = await client.post(
            "/v1/chat/completions",
            json={"model": "gpt-4o", "messages": conversation()},
            headers={"x-agent-role": "worker", "x-agent-name": "coder-1", "x-request-id": "trace-42"},
        )
    [line] = access_lines(caplog)
    assert set(line) >= FIELDS
    assert line["request_id"] == "trace-42" == response.headers["x-request-id"]
    assert (line["role"], line["agent"], line["tenant"], line["model"], line["upstream"]) == (
        "worker",
        "coder-1",
        "team-a",
        "gpt-4o",
        "main",
    )
    assert (line["status"], line["stream"], line["mode"]) == (200, False, "enforce")
    assert line["tokens_before"] == int(response.headers["x-history-tokens-before"])
    assert line["tokens_after"] == int(response.headers["x-history-tokens-after"]) < line["tokens_before"]
    assert (line["messages_before"], line["messages_after"]) == (6, 6)
    assert sum(line["tokens_by_role_before"].values()) + 3 == line["tokens_before"]
    assert line["tokens_by_role_after"]["tool"] < line["tokens_by_role_before"]["tool"]
    by_filter = {f["type"]: f for f in line["filters"]}
    assert set(by_filter) == {"tool_result_truncation", "token_limiter"}
    removed = by_filter["tool_result_truncation"]["tokens_removed"]
    assert removed == line["tokens_before"] - line["tokens_after"] > 0
    assert by_filter["token_limiter"]["tokens_removed"] == 0
    assert line["limit"] == {
        "limit": 5000,
        "within_limit": True,
        "tokens_remaining": 5000 - line["tokens_after"],
        "tokens_over": 0,
    }
    assert 0 <= line["overhead_ms"] <= line["total_ms"]
    assert line["overhead_ms"] == float(response.headers["x-history-overhead-ms"])


async def test_the_line_never_holds_message_content_or_keys(
    mocked: respx.MockRouter, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with serve(make_config()) as client:
        await client.post(
            "/v1/chat/completions",
            json={"model": "gpt-4o", "messages": conversation()},
            headers={"x-agent-role": "worker"},
        )
        await client.post(
            "/v1/chat/completions",
            json={"model": "gpt-4o", "messages": conversation(), "stream": True},
            headers={"x-agent-role": "worker"},
        )
    lines = access_lines(caplog)
    assert [line["stream"] for line in lines] == [False, True]
    assert all("body" not in line for line in lines)
    for secret in (CONTENT, "swordfish", CLIENT_SECRET, UPSTREAM_KEY, PROXY_KEY, "compiling module_"):
        assert secret not in caplog.text


async def test_log_bodies_puts_the_request_body_in_the_line_with_keys_redacted(
    mocked: respx.MockRouter, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="history_proxy.access")
    messages = [user(f"{CONTENT}; keys {CLIENT_SECRET} and {UPSTREAM_KEY}")]
    async with serve(make_config(log_bodies=True)) as client:
        await client.post(
            "/v1/chat/completions",
            json={"model": "gpt-4o", "messages": messages, "metadata": {"api_key": "plain-value-123"}},
        )
    [line] = access_lines(caplog)
    sent = line["body"]["messages"][0]["content"]
    assert CONTENT in sent and sent.count("[REDACTED]") == 2
    assert line["body"]["metadata"] == {"api_key": "[REDACTED]"}
    for secret in (CLIENT_SECRET, UPSTREAM_KEY, PROXY_KEY, "plain-value-123"):
        assert secret not in caplog.text


def test_redaction_replaces_configured_secrets_and_key_shaped_strings_anywhere() -> None:
    body = {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Authorization: Bearer abc.def-123456"}]},
            {
                "role": "tool",
                "content": "AWS AKIAABCDEFGHIJKLMNOP and my-own-secret-value",
                "tool_call_id": "c1",
            },
        ],
        "max_tokens": 10,
        "password": "hunter2",
    }
    clean = redact(body, ["my-own-secret-value"])
    assert clean["messages"][0]["content"][0]["text"] == "Authorization: Bearer [REDACTED]"
    assert clean["messages"][1]["content"] == "AWS [REDACTED] and [REDACTED]"
    assert (clean["max_tokens"], clean["password"]) == (10, "[REDACTED]")
    assert body["password"] == "hunter2"  # the original is left alone


async def test_errors_before_the_chain_still_write_a_line(
    mocked: respx.MockRouter, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="history_proxy.access")
    async with serve(make_config()) as client:
        await client.post("/v1/chat/completions", content=b"{broken", headers={"x-agent-role": "worker"})
        await client.post(
            "/v1/chat/completions", json={"messages": []}, headers={"authorization": "Bearer nope"}
        )
    bad_json, bad_key = access_lines(caplog)
    assert (bad_json["status"], bad_json["role"], bad_json["tokens_before"]) == (400, "worker", None)
    assert (bad_key["status"], bad_key["role"]) == (401, None)
    # L7: a refusal says why, in the JSON line and the text one
    assert bad_json["error"].startswith(
        "invalid_json: the request body is not valid JSON (Expecting property"
    )
    assert bad_key["error"] == "invalid_api_key: unknown proxy key", "the key itself never"
    record = next(r for r in caplog.records if r.name == "history_proxy.access")
    assert "error invalid_json: the request body is not valid JSON" in TextFormatter().format(record)


async def test_text_format_is_one_readable_line_per_request(
    mocked: respx.MockRouter, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="history_proxy.access")
    async with serve(make_config()) as client:
        await client.post(
            "/v1/chat/completions",
            json={"model": "gpt-4o", "messages": conversation()},
            headers={"x-agent-role": "worker", "x-agent-name": "coder-1"},
        )
    [record] = [r for r in caplog.records if r.name == "history_proxy.access"]
    fields = json.loads(record.getMessage())
    text = TextFormatter().format(record)
    assert "\n" not in text and "{" not in text
    assert "200 POST /v1/chat/completions role=worker agent=coder-1" in text
    assert f"tokens {fields['tokens_before']}->{fields['tokens_after']}" in text
    assert f"tool_result_truncation:-{fields['tokens_before'] - fields['tokens_after']}" in text
    as_json = json.loads(JsonFormatter().format(record))
    assert as_json["level"] == "INFO" and as_json["logger"] == "history_proxy.access"
    assert {k: as_json[k] for k in fields} == fields


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_serve_prints_the_access_line_and_uvicorns_lines_once_each(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text('upstreams: {mock: {base_url: "mock://"}}\n')
    port = free_port()
    stderr = tmp_path / "stderr.log"
    with stderr.open("wb") as sink:
        server = subprocess.Popen(
            [sys.executable, "-m", "history_proxy", "serve", "--config", str(config), "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=sink,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2).read()
                    break
                except OSError:
                    if time.monotonic() > deadline or server.poll() is not None:
                        raise AssertionError("serve did not come up") from None
                    time.sleep(0.1)
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/v1/chat/completions",
                data=json.dumps(
                    {"model": "gpt-4o", "messages": [{"role": "user", "content": CONTENT}]}
                ).encode(),
                headers={"content-type": "application/json", "x-request-id": "served-1"},
            )
            assert urllib.request.urlopen(request, timeout=10).status == 200
            time.sleep(0.3)  # the line is written just after the answer
        finally:
            os.killpg(server.pid, signal.SIGINT)
            server.wait(timeout=20)
    lines = [json.loads(line) for line in stderr.read_text().splitlines()]
    access = [line for line in lines if line["logger"] == "history_proxy.access"]
    assert [(a["request_id"], a["status"], a["upstream"]) for a in access] == [("served-1", 200, "mock")]
    messages = [line.get("message", "") for line in lines]
    assert sum(m.startswith("Started server process") for m in messages) == 1
    assert sum(m.startswith("Finished server process") for m in messages) == 1
    assert CONTENT not in stderr.read_text()
