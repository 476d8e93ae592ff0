"""The built-in mock refuses what OpenAI refuses where clients rely on it, in OpenAI's words, and accepts the rest."""

from __future__ import annotations

from typing import Any

import httpx
import httpx2
import openai
import pytest

from history_proxy.mock.upstream import create_mock_app
from tests.support.mock_client import send

CALL = {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}


def post(path: str, body: dict[str, Any]) -> httpx.Response:
    return send(create_mock_app(), "POST", path, json=body)


def error_of(answer: httpx.Response) -> dict[str, Any]:
    assert answer.status_code == 400, answer.text
    error: dict[str, Any] = answer.json()["error"]
    assert error["type"] == "invalid_request_error"
    return error


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
        ("/v1/responses", {"input": "hi"}),
    ],
)
def test_a_body_without_model_is_openais_missing_parameter_400(path: str, body: dict[str, Any]) -> None:
    error = error_of(post(path, body))
    assert error == {
        "message": "Missing required parameter: 'model'.",
        "type": "invalid_request_error",
        "param": "model",
        "code": "missing_required_parameter",
    }


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "call_1", "content": "x"}],
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "call_1", "content": "x"},
            {"role": "user", "content": "again"},
            {"role": "tool", "tool_call_id": "call_1", "content": "x"},
        ],
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "call_2", "content": "x"},
        ],
    ],
)
def test_an_orphan_tool_message_is_openais_400(messages: list[dict[str, Any]]) -> None:
    error = error_of(post("/v1/chat/completions", {"model": "gpt-4o", "messages": messages}))
    assert error["message"] == (
        "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'."
    )
    assert error["param"] == f"messages.[{len(messages) - 1}].role"


def test_the_openai_sdk_sees_the_orphan_as_its_bad_request_error() -> None:
    client = openai.OpenAI(
        base_url="http://mock/v1",
        api_key="k",
        max_retries=0,
        http_client=httpx2.Client(transport=_SyncASGI()),
    )
    with pytest.raises(openai.BadRequestError, match="must be a response to a preceeding message"):
        client.chat.completions.create(
            model="gpt-4o",
            messages=[
                {"role": "user", "content": "hi"},
                {"role": "tool", "tool_call_id": "c", "content": "x"},
            ],
        )


class _SyncASGI(httpx2.BaseTransport):
    """The mock app behind a synchronous transport of httpx2 (the HTTP stack of the SDK's sync client)."""

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        answer = send(
            create_mock_app(),
            request.method,
            request.url.path,
            content=request.read(),
            headers=request.headers,
        )
        return httpx2.Response(answer.status_code, headers=answer.headers, content=answer.content)


@pytest.mark.parametrize("kind", ["function_call_output", "custom_tool_call_output"])
def test_a_stateless_orphan_output_item_is_openais_400(kind: str) -> None:
    body = {
        "model": "gpt-5",
        "input": [{"role": "user", "content": "hi"}, {"type": kind, "call_id": "c9", "output": "x"}],
    }
    error = error_of(post("/v1/responses", body))
    assert error["message"] == "No tool call found for function call output with call_id c9."
    assert error["param"] == "input"


def test_an_output_for_a_call_at_the_provider_is_accepted() -> None:
    body = {
        "model": "gpt-5",
        "previous_response_id": "resp_1",
        "input": [{"type": "function_call_output", "call_id": "c9", "output": "x"}],
    }
    assert post("/v1/responses", body).status_code == 200


def test_tools_in_an_additional_tools_item_are_declared_tools() -> None:
    body = {
        "model": "gpt-5",
        "input": [
            {
                "type": "additional_tools",
                "role": "developer",
                "tools": [{"type": "function", "name": "exec_command"}],
            },
            {"type": "message", "role": "developer", "content": "You are Codex."},
            {"type": "message", "role": "user", "content": "use a tool please"},
        ],
    }
    answer = post("/v1/responses", body)
    assert answer.status_code == 200, answer.text
    output = answer.json()["output"]
    assert output[0]["type"] == "function_call" and output[0]["name"] == "exec_command"


def test_a_well_formed_tool_loop_is_accepted_on_both_surfaces() -> None:
    chat = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "x"},
    ]
    assert post("/v1/chat/completions", {"model": "gpt-4o", "messages": chat}).status_code == 200
    items = [
        {"role": "user", "content": "hi"},
        {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "x"},
    ]
    assert post("/v1/responses", {"model": "gpt-5", "input": items}).status_code == 200
