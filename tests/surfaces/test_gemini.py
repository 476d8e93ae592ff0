"""The Gemini adapter (``generateContent`` contents) as the chain's view and back, without HTTP."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from history_proxy.config.models import Config
from history_proxy.core.identity import Identity
from history_proxy.pipeline.run import Pipeline
from history_proxy.surfaces import gemini
from history_proxy.surfaces.shape import shape
from history_proxy.surfaces.table import GEMINI
from tests.strategies import SHARED_TOKENS

LONG = "\n".join(f"/repo/src/file_{n}.py" for n in range(30))


def pipeline(chain: list[dict[str, Any]]) -> Pipeline:
    config = Config.model_validate(
        {"upstreams": {"g": {"base_url": "mock://", "api": "google"}}, "policies": {"roles": {"r": chain}}}
    )
    return Pipeline(config, SHARED_TOKENS)


def call(name: str, command: str) -> dict[str, Any]:
    return {"role": "model", "parts": [{"functionCall": {"name": name, "args": {"command": command}}}]}


def response(name: str, output: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"functionResponse": {"name": name, "response": {"output": output}}}]}


def body() -> dict[str, Any]:
    return {
        "systemInstruction": {"parts": [{"text": "You are Gemini CLI."}]},
        "tools": [{"functionDeclarations": [{"name": "run_shell_command"}, {"name": "grep"}]}],
        "generationConfig": {"temperature": 0},
        "contents": [
            {
                "role": "user",
                "parts": [
                    {"text": "Fix the test."},
                    {"inlineData": {"mimeType": "image/png", "data": "AAAA"}},
                ],
            },
            {
                "role": "model",
                "parts": [
                    {"thought": True, "text": "thinking"},
                    {"functionCall": {"name": "run_shell_command", "args": {"command": "ls"}}},
                ],
            },
            response("run_shell_command", LONG),
            call("grep", "grep -r broken"),
            response("grep", "src/a.py:1: broken"),
            call("run_shell_command", "pytest"),
            response("run_shell_command", "1 passed"),
            {"role": "model", "parts": [{"text": "Fixed."}]},
            {"role": "user", "parts": [{"text": "Thanks, now summarise."}]},
        ],
    }


def run(chain: list[dict[str, Any]], request: dict[str, Any]) -> dict[str, Any]:
    shaped = asyncio.run(
        shape(GEMINI, pipeline(chain), request, Identity(role="r"), "g", model="gemini-2.5-pro")
    )
    return shaped.body


def test_the_view_reads_contents_as_chat_messages_with_calls_answered_in_order() -> None:
    view = gemini.to_view(body())
    roles = [m["role"] for m in view.messages]
    assert roles == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    first_call = view.messages[2]["tool_calls"][0]
    assert first_call["function"]["name"] == "run_shell_command"
    assert view.messages[3]["tool_call_id"] == first_call["id"], "the response answers the call before it"
    assert view.messages[1]["content"][1]["type"] == "image_url", "inline data is an image part"
    assert len(view.counts) == len(view.messages) and all(c for c in view.counts)


def test_an_unchanged_request_is_sent_as_it_came() -> None:
    request = body()
    assert run([{"type": "passthrough"}], request) is request


def test_an_elided_observation_is_written_into_its_function_response_and_the_rest_is_untouched() -> None:
    request = body()
    snapshot = copy.deepcopy(request)
    sent = run([{"type": "last_n_observations", "n": 1}], request)
    assert request == snapshot, "the client's body is never changed in place"
    assert sent["systemInstruction"] == request["systemInstruction"]
    assert sent["tools"] == request["tools"] and sent["generationConfig"] == request["generationConfig"]
    elided = sent["contents"][2]["parts"][0]["functionResponse"]
    assert elided["name"] == "run_shell_command"
    assert elided["response"]["output"].startswith("Old environment output: (30 lines omitted)")
    assert sent["contents"][6] is request["contents"][6], "the newest observation goes as it came"
    assert sent["contents"][1] is request["contents"][1], "the thought part travels with its content"


def test_a_dropped_call_leaves_with_its_response_so_every_pair_stays_whole() -> None:
    sent = run([{"type": "tool_call_filter", "exclude": ["grep"]}], body())
    names = [
        next(iter(part.values()))["name"]
        for content in sent["contents"]
        for part in content["parts"]
        if "functionCall" in part or "functionResponse" in part
    ]
    assert names == ["run_shell_command"] * 4
    assert len(sent["contents"]) == len(body()["contents"]) - 2


def test_a_window_that_opens_on_a_model_turn_gets_a_user_turn_first_and_the_instruction_stays() -> None:
    sent = run([{"type": "sliding_window", "window_size": 1}], body())
    assert sent["contents"][0]["role"] == "user"
    assert sent["systemInstruction"] == body()["systemInstruction"]
    assert sent["contents"][-1] == body()["contents"][-1]


def test_count_tokens_over_a_whole_request_is_forwarded_as_it_came() -> None:
    request = {"generateContentRequest": {"model": "models/gemini-2.5-pro", "contents": []}}
    assert run([{"type": "last_n_observations", "n": 1}], request) is request
