"""GET /metrics after known traffic: counters, histograms and labels an operator scrapes (issue 7)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import respx
from prometheus_client.parser import text_string_to_metric_families
from starlette.types import Message as AsgiMessage
from starlette.types import Scope

from history_proxy.config.loading import parse_config
from history_proxy.config.models import Config
from history_proxy.core.identity import Identity
from history_proxy.core.messages import Message
from history_proxy.core.tokens import TokenCounters
from history_proxy.filters.base import FilterContext
from history_proxy.observability import collectors
from history_proxy.pipeline.run import Pipeline
from history_proxy.server.app import create_app
from tests.factories import action, result, system, user
from tests.support.asgi_app import serve

pytestmark = pytest.mark.anyio

MAIN = "https://upstream.test/v1"
COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-4o",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}],
}
LONG_OUTPUT = "\n".join(f"{i}: compiling module_{i}.py ... ok" for i in range(40))
WORKER_CHAIN = [
    {"type": "passthrough"},
    {"type": "tool_result_truncation", "keep_recent": 1, "max_chars": 20},
]


class Exploding:
    """A custom filter with a bug."""

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        raise RuntimeError("filter bug")


def make_config(**overrides: Any) -> Config:
    raw: dict[str, Any] = {
        "upstreams": {"main": {"base_url": MAIN, "retries": 0}},
        "policies": {"roles": {"worker": WORKER_CHAIN, "manager": [{"type": "passthrough"}]}},
        **overrides,
    }
    return parse_config(raw, env={})


def worker_conversation() -> list[Message]:
    first, second = action(), action()
    return [
        system(),
        user("Fix the bug."),
        first,
        result(first, LONG_OUTPUT),
        second,
        result(second, "recent output"),
    ]


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a scrape, keyed by name and labels."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(scrape: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return scrape.get((name, frozenset(labels.items())), 0.0)


def label_values(scrape: dict[tuple[str, frozenset[tuple[str, str]]], float], label: str) -> set[str]:
    return {v for _, labels in scrape for k, v in labels if k == label}


async def expected_report(config: Config, messages: list[Message]) -> dict[str, Any]:
    """What the worker chain does to ``messages``, computed without the app."""
    outcome = await Pipeline(config, TokenCounters()).run(
        {"model": "gpt-4o", "messages": messages}, Identity(role="worker"), "main"
    )
    return outcome.report


async def test_known_traffic_is_counted_by_role_upstream_and_status(mocked: respx.MockRouter) -> None:
    mocked.post(f"{MAIN}/chat/completions").mock(return_value=httpx.Response(200, json=COMPLETION))
    config = make_config()
    body = {"model": "gpt-4o", "messages": worker_conversation()}
    async with serve(config) as client:
        for name in ("coder-1", "coder-2"):
            await client.post(
                "/v1/chat/completions", json=body, headers={"x-agent-role": "worker", "x-agent-name": name}
            )
        await client.post("/v1/chat/completions", json=body, headers={"x-agent-role": "made-up-role"})
        await client.post("/v1/chat/completions", json=body)
        await client.post("/v1/chat/completions", content=b"{not json", headers={"x-agent-role": "worker"})
        text = (await client.get("/metrics")).text
    scrape = samples(text)
    requests = "history_proxy_requests_total"
    assert value(scrape, requests, role="worker", upstream="main", status="200") == 2
    # a role the config does not name is served (and counted) as the default role, and counted as a hint
    assert value(scrape, requests, role="default", upstream="main", status="200") == 2
    assert value(scrape, "history_proxy_role_hints_total", outcome="unknown") == 1
    assert value(scrape, "history_proxy_role_hints_total", outcome="missing") == 1
    assert value(scrape, requests, role="worker", upstream="none", status="400") == 1
    assert label_values(scrape, "role") <= {"worker", "manager", "default", "summarizer", "other", "none"}
    for unbounded in ("made-up-role", "coder-1", "gpt-4o"):
        assert unbounded not in text


async def test_counts_stay_right_past_the_number_of_label_sets_remembered(
    mocked: respx.MockRouter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(collectors, "CHILDREN_KEPT", 1)
    mocked.post(f"{MAIN}/chat/completions").mock(return_value=httpx.Response(200, json=COMPLETION))
    body = {"model": "gpt-4o", "messages": worker_conversation()}
    async with serve(make_config()) as client:
        for _ in range(3):
            for role in ("worker", "manager"):
                await client.post("/v1/chat/completions", json=body, headers={"x-agent-role": role})
            await client.post(
                "/v1/chat/completions", content=b"{not json", headers={"x-agent-role": "worker"}
            )
        scrape = samples((await client.get("/metrics")).text)
    requests = "history_proxy_requests_total"
    assert value(scrape, requests, role="worker", upstream="main", status="200") == 3
    assert value(scrape, requests, role="manager", upstream="main", status="200") == 3
    assert value(scrape, requests, role="worker", upstream="none", status="400") == 3
    assert value(scrape, "history_proxy_tokens_before_count", role="manager") == 3
    assert value(scrape, "history_proxy_filter_seconds_count", filter="tool_result_truncation") == 3
    assert value(scrape, "history_proxy_upstream_seconds_count", upstream="main") == 6


async def test_tokens_before_and_after_and_removed_per_filter_match_the_chain(
    mocked: respx.MockRouter,
) -> None:
    mocked.post(f"{MAIN}/chat/completions").mock(return_value=httpx.Response(200, json=COMPLETION))
    config = make_config()
    messages = worker_conversation()
    report = await expected_report(config, messages)
    removed = {f["type"]: f["tokens_removed"] for f in report["filters"]}
    assert removed["tool_result_truncation"] > 0 and removed["passthrough"] == 0
    async with serve(config) as client:
        for _ in range(3):
            await client.post(
                "/v1/chat/completions",
                json={"model": "gpt-4o", "messages": messages},
                headers={"x-agent-role": "worker"},
            )
        scrape = samples((await client.get("/metrics")).text)
    assert value(scrape, "history_proxy_tokens_before_count", role="worker") == 3
    assert value(scrape, "history_proxy_tokens_before_sum", role="worker") == 3 * report["before"]["tokens"]
    assert value(scrape, "history_proxy_tokens_after_sum", role="worker") == 3 * report["after"]["tokens"]
    assert (
        value(
            scrape,
            "history_proxy_filter_tokens_removed_total",
            filter="tool_result_truncation",
            role="worker",
        )
        == 3 * removed["tool_result_truncation"]
    )
    assert value(scrape, "history_proxy_filter_seconds_count", filter="tool_result_truncation") == 3
    assert value(scrape, "history_proxy_filter_seconds_count", filter="passthrough") == 3
    # a whole request of 1k-ish tokens lands in a sensible bucket, not in +Inf only
    assert value(scrape, "history_proxy_tokens_before_bucket", role="worker", le="1000.0") == 3


async def test_overhead_upstream_latency_and_time_to_first_byte_are_recorded(
    mocked: respx.MockRouter,
) -> None:
    mocked.post(f"{MAIN}/chat/completions").mock(return_value=httpx.Response(200, json=COMPLETION))
    async with serve(make_config()) as client:
        await client.post("/v1/chat/completions", json={"model": "gpt-4o", "messages": [user("hi")]})
        await client.post(
            "/v1/chat/completions", json={"model": "gpt-4o", "messages": [user("hi")], "stream": True}
        )
        scrape = samples((await client.get("/metrics")).text)
    assert value(scrape, "history_proxy_overhead_seconds_count") == 2
    assert value(scrape, "history_proxy_upstream_seconds_count", upstream="main") == 2
    assert value(scrape, "history_proxy_upstream_first_byte_seconds_count", upstream="main") == 2
    assert value(scrape, "history_proxy_streams_in_flight") == 0


async def test_a_stream_counts_as_in_flight_until_it_ends(mocked: respx.MockRouter) -> None:
    release = anyio.Event()

    class Held(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            yield b'data: {"choices":[{"delta":{"content":"."}}]}\n\n'
            await release.wait()
            yield b"data: [DONE]\n\n"

    mocked.post(f"{MAIN}/chat/completions").mock(
        return_value=httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Held())
    )
    app = create_app(make_config())
    body = json.dumps({"model": "gpt-4o", "messages": [user("hi")], "stream": True}).encode()
    started = anyio.Event()
    sent: list[AsgiMessage] = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> AsgiMessage:
        if sent:
            return sent.pop()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def send(message: AsgiMessage) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            started.set()

    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 1234),
        "server": ("proxy", 80),
    }
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://p") as client,
    ):
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(app, scope, receive, send)
                await started.wait()
                during = samples((await client.get("/metrics")).text)
                release.set()
        after = samples((await client.get("/metrics")).text)
    assert value(during, "history_proxy_streams_in_flight") == 1
    assert value(after, "history_proxy_streams_in_flight") == 0


async def test_filter_failures_are_counted_by_filter_type(mocked: respx.MockRouter) -> None:
    mocked.post(f"{MAIN}/chat/completions").mock(return_value=httpx.Response(200, json=COMPLETION))
    config = make_config(
        on_filter_error="passthrough",
        policies={
            "roles": {"worker": [{"type": "custom", "path": "tests.observability.test_metrics:Exploding"}]}
        },
    )
    async with serve(config) as client:
        response = await client.post(
            "/v1/chat/completions",
            json={"model": "gpt-4o", "messages": [user("hi")]},
            headers={"x-agent-role": "worker"},
        )
        scrape = samples((await client.get("/metrics")).text)
    assert response.status_code == 200
    assert value(scrape, "history_proxy_filter_failures_total", filter="custom") == 1


async def test_previews_are_counted_as_requests_but_not_as_traffic(mocked: respx.MockRouter) -> None:
    async with serve(make_config()) as client:
        await client.post(
            "/v1/history/preview",
            json={"model": "gpt-4o", "messages": worker_conversation()},
            headers={"x-agent-role": "worker"},
        )
        scrape = samples((await client.get("/metrics")).text)
    assert value(scrape, "history_proxy_requests_total", role="worker", upstream="none", status="200") == 1
    assert value(scrape, "history_proxy_tokens_before_count", role="worker") == 0
    assert value(scrape, "history_proxy_filter_seconds_count", filter="tool_result_truncation") == 0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_with_several_workers_every_scrape_counts_every_workers_requests(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        'upstreams: {mock: {base_url: "mock://"}}\npolicies: {roles: {worker: [{type: passthrough}]}}\n'
    )
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "history_proxy",
            "serve",
            "--config",
            str(config),
            "--port",
            str(port),
            "--workers",
            "2",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{base}/healthz", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise AssertionError("serve --workers 2 did not come up") from None
                time.sleep(0.2)
        body = json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}).encode()
        for _ in range(8):  # a fresh connection each: the kernel spreads them over the workers
            request = urllib.request.Request(
                f"{base}/v1/chat/completions",
                data=body,
                headers={"content-type": "application/json", "x-agent-role": "worker", "connection": "close"},
            )
            assert urllib.request.urlopen(request, timeout=10).status == 200

        def count() -> float:
            text = urllib.request.urlopen(f"{base}/metrics", timeout=10).read().decode()
            return value(
                samples(text), "history_proxy_requests_total", role="worker", upstream="mock", status="200"
            )

        settle = time.monotonic() + 5  # the last request is counted just after its answer was sent
        while count() < 8 and time.monotonic() < settle:
            time.sleep(0.05)
        counts = [count() for _ in range(6)]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=20)
    assert counts == [8] * 6
