"""The HTTP surface (docs/http.md) as a raw HTTP client sees it; the upstream is behind respx."""

from __future__ import annotations

import gc
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import respx
from starlette.types import Message as AsgiMessage
from starlette.types import Scope

from history_proxy.config.loading import parse_config
from history_proxy.core.messages import Message
from history_proxy.filters.base import FilterContext
from history_proxy.pipeline.headers import history_headers
from history_proxy.pipeline.run import PipelineResult
from history_proxy.server.app import app_from_env, create_app
from tests.factories import action, assistant, result, system, user
from tests.support.asgi_app import CLAUDE, COMPLETION, MAIN, PROXY_KEY, UPSTREAM_KEY, chat, make_config, serve

pytestmark = pytest.mark.anyio

LONG_OUTPUT = "\n".join(f"{i}: compiling module_{i}.py ... ok" for i in range(40))


class Exploding:
    """A custom filter with a bug."""

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        raise RuntimeError("filter bug")


def worker_conversation() -> list[Message]:
    first, second = action(), action()
    return [
        system(),
        user("Fix the bug.", message_type="task"),
        first,
        result(first, LONG_OUTPUT, message_type="observation", agent="w1"),
        second,
        result(second, "recent output"),
    ]


def error_of(response: httpx.Response) -> dict[str, Any]:
    body: dict[str, dict[str, Any]] = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


# --- chat completions ------------------------------------------------------------------------


async def test_upstream_receives_the_filtered_messages_without_annotations(mocked: respx.MockRouter) -> None:
    route = mocked.post(f"{MAIN}/chat/completions").mock(return_value=httpx.Response(200, json=COMPLETION))
    async with serve(make_config()) as client:
        response = await client.post(
            "/v1/chat/completions", json=chat(*worker_conversation()), headers={"x-agent-role": "worker"}
        )
    assert response.status_code == 200 and response.json() == COMPLETION
    sent = json.loads(route.calls.last.request.content)["messages"]
    assert sent[3]["content"].startswith(LONG_OUTPUT[:20]) and len(sent[3]["content"]) < len(LONG_OUTPUT)
    assert sent[5]["content"] == "recent output"
    assert not any(key in m for m in sent for key in ("message_type", "agent", "tags", "phase_id"))


async def test_role_header_selects_the_chain_and_the_answer_says_what_it_did(
    mocked: respx.MockRouter,
) -> None:
    mocked.post(f"{MAIN}/chat/completions").mock(return_value=httpx.Response(200, json=COMPLETION))
    async with serve(make_config()) as client:
        worker = await client.post(
            "/v1/chat/completions", json=chat(*worker_conversation()), headers={"X-Agent-Role": "worker"}
        )
        default = await client.post("/v1/chat/completions", json=chat(*worker_conversation()))
    assert worker.headers["x-history-role"] == "worker"
    assert worker.headers["x-history-filters"] == "passthrough,tool_result_truncation"
    assert int(worker.headers["x-history-tokens-after"]) < int(worker.headers["x-history-tokens-before"])
    assert worker.headers["x-history-messages-before"] == worker.headers["x-history-messages-after"] == "6"
    assert float(worker.headers["x-history-overhead-ms"]) >= 0
    assert default.headers["x-history-role"] == "default" and default.headers["x-history-filters"] == ""


async def test_streamed_answers_pass_through_byte_for_byte(mocked: respx.MockRouter) -> None:
    sse = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n'
    mocked.post(f"{MAIN}/chat/completions").mock(
        return_value=httpx.Response(200, headers={"content-type": "text/event-stream"}, content=sse)
    )
    async with serve(make_config()) as client:
        response = await client.post("/v1/chat/completions", json=chat(stream=True))
    assert response.content == sse
    assert response.headers["content-type"] == "text/event-stream"


async def test_a_stream_that_breaks_mid_way_ends_with_an_in_band_error(mocked: respx.MockRouter) -> None:
    class Breaks(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            yield b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'
            raise httpx.ReadError("reset")

    mocked.post(f"{MAIN}/chat/completions").mock(
        return_value=httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Breaks())
    )
    async with serve(make_config()) as client:
        response = await client.post("/v1/chat/completions", json=chat(stream=True))
    events = [e.removeprefix("data: ") for e in response.text.split("\n\n") if e]
    assert response.status_code == 200
    assert json.loads(events[-2])["error"]["code"] == "upstream_unavailable"
    assert events[-1] == "[DONE]"


