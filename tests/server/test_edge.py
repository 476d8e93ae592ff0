"""The chat completions fast path as a client sees it: the same answers as through Starlette's router."""

from __future__ import annotations

import gc
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

from history_proxy.observability.access import fresh_request_id
from history_proxy.server.app import app_from_env, create_app
from history_proxy.server.gc_tuning import GC_YOUNG_THRESHOLD
from tests.support.asgi_app import COMPLETION, MAIN, chat, make_config, serve

pytestmark = pytest.mark.anyio


async def test_the_query_string_of_a_chat_completion_is_forwarded(mocked: respx.MockRouter) -> None:
    route = mocked.post(f"{MAIN}/chat/completions").mock(return_value=httpx.Response(200, json=COMPLETION))
    async with serve(make_config()) as client:
        response = await client.post("/v1/chat/completions?api-version=2024-06-01&x=a%20b", json=chat())
    assert response.status_code == 200
    assert route.calls.last.request.url.query == b"api-version=2024-06-01&x=a%20b"


async def test_the_first_of_repeated_headers_is_the_one_read(mocked: respx.MockRouter) -> None:
    mocked.post(f"{MAIN}/chat/completions").mock(return_value=httpx.Response(200, json=COMPLETION))
    headers = [("x-agent-role", "worker"), ("x-agent-role", "not valid!"), ("x-request-id", "first-id")]
    headers.append(("x-request-id", "second-id"))
    async with serve(make_config()) as client:
        response = await client.post("/v1/chat/completions", json=chat(), headers=headers)
    assert response.status_code == 200
    assert response.headers["x-history-role"] == "worker"
    assert response.headers["x-request-id"] == "first-id"


@pytest.mark.parametrize(("status", "framed"), [(200, True), (204, False), (500, True)])
async def test_whole_answers_carry_a_content_length_unless_they_cannot_have_a_body(
    mocked: respx.MockRouter, status: int, framed: bool
) -> None:
    content = b"" if status == 204 else b'{"ok": true}'
    upstream = httpx.Response(
        status,
        content=content,
        headers={"content-type": "application/json", "content-length": str(len(content))},
    )
    mocked.post(f"{MAIN}/chat/completions").mock(return_value=upstream)
    async with serve(make_config()) as client:
        response = await client.post("/v1/chat/completions", json=chat())
    assert response.status_code == status and response.content == content
    assert ("content-length" in response.headers) == framed


async def test_a_streamed_answer_is_relayed_without_a_content_length(mocked: respx.MockRouter) -> None:
    events = b'data: {"a": 1}\n\ndata: [DONE]\n\n'
    mocked.post(f"{MAIN}/chat/completions").mock(
        return_value=httpx.Response(200, content=events, headers={"content-type": "text/event-stream"})
    )
    async with serve(make_config()) as client:
        response = await client.post("/v1/chat/completions", json=chat(stream=True))
    assert response.content == events and "content-length" not in response.headers
    assert response.headers["content-type"] == "text/event-stream"


async def test_under_a_root_path_chat_completions_answer_as_on_the_fast_path(
    mocked: respx.MockRouter,
) -> None:
    mocked.post(f"{MAIN}/chat/completions").mock(return_value=httpx.Response(200, json=COMPLETION))
    app = create_app(make_config())
    answers: list[httpx.Response] = []
    for root_path in ("", "/proxy"):
        transport = httpx.ASGITransport(app=app, root_path=root_path)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://p") as client,
        ):
            answers.append(
                await client.post(
                    f"{root_path}/v1/chat/completions",
                    json=chat(),
                    headers={"x-request-id": "same", "x-agent-role": "worker"},
                )
            )
    fast, routed = answers
    assert fast.status_code == routed.status_code == 200 and fast.json() == routed.json() == COMPLETION
    dropped = {"x-history-overhead-ms"}
    assert [(k, v) for k, v in fast.headers.multi_items() if k not in dropped] == [
        (k, v) for k, v in routed.headers.multi_items() if k not in dropped
    ]


