"""Cache truth from the upstream: usage read from JSON answers and stream events, shown in /metrics and
the access line (issue 18)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import respx

from history_proxy.core.usage import CacheUsage, UsageTap, usage_of_json
from history_proxy.mock.common import approximate_tokens
from tests.factories import system, user
from tests.support.access_app import COMPLETION, MAIN, access_lines, conversation, make_config, serve
from tests.upstream_respx import UPSTREAM_MOCKER

OPENAI_USAGE = {
    "prompt_tokens": 2006,
    "completion_tokens": 300,
    "prompt_tokens_details": {"cached_tokens": 1920},
}
ANTHROPIC_USAGE = {"input_tokens": 21, "cache_read_input_tokens": 1800, "cache_creation_input_tokens": 179}


def test_openai_usage_counts_cached_tokens_among_the_prompt_tokens() -> None:
    usage = usage_of_json(json.dumps({**COMPLETION, "usage": OPENAI_USAGE}).encode())
    assert usage == CacheUsage(input_tokens=2006, cached_tokens=1920)
    assert usage.cached_share == pytest.approx(1920 / 2006)


def test_anthropic_input_tokens_exclude_what_the_cache_read_and_wrote() -> None:
    usage = usage_of_json(json.dumps({"type": "message", "usage": ANTHROPIC_USAGE}).encode())
    assert usage == CacheUsage(input_tokens=2000, cached_tokens=1800, cache_write_tokens=179)


def test_an_answer_without_usage_or_not_json_reports_none() -> None:
    assert usage_of_json(json.dumps(COMPLETION).encode()) is None
    assert usage_of_json(b'{"usage": ') is None


def sse(*events: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"


def test_the_tap_finds_the_final_usage_event_across_split_pieces() -> None:
    chunk = {
        "id": "c",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": "hi"}}],
    }
    body = sse({**chunk, "usage": None}, {**chunk, "choices": [], "usage": OPENAI_USAGE})
    tap = UsageTap()
    for i in range(0, len(body), 7):  # pieces cut anywhere, lines included
        tap.feed(body[i : i + 7])
    assert tap.close() == CacheUsage(2006, 1920)


def test_the_tap_keeps_anthropics_input_when_message_delta_reports_output_only() -> None:
    body = sse(
        {"type": "message_start", "message": {"id": "m", "usage": {**ANTHROPIC_USAGE, "output_tokens": 1}}},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 12}},
    )
    tap = UsageTap()
    tap.feed(body)
    assert tap.close() == CacheUsage(2000, 1800, 179)


def test_the_tap_reads_the_responses_api_completed_event() -> None:
    usage = {"input_tokens": 3000, "input_tokens_details": {"cached_tokens": 2048}, "output_tokens": 9}
    body = (
        b"event: response.created\ndata: "
        + json.dumps({"type": "response.created", "response": {"id": "r", "usage": None}}).encode()
        + b"\n\nevent: response.completed\ndata: "
        + json.dumps({"type": "response.completed", "response": {"id": "r", "usage": usage}}).encode()
        + b"\n\n"
    )
    tap = UsageTap()
    for i in range(0, len(body), 11):
        tap.feed(body[i : i + 11])
    assert tap.close() == CacheUsage(3000, 2048)


def test_the_tap_reads_a_json_answer_relayed_in_pieces_from_its_end() -> None:
    body = json.dumps({**COMPLETION, "choices": [{"text": "x" * 20000}], "usage": OPENAI_USAGE}).encode()
    tap = UsageTap(sse=False)
    for i in range(0, len(body), 1000):
        tap.feed(body[i : i + 1000])
    assert tap.close() == CacheUsage(2006, 1920)


# --- through the app, against an upstream that reports cached tokens ---------------------------


@pytest.fixture
def caching_upstream() -> Iterator[respx.MockRouter]:
    def answer(request: httpx.Request) -> httpx.Response:
        if json.loads(request.content).get("stream"):
            chunk = {
                "id": "c",
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": {"content": "ok"}}],
            }
            body = sse(chunk, {**chunk, "choices": [], "usage": OPENAI_USAGE})
            return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})
        return httpx.Response(200, json={**COMPLETION, "usage": OPENAI_USAGE})

    with respx.mock(assert_all_called=False, using=UPSTREAM_MOCKER) as router:
        router.post(f"{MAIN}/chat/completions").mock(side_effect=answer)
        yield router


@pytest.mark.anyio
@pytest.mark.parametrize("stream", [False, True])
async def test_cached_tokens_the_upstream_reports_show_in_metrics_and_the_access_line(
    caching_upstream: respx.MockRouter, caplog: pytest.LogCaptureFixture, stream: bool
) -> None:
    caplog.set_level(logging.INFO, logger="history_proxy.access")
    async with serve(make_config()) as client:
        for _ in range(2):
            response = await client.post(
                "/v1/chat/completions",
                json={"model": "gpt-4o", "messages": conversation(), "stream": stream},
                headers={"x-agent-role": "worker"},
            )
            assert response.status_code == 200
        metrics = (await client.get("/metrics")).text
    lines = access_lines(caplog)
    assert [line["upstream_cached_tokens"] for line in lines] == [1920, 1920]
    assert lines[0]["upstream_input_tokens"] == 2006
    assert lines[0]["cached_share"] == round(1920 / 2006, 4)
    for kind, total in (("input", 4012.0), ("cached", 3840.0), ("cache_write", 0.0)):
        expected = f'history_proxy_upstream_input_tokens_total{{kind="{kind}",role="worker",upstream="main"}} {total}'
        assert expected in metrics


@pytest.mark.anyio
@pytest.mark.parametrize("stream", [False, True])
async def test_the_built_in_mock_reports_cached_tokens_that_show_in_metrics_and_the_access_line(
    caplog: pytest.LogCaptureFixture, stream: bool
) -> None:
    """Two growing requests through the proxy to ``mock://``: the second reads the first's prefix."""
    caplog.set_level(logging.INFO, logger="history_proxy.access")
    config = make_config(
        upstreams={"main": {"base_url": "mock://", "retries": 0}},
        policies={"roles": {"worker": []}},
    )
    first = [system(), user("read the log\n" + "line of output\n" * 400)]  # ~1,500 tokens
    second = [*first, {"role": "assistant", "content": "done reading"}, user("now fix it")]
    extra = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
    async with serve(config) as client:
        for messages in (first, second):
            response = await client.post(
                "/v1/chat/completions",
                json={"model": "gpt-4o", "messages": messages, **extra},
                headers={"x-agent-role": "worker"},
            )
            assert response.status_code == 200
        metrics = (await client.get("/metrics")).text
    lines = access_lines(caplog)
    prefix_tokens = approximate_tokens(first)
    assert [line["upstream_cached_tokens"] for line in lines] == [0, prefix_tokens // 128 * 128]
    assert lines[1]["upstream_input_tokens"] == approximate_tokens(second)
    cached = float(prefix_tokens // 128 * 128)
    assert (
        f'history_proxy_upstream_input_tokens_total{{kind="cached",role="worker",upstream="main"}} {cached}'
        in metrics
    )