async def test_upstream_headers_outside_latin_1_reach_the_client_byte_for_byte(
    mocked: respx.MockRouter,
) -> None:
    euro = "price in \u20ac".encode()  # UTF-8 bytes beyond latin-1: once a 500 (decoded, then re-encoded)
    mocked.post(f"{MAIN}/chat/completions").mock(
        return_value=httpx.Response(200, json=COMPLETION, headers=[(b"x-note", euro)])
    )
    async with serve(make_config()) as client:
        response = await client.post("/v1/chat/completions", json=chat())
    assert response.status_code == 200
    assert dict(response.headers.raw)[b"x-note"] == euro


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_upstream_errors_keep_their_status_body_and_headers(
    mocked: respx.MockRouter, status: int
) -> None:
    body = b'{"error":{"message":"upstream says no","type":"x","param":null,"code":"nope"}}'
    mocked.post(f"{MAIN}/chat/completions").mock(
        return_value=httpx.Response(
            status, content=body, headers={"content-type": "application/json", "x-request-id": "req_up"}
        )
    )
    async with serve(make_config()) as client:
        response = await client.post("/v1/chat/completions", json=chat())
    assert (response.status_code, response.content) == (status, body)
    assert response.headers["x-upstream-request-id"] == "req_up"
    assert response.headers["x-history-role"] == "default"


@pytest.mark.parametrize("spec_version", ["2.3", "2.4"])
async def test_a_client_leaving_mid_stream_closes_the_upstream_answer(
    mocked: respx.MockRouter, caplog: pytest.LogCaptureFixture, spec_version: str
) -> None:
    upstream_closed = anyio.Event()

    class Endless(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            while True:
                yield b'data: {"choices":[{"delta":{"content":"."}}]}\n\n'
                await anyio.sleep(0.01)

        async def aclose(self) -> None:
            upstream_closed.set()

    mocked.post(f"{MAIN}/chat/completions").mock(
        return_value=httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Endless())
    )
    caplog.set_level(logging.INFO, logger="history_proxy.access")
    body = json.dumps(chat(stream=True)).encode()
    first_chunk_sent = anyio.Event()
    requests: list[AsgiMessage] = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> AsgiMessage:
        if requests:
            return requests.pop()
        await first_chunk_sent.wait()
        return {"type": "http.disconnect"}

    async def send(message: AsgiMessage) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            if first_chunk_sent.is_set() and spec_version == "2.4":
                raise OSError("connection lost")  # how servers speaking ASGI 2.4 report a gone client
            first_chunk_sent.set()

    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": spec_version},
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
    app = create_app(make_config())
    async with app.router.lifespan_context(app):
        with anyio.fail_after(5):
            await app(scope, receive, send)
            await upstream_closed.wait()
    access = [json.loads(r.getMessage()) for r in caplog.records if r.name == "history_proxy.access"]
    assert [line["status"] for line in access] == [499]
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []  # not a bug


def lists_holding(content: str) -> int:
    """Live lists holding a message dict whose content is ``content`` (parsed messages, not bytes)."""
    return sum(
        1
        for o in gc.get_objects()
        if isinstance(o, list) and any(isinstance(m, dict) and m.get("content") == content for m in o)
    )


@pytest.mark.parametrize("fallback_marks", [False, True])
async def test_a_request_waiting_for_its_upstream_holds_its_body_encoded_not_parsed(
    mocked: respx.MockRouter, fallback_marks: bool
) -> None:
    """In a burst, thousands of requests wait for the upstream at once: each keeps bytes, not messages.

    The parsed messages are kept only when a fallback upstream places other cache marks, for the
    chain to run again if the request falls back to it.
    """
    marker = f"MARKER-{fallback_marks}-" + "q" * 64
    held: list[int] = []

    async def upstream(request: httpx.Request) -> httpx.Response:
        assert marker in request.content.decode()
        held.append(lists_holding(marker))
        return httpx.Response(200, json=COMPLETION)

    mocked.post(f"{MAIN}/chat/completions").mock(side_effect=upstream)
    config = make_config(
        upstreams={
            "main": {"base_url": MAIN, "retries": 0},
            "claude": {"base_url": CLAUDE, "retries": 0, "cache_control": fallback_marks},
        },
        routes=[{"model": "*", "upstream": "main", "fallbacks": ["claude"]}],
        limits={"max_body_bytes": 1 << 20},
    )
    async with serve(config) as client:
        content = json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": marker}]}).encode()
        response = await client.post(
            "/v1/chat/completions", content=content, headers={"content-type": "application/json"}
        )
    assert response.status_code == 200
    assert held == [1 if fallback_marks else 0]