async def test_proxy_errors_on_the_fast_path_are_openai_shaped(mocked: respx.MockRouter) -> None:
    async with serve(make_config()) as client:
        response = await client.post(
            "/v1/chat/completions", content=b"{nope", headers={"x-request-id": "r-1"}
        )
    body: dict[str, Any] = response.json()
    assert response.status_code == 400 and body["error"]["code"] == "invalid_json"
    assert (
        response.headers["x-request-id"] == "r-1" and response.headers["content-type"] == "application/json"
    )


def test_fresh_request_ids_are_distinct_uuid4_hex() -> None:
    ids = [fresh_request_id() for _ in range(2000)]  # several draws of random bytes
    assert len(set(ids)) == len(ids)
    for value in ids:
        parsed = uuid.UUID(hex=value)
        assert parsed.hex == value and parsed.version == 4 and parsed.variant == uuid.RFC_4122


async def test_the_served_app_settles_the_garbage_collector_once_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "proxy.yaml"
    path.write_text("upstreams:\n  only-one: {base_url: 'https://example.test/v1'}\n", encoding="utf-8")
    monkeypatch.setenv("HISTORY_PROXY_CONFIG", str(path))
    threshold = gc.get_threshold()
    try:
        in_code = create_app(make_config())
        async with in_code.router.lifespan_context(in_code):
            assert gc.get_threshold() == threshold  # an app built in code leaves the process alone
        served = app_from_env()
        async with served.router.lifespan_context(served):
            assert gc.get_threshold()[0] == GC_YOUNG_THRESHOLD and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


@pytest.mark.parametrize(
    "path",
    [
        "/v1/..\\admin",
        "/v1/..%5cadmin",
        "/v1/..%5Cadmin",
        "/v1/..;/admin",
        "/v1/models;jsessionid=1",
        "/v1/%2e%2e/admin",
        "/v1/.%2e/admin",
        "/v1/%252e%252e/admin",
        "/v1/models/x%00y",
    ],
)
async def test_paths_an_upstream_could_read_as_another_are_400_and_never_forwarded(
    mocked: respx.MockRouter, path: str
) -> None:
    route = mocked.route(host="upstream.test")
    async with serve(make_config()) as client:
        response = await client.get(path)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid_path"
    assert not route.called


async def test_plain_paths_with_colons_dots_and_dashes_are_forwarded(mocked: respx.MockRouter) -> None:
    route = mocked.get(f"{MAIN}/models/ft:gpt-4o-mini:org:custom.v1").mock(
        return_value=httpx.Response(200, json={})
    )
    async with serve(make_config()) as client:
        response = await client.get("/v1/models/ft:gpt-4o-mini:org:custom.v1")
    assert response.status_code == 200 and route.called


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/responses", {"model": "gpt-4o", "input": "hi"}),
        (
            "/v1/messages",
            {"model": "gpt-4o", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
        ),
    ],
)
async def test_under_a_root_path_the_surfaces_answer_as_on_the_fast_path(
    mocked: respx.MockRouter, path: str, body: dict[str, Any]
) -> None:
    route = mocked.post(f"{MAIN}{path.removeprefix('/v1')}").mock(
        return_value=httpx.Response(200, json={"ok": 1})
    )
    config = make_config()
    app = create_app(
        config.model_copy(
            update={
                "upstreams": {
                    name: u.model_copy(update={"api": "anthropic"}) if path.endswith("messages") else u
                    for name, u in config.upstreams.items()
                }
            }
        )
    )
    answers: list[httpx.Response] = []
    for root_path in ("", "/proxy"):
        transport = httpx.ASGITransport(app=app, root_path=root_path)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://p") as client,
        ):
            answers.append(
                await client.post(f"{root_path}{path}", json=body, headers={"x-request-id": "same"})
            )
    fast, routed = answers
    assert fast.status_code == routed.status_code == 200 and fast.json() == routed.json() == {"ok": 1}
    assert fast.headers["x-history-role"] == routed.headers["x-history-role"]
    assert route.call_count == 2
