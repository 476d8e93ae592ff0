"""The built-in mock upstream answers like OpenAI and says what it received."""

from __future__ import annotations

import json
from typing import Any

import httpx
from starlette.applications import Starlette

from history_proxy.mock.upstream import create_mock_app
from tests.factories import action, assistant, result, system, user
from tests.support.mock_client import send


def chat(body: dict[str, Any], app: Starlette | None = None, **kwargs: Any) -> httpx.Response:
    return send(app or create_mock_app(), "POST", "/v1/chat/completions", json=body, **kwargs)


def sse_events(response: httpx.Response) -> list[str]:
    return [line.removeprefix("data: ") for line in response.text.splitlines() if line.startswith("data: ")]


def conversation() -> list[dict[str, Any]]:
    act = action()
    return [
        system(),
        user("Fix the failing test in tests/test_io.py"),
        act,
        result(act, "1 failed"),
        assistant("Fixed."),
    ]


def test_completion_has_openai_shape_and_echoes_the_model() -> None:
    response = chat({"model": "gpt-4o-mini", "messages": conversation()})

    assert response.status_code == 200
    completion = response.json()
    assert completion["object"] == "chat.completion"
    assert completion["id"] and isinstance(completion["created"], int)
    assert completion["model"] == "gpt-4o-mini"
    choice = completion["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert choice["finish_reason"] == "stop"
    usage = completion["usage"]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_answer_states_message_count_roles_tokens_and_last_user_text() -> None:
    content = chat({"model": "m", "messages": conversation()}).json()["choices"][0]["message"]["content"]

    assert content.startswith("mock: received 5 messages (system=1, user=1, assistant=2, tool=1), ~")
    assert content.endswith('last user: "Fix the failing test in tests/test_io.py"')


def test_answer_is_the_same_for_the_same_request() -> None:
    body = {"model": "m", "messages": conversation()}

    first, second = chat(body).json(), chat(body).json()

    assert first["choices"] == second["choices"]
    assert first["usage"] == second["usage"]


def test_streamed_answer_arrives_in_the_configured_number_of_chunks_and_ends_with_done() -> None:
    app = create_mock_app(chunks=4)
    body = {"model": "m", "messages": conversation(), "stream": True}

    response = chat(body, app)
    events = sse_events(response)

    assert response.headers["content-type"].startswith("text/event-stream")
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    pieces = [
        c["choices"][0]["delta"].get("content") for c in chunks if c["choices"][0]["delta"].get("content")
    ]
    assert len(pieces) == 4
    whole = chat({"model": "m", "messages": conversation()}).json()["choices"][0]["message"]["content"]
    assert "".join(pieces) == whole
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_streamed_usage_comes_last_only_when_asked_for() -> None:
    body = {"model": "m", "messages": conversation(), "stream": True}

    without = [json.loads(e) for e in sse_events(chat(body))[:-1]]
    with_usage = [
        json.loads(e) for e in sse_events(chat({**body, "stream_options": {"include_usage": True}}))[:-1]
    ]

    assert all("usage" not in c for c in without)
    assert with_usage[-1]["choices"] == []
    assert with_usage[-1]["usage"]["total_tokens"] > 0


def test_summary_request_gets_a_deterministic_bullet_summary() -> None:
    body = {"model": "m", "messages": conversation()}
    headers = {"x-history-purpose": "summary"}

    first = chat(body, headers=headers).json()["choices"][0]["message"]["content"]
    second = chat(body, headers=headers).json()["choices"][0]["message"]["content"]

    assert first == second
    assert first.splitlines() == [
        "- user asked: Fix the failing test in tests/test_io.py",
        "- assistant called: bash",
        "- tool returned 8 chars",
        "- assistant said: Fixed.",
    ]


def test_summary_leaves_out_the_summarizers_trailing_instruction() -> None:
    body = {"model": "m", "messages": [*conversation(), user("Summarize the conversation so far.")]}

    summary = chat(body, headers={"x-history-purpose": "summary"}).json()["choices"][0]["message"]["content"]

    assert "Summarize the conversation" not in summary
    assert summary.splitlines()[0] == "- user asked: Fix the failing test in tests/test_io.py"


def test_summary_has_at_most_five_bullets() -> None:
    body = {"model": "m", "messages": [user(f"step {i}") for i in range(12)] + [assistant("ok")]}

    summary = chat(body, headers={"x-history-purpose": "summary"}).json()["choices"][0]["message"]["content"]

    assert len(summary.splitlines()) == 5
    assert summary.splitlines()[-1] == "- ... and 9 more"


def test_user_asking_for_a_tool_gets_a_call_to_the_first_tool() -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    body = {"model": "m", "messages": [user("Use the tool to check the weather")], "tools": tools}

    choice = chat(body).json()["choices"][0]

    assert choice["finish_reason"] == "tool_calls"
    (call,) = choice["message"]["tool_calls"]
    assert call["function"] == {"name": "get_weather", "arguments": "{}"}
    assert call["id"]


def test_streamed_tool_call_reassembles_to_the_first_tool() -> None:
    tools = [{"type": "function", "function": {"name": "lookup"}}]
    body = {"model": "m", "messages": [user("call a tool")], "tools": tools, "stream": True}

    chunks = [json.loads(e) for e in sse_events(chat(body))[:-1]]

    deltas = [
        c["choices"][0]["delta"].get("tool_calls")
        for c in chunks
        if c["choices"][0]["delta"].get("tool_calls")
    ]
    assert deltas[0][0]["function"]["name"] == "lookup"
    assert "".join(d[0]["function"]["arguments"] for d in deltas) == "{}"
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_no_tool_call_without_tools() -> None:
    body = {"model": "m", "messages": [user("Use the tool please")]}

    message = chat(body).json()["choices"][0]["message"]

    assert "tool_calls" not in message
    assert message["content"].startswith("mock: received 1 messages")


def test_invalid_json_is_a_400_in_openai_error_shape() -> None:
    response = send(create_mock_app(), "POST", "/v1/chat/completions", content=b"{not json")

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert set(error) == {"message", "type", "param", "code"}


def test_forced_429_carries_an_openai_error_and_retry_after() -> None:
    response = chat({"model": "m", "messages": [user()]}, headers={"x-mock-status": "429"})

    assert response.status_code == 429
    assert response.headers["retry-after"] == "1"
    assert response.json()["error"]["type"] == "rate_limit_error"


def test_forced_500_is_a_server_error() -> None:
    response = chat({"model": "m", "messages": [user()]}, headers={"x-mock-status": "500"})

    assert response.status_code == 500
    assert response.json()["error"]["type"] == "server_error"


def test_models_are_listed() -> None:
    response = send(create_mock_app(), "GET", "/v1/models")

    assert response.status_code == 200
    listing = response.json()
    assert listing["object"] == "list"
    assert "gpt-4o-mini" in [m["id"] for m in listing["data"]]


def test_unknown_route_is_an_openai_shaped_404() -> None:
    response = send(create_mock_app(), "POST", "/v1/embeddings", json={})

    assert response.status_code == 404
    assert response.json()["error"]["type"] == "not_found_error"