# --- our own errors --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"model": "gpt-4o", "messages": NaN}', "not valid JSON"),
        (b'{"model": "gpt-4o"}', "'messages' is required"),
        (b'{"model": "gpt-4o", "messages": "hi"}', "'messages' must be a list"),
        (
            b'{"model": "gpt-4o", "messages": [{"role": "robot", "content": "hi"}]}',
            "messages[0].role must be one of",
        ),
        (b'{"model": "gpt-4o", "messages": ["hi"]}', "messages[0] must be an object"),
    ],
)
async def test_bad_requests_are_400_saying_what_to_fix(
    mocked: respx.MockRouter, content: bytes, says: str
) -> None:
    route = mocked.post(f"{MAIN}/chat/completions")
    async with serve(make_config()) as client:
        response = await client.post("/v1/chat/completions", content=content)
    error = error_of(response)
    assert response.status_code == 400 and error["type"] == "invalid_request_error"
    assert says in error["message"]
    assert not route.called


@pytest.mark.parametrize("authorization", [None, "Bearer not-a-proxy-key"])
async def test_missing_or_unknown_proxy_keys_are_401(
    mocked: respx.MockRouter, authorization: str | None
) -> None:
    route = mocked.route(host="upstream.test")
    headers = {"authorization": authorization} if authorization else {}
    async with serve(make_config(auth=True)) as client:
        chat_answer = await client.post("/v1/chat/completions", json=chat(), headers=headers)
        models_answer = await client.get("/v1/models", headers=headers)
    for response in (chat_answer, models_answer):
        assert response.status_code == 401 and error_of(response)["type"] == "authentication_error"
    assert not route.called


async def test_unknown_routes_are_404_in_openai_shape() -> None:
    async with serve(make_config()) as client:
        response = await client.get("/v2/chat/completions")
    assert response.status_code == 404
    assert "/v1/" in error_of(response)["message"]


async def test_a_method_a_route_does_not_take_is_405_in_openai_shape_with_allow() -> None:
    async with serve(make_config()) as client:
        response = await client.post("/metrics", headers={"x-request-id": "r-405"})
    assert (response.status_code, error_of(response)["code"]) == (405, "method_not_allowed")
    assert set(response.headers["allow"].split(", ")) == {"GET", "HEAD"}
    assert response.headers["x-request-id"] == "r-405"
    assert response.headers["content-type"] == "application/json"


async def test_a_body_of_many_tiny_containers_is_413_on_every_route(mocked: respx.MockRouter) -> None:
    route = mocked.route(host="upstream.test")
    pad = ",".join(["{}"] * 600)
    body = f'{{"model": "gpt-4o", "input": [{pad}], "messages": [{{"role": "user", "content": "hi"}}]}}'
    limits = {"max_body_bytes": 1 << 20, "max_json_containers": 500}
    headers = {"content-type": "application/json"}
    async with serve(make_config(limits=limits)) as client:
        answers = [
            await client.post(path, content=body, headers=headers)
            for path in ("/v1/chat/completions", "/v1/embeddings", "/v1/history/preview")
        ]
    for response in answers:
        assert response.status_code == 413 and error_of(response)["code"] == "too_many_json_containers"
    assert not route.called


async def test_a_body_over_the_limit_is_413_whether_declared_or_streamed(mocked: respx.MockRouter) -> None:
    route = mocked.route(host="upstream.test")
    big = json.dumps(chat(user("x" * 5000))).encode()

    async def chunked() -> AsyncIterator[bytes]:
        for start in range(0, len(big), 1000):
            yield big[start : start + 1000]

    async with serve(make_config()) as client:
        declared = await client.post("/v1/chat/completions", content=big)
        streamed = await client.post("/v1/chat/completions", content=chunked())
        upload = await client.post(
            "/v1/files", content=chunked(), headers={"content-type": "application/octet-stream"}
        )
    for response in (declared, streamed, upload):
        assert response.status_code == 413
        assert "limits.max_body_bytes" in error_of(response)["message"]
    assert not route.called


