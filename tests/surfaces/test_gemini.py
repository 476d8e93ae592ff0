"""The Gemini adapter (``generateContent`` contents) as the chain's view and back, without HTTP."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from hypothesis import given

from history_proxy.config.models import Config
from history_proxy.core.identity import Identity
from history_proxy.core.tokens import TokenCounter, approximate_length
from history_proxy.errors import InvalidRequestError
from history_proxy.pipeline.run import Pipeline
from history_proxy.surfaces import gemini
from history_proxy.surfaces.memo import ViewMemo
from history_proxy.surfaces.shape import shape
from history_proxy.surfaces.table import GEMINI
from tests.strategies import SHARED_TOKENS, conversations
from tests.support.filter_cases import CASES
from tests.support.surface_chains import IDENTITY, SETTINGS, pipeline_for
from tests.surface_bodies import gemini_body, miscounted

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


def test_the_view_is_counted_as_the_pipeline_counts_it() -> None:
    for counter in (SHARED_TOKENS.get(model="gpt-4o"), TokenCounter(approximate_length)):
        assert miscounted(gemini.to_view(body(), counter), counter) == []


def pairs_whole(request: dict[str, Any]) -> bool:
    """Every ``functionCall`` answered by the next content's ``functionResponse`` parts (in any order), and
    no response without its call in the content before."""
    contents = request["contents"]
    for i, content in enumerate(contents):
        answered = sorted(p["functionResponse"]["id"] for p in content["parts"] if "functionResponse" in p)
        before = contents[i - 1]["parts"] if i else []
        if answered and answered != sorted(p["functionCall"]["id"] for p in before if "functionCall" in p):
            return False
        calls = sorted(p["functionCall"]["id"] for p in content["parts"] if "functionCall" in p)
        following = contents[i + 1]["parts"] if i + 1 < len(contents) else None
        if (
            calls
            and following is not None
            and sorted(p["functionResponse"]["id"] for p in following if "functionResponse" in p) != calls
        ):
            return False
    return True


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in CASES])
@SETTINGS
@given(chat=conversations())
def test_every_filter_keeps_every_call_with_its_response_and_the_instruction(case: Any, chat: Any) -> None:
    request = gemini_body(chat)
    snapshot = copy.deepcopy(request)
    try:
        sent = asyncio.run(
            shape(GEMINI, pipeline_for([case.filter]), request, IDENTITY, "u", model="gpt-4o")
        ).body
    except InvalidRequestError:
        return
    assert request == snapshot
    assert pairs_whole(sent), case.name
    kept = snapshot.get("systemInstruction", {}).get("parts", [])
    assert sent.get("systemInstruction", {}).get("parts", [])[: len(kept)] == kept, "the instruction stays"
    assert all(content["parts"] for content in sent["contents"]), "no content is left empty"


def test_the_next_turn_converts_only_its_new_contents_and_sends_what_a_cold_request_sends() -> None:
    memo = ViewMemo(1000)
    chain = [{"type": "last_n_observations", "n": 1}]
    earlier = body()
    earlier["contents"] = earlier["contents"][:7]
    p = pipeline(chain)

    def sent(request: dict[str, Any], with_memo: ViewMemo | None) -> dict[str, Any]:
        return asyncio.run(shape(GEMINI, p, request, Identity(role="r"), "g", with_memo, model="gpt-4o")).body

    sent(earlier, memo)
    hits = memo.hits
    assert sent(body(), memo) == sent(body(), None)
    assert memo.hits - hits == 7, "the seven contents of the previous turn kept their view"