async def test_an_unreachable_upstream_is_502_and_a_slow_one_504(mocked: respx.MockRouter) -> None:
    mocked.post(f"{MAIN}/chat/completions").mock(side_effect=httpx.ConnectError("refused"))
    mocked.post(f"{CLAUDE}/chat/completions").mock(side_effect=httpx.ReadTimeout("slow"))
    async with serve(make_config()) as client:
        unreachable = await client.post("/v1/chat/completions", json=chat())
        slow = await client.post("/v1/chat/completions", json={**chat(), "model": "claude-sonnet"})
    assert (unreachable.status_code, error_of(unreachable)["code"]) == (502, "upstream_unavailable")
    assert (slow.status_code, error_of(slow)["code"]) == (504, "upstream_timeout")


async def test_a_filter_bug_is_500_filter_failed_naming_the_filter(mocked: respx.MockRouter) -> None:
    route = mocked.post(f"{MAIN}/chat/completions")
    config = make_config(
        policies={"roles": {"worker": [{"type": "custom", "path": "tests.server.test_app:Exploding"}]}}
    )
    async with serve(config) as client:
        response = await client.post("/v1/chat/completions", json=chat(), headers={"x-agent-role": "worker"})
        metrics = (await client.get("/metrics")).text
    error = error_of(response)
    assert (response.status_code, error["code"]) == (500, "filter_failed")
    assert "policies.roles.worker[0]" in error["message"]
    assert 'history_proxy_filter_failures_total{filter="custom"} 1.0' in metrics
    assert not route.called


async def test_a_bug_in_the_proxy_is_a_plain_500_without_traceback(
    mocked: respx.MockRouter, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(make_config())

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("unexpected state")

    app.state.proxy.states.latest.pipeline.run = broken
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://p") as client,
    ):
        response = await client.post("/v1/chat/completions", json=chat())
        after = await client.get("/healthz")
    error = error_of(response)
    assert (response.status_code, error["type"]) == (500, "server_error")
    assert "Traceback" not in response.text and "unexpected state" not in response.text
    assert "RuntimeError: unexpected state" in caplog.text
    assert after.status_code == 200


# --- headers ---------------------------------------------------------------------------------


async def test_the_upstream_key_replaces_the_clients_authorization(mocked: respx.MockRouter) -> None:
    route = mocked.post(f"{MAIN}/chat/completions").mock(return_value=httpx.Response(200, json=COMPLETION))
    async with serve(make_config()) as client:
        await client.post(
            "/v1/chat/completions", json=chat(), headers={"authorization": "Bearer client-own-key"}
        )
    assert route.calls.last.request.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"


async def test_a_proxy_key_is_never_forwarded(mocked: respx.MockRouter) -> None:
    route = mocked.post(f"{CLAUDE}/chat/completions").mock(return_value=httpx.Response(200, json=COMPLETION))
    async with serve(make_config(auth=True)) as client:
        response = await client.post(
            "/v1/chat/completions",
            json={**chat(), "model": "claude-sonnet"},
            headers={"authorization": f"Bearer {PROXY_KEY}"},
        )
    assert response.status_code == 200
    assert "authorization" not in route.calls.last.request.headers


async def test_hop_by_hop_headers_are_not_forwarded_either_way(mocked: respx.MockRouter) -> None:
    route = mocked.post(f"{MAIN}/chat/completions").mock(
        return_value=httpx.Response(
            200,
            json=COMPLETION,
            headers={"keep-alive": "timeout=5", "x-vendor": "kept", "connection": "x-vendor"},
        )
    )
    async with serve(make_config()) as client:
        response = await client.post(
            "/v1/chat/completions",
            json=chat(),
            headers={
                "connection": "x-private",
                "x-private": "1",
                "te": "trailers",
                "x-agent-name": "w1",
                "x-trace": "t1",
            },
        )
    sent = route.calls.last.request.headers
    assert "x-private" not in sent and "te" not in sent and sent["x-trace"] == "t1"
    assert "x-agent-name" not in sent  # identity headers stay at the proxy
    assert sent["accept-encoding"] == "identity"
    assert "keep-alive" not in response.headers and "x-vendor" not in response.headers


async def test_a_sane_request_id_is_echoed_and_anything_else_replaced(mocked: respx.MockRouter) -> None:
    mocked.post(f"{MAIN}/chat/completions").mock(return_value=httpx.Response(200, json=COMPLETION))
    async with serve(make_config()) as client:
        echoed = await client.post("/v1/chat/completions", json=chat(), headers={"x-request-id": "trace-42"})
        replaced = await client.post(
            "/v1/chat/completions", json=chat(), headers={"x-request-id": "a b\tc" * 50}
        )
        failed = await client.post(
            "/v1/chat/completions", content=b"nope", headers={"x-request-id": "trace-43"}
        )
    assert echoed.headers["x-request-id"] == "trace-42"
    assert len(replaced.headers["x-request-id"]) == 32
    assert failed.headers["x-request-id"] == "trace-43"


# --- other routes ----------------------------------------------------------------------------


async def test_other_v1_paths_are_forwarded_unchanged_and_routed_by_model(mocked: respx.MockRouter) -> None:
    models = mocked.get(f"{MAIN}/models", params={"limit": "2"}).mock(
        return_value=httpx.Response(200, json={"object": "list", "data": []})
    )
    embeddings = mocked.post(f"{CLAUDE}/embeddings").mock(return_value=httpx.Response(200, json={"data": []}))
    body = b'{"model": "claude-embed", "input": "hi"}'
    async with serve(make_config()) as client:
        listed = await client.get("/v1/models", params={"limit": "2"})
        embedded = await client.post(
            "/v1/embeddings", content=body, headers={"content-type": "application/json"}
        )
    assert listed.json() == {"object": "list", "data": []}
    assert models.calls.last.request.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert embedded.status_code == 200 and embeddings.calls.last.request.content == body


async def test_healthz_answers_ok() -> None:
    async with serve(make_config()) as client:
        response = await client.get("/healthz")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})


async def test_metrics_count_requests_with_bounded_role_labels(mocked: respx.MockRouter) -> None:
    mocked.post(f"{MAIN}/chat/completions").mock(return_value=httpx.Response(200, json=COMPLETION))
    async with serve(make_config()) as client:
        await client.post("/v1/chat/completions", json=chat(), headers={"x-agent-role": "worker"})
        await client.post("/v1/chat/completions", json=chat(), headers={"x-agent-role": "made-up-role"})
        response = await client.get("/metrics")
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    assert 'history_proxy_requests_total{role="worker",status="200",upstream="main"} 1.0' in text
    # a role the config does not name is served and counted as the default role: labels stay bounded
    assert 'history_proxy_requests_total{role="default",status="200",upstream="main"} 1.0' in text
    assert "made-up-role" not in text
    assert 'history_proxy_tokens_after_count{role="worker"} 1.0' in text
    assert "history_proxy_overhead_seconds_count 2.0" in text


async def test_preview_returns_the_body_and_report_and_forwards_nothing(mocked: respx.MockRouter) -> None:
    route = mocked.route(host="upstream.test")
    async with serve(make_config()) as client:
        response = await client.post(
            "/v1/history/preview", json=chat(*worker_conversation()), headers={"x-agent-role": "worker"}
        )
    answer = response.json()
    assert set(answer) == {"body", "report"}
    assert len(answer["body"]["messages"][3]["content"]) < len(LONG_OUTPUT)
    assert answer["report"]["role"] == "worker" and answer["report"]["before"]["messages"] == 6
    assert response.headers["x-history-filters"] == "passthrough,tool_result_truncation"
    assert not route.called


# --- logs and secrets ------------------------------------------------------------------------


async def test_one_access_line_per_request_with_numbers_but_no_content(
    mocked: respx.MockRouter, caplog: pytest.LogCaptureFixture
) -> None:
    mocked.post(f"{MAIN}/chat/completions").mock(return_value=httpx.Response(200, json=COMPLETION))
    caplog.set_level(logging.INFO, logger="history_proxy.access")
    async with serve(make_config()) as client:
        await client.post(
            "/v1/chat/completions",
            json=chat(user("top secret plan")),
            headers={"x-agent-role": "worker", "x-agent-name": "w1", "x-request-id": "trace-7"},
        )
    lines = [r for r in caplog.records if r.name == "history_proxy.access"]
    assert len(lines) == 1
    fields = json.loads(lines[0].getMessage())
    assert fields["request_id"] == "trace-7" and fields["agent"] == "w1" and fields["status"] == 200
    assert fields["messages_before"] == 1 and fields["tokens_before"] > 0
    assert [f["type"] for f in fields["filters"]] == ["passthrough", "tool_result_truncation"]
    assert "top secret plan" not in caplog.text


async def test_planted_secrets_never_reach_logs_or_error_bodies(
    mocked: respx.MockRouter, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    mocked.post(f"{MAIN}/chat/completions").mock(
        side_effect=[
            httpx.Response(200, json=COMPLETION),
            httpx.ConnectError("refused"),
            httpx.ReadTimeout("slow"),
        ]
    )
    mocked.post(f"{CLAUDE}/chat/completions").mock(
        return_value=httpx.Response(500, json={"error": {"message": "x"}})
    )
    headers = {"authorization": f"Bearer {PROXY_KEY}"}
    answers = []
    async with serve(make_config(auth=True)) as client:
        for _ in range(3):
            answers.append(await client.post("/v1/chat/completions", json=chat(), headers=headers))
        answers.append(
            await client.post("/v1/chat/completions", json={**chat(), "model": "claude-x"}, headers=headers)
        )
        answers.append(await client.post("/v1/chat/completions", content=b"{bad", headers=headers))
        answers.append(
            await client.post("/v1/chat/completions", json=chat(), headers={"authorization": "Bearer wrong"})
        )
    assert [a.status_code for a in answers] == [200, 502, 504, 500, 400, 401]
    for secret in (UPSTREAM_KEY, PROXY_KEY):
        assert secret not in caplog.text
        assert all(secret not in a.text and secret not in str(a.headers) for a in answers)


# --- lifespan and factory --------------------------------------------------------------------


async def test_mock_upstreams_answer_from_the_built_in_mock_in_the_same_process() -> None:
    config = parse_config(
        {"upstreams": {"openai": {"base_url": MAIN, "api_key": "", "mock_when_no_key": True}}}, env={}
    )
    async with serve(config) as client:
        answer = await client.post("/v1/chat/completions", json=chat(assistant("a"), user("b")))
        models = await client.get("/v1/models")
    assert answer.status_code == 200 and answer.json()["object"] == "chat.completion"
    assert models.status_code == 200 and models.json()["object"] == "list"


def test_the_factory_reads_the_config_path_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "proxy.yaml"
    path.write_text("upstreams:\n  only-one: {base_url: 'https://example.test/v1'}\n", encoding="utf-8")
    monkeypatch.setenv("HISTORY_PROXY_CONFIG", str(path))
    app = app_from_env()
    assert list(app.state.proxy.states.latest.config.upstreams) == ["only-one"]


def test_the_factory_refuses_a_bad_config_with_located_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "proxy.yaml"
    path.write_text("upstreams:\n  bad: {base_url: 'ftp://x'}\n", encoding="utf-8")
    monkeypatch.setenv("HISTORY_PROXY_CONFIG", str(path))
    with pytest.raises(SystemExit):
        app_from_env()
    assert "upstreams.bad.base_url" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("role", "note", "sent_role", "sent_notes"),
    [
        ("worker", "trimmed to 4 messages ~", "worker", "trimmed to 4 messages ~"),
        ("r\u00f4le", "caf\u00e9\u2014ok", "r?le", "caf??ok"),
        ("a\tb\x7fc", "line\nbreak\r", "a?b?c", "line?break?"),
    ],
)
def test_history_headers_carry_only_printable_ascii(
    role: str, note: str, sent_role: str, sent_notes: str
) -> None:
    result = PipelineResult(body={}, report={"notes": [note]}, applied=["passthrough"], tokens_before=9)
    headers = history_headers(result, role)
    assert headers["x-history-role"] == sent_role and headers["x-history-notes"] == sent_notes
    assert headers["x-history-filters"] == "passthrough", "a note is never among the filter names (L3)"
    assert headers["x-history-tokens-before"] == "9" and headers["x-history-mode"] == "enforce"
