"""The surface adapters (history_proxy/surfaces): native request -> the chain's view -> native request."""

from __future__ import annotations

import asyncio
import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from history_proxy.config.models import Config
from history_proxy.core.identity import Identity
from history_proxy.errors import InvalidRequestError
from history_proxy.server.app import create_app
from history_proxy.surfaces import messages, responses
from history_proxy.surfaces.shape import detect, shape
from tests.support.shaping import THINKING, claude_code_body, pipeline, run

REPO = Path(__file__).resolve().parents[2]


# --- Responses ---------------------------------------------------------------------------------

REASONING = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"}


def codex_body() -> dict[str, Any]:
    return {
        "model": "gpt-5-codex",
        "instructions": "You are Codex.",
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix the bug"}]},
            REASONING,
            {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": '{"cmd":"ls"}'},
            {"type": "function_call", "call_id": "c2", "name": "read", "arguments": '{"path":"a"}'},
            {"type": "function_call_output", "call_id": "c1", "output": "a.txt\nb.txt\nc.txt"},
            {"type": "function_call_output", "call_id": "c2", "output": "x" * 50},
            {"type": "custom_tool_call", "call_id": "c3", "name": "apply_patch", "input": "*** Begin Patch"},
            {"type": "custom_tool_call_output", "call_id": "c3", "output": "Done!"},
            {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search"}},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Fixed."}]},
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "thanks, now test"}],
            },
        ],
    }


def test_the_responses_view_groups_each_assistant_step_with_its_calls_and_outputs() -> None:
    view = responses.to_view(codex_body()).messages
    roles = [(m["role"], [c["id"] for c in m.get("tool_calls", [])]) for m in view]
    assert roles == [
        ("system", []),
        ("user", []),
        ("assistant", ["c1", "c2"]),
        ("tool", []),
        ("tool", []),
        ("assistant", ["c3"]),
        ("tool", []),
        ("assistant", []),
        ("user", []),
    ]
    assert view[7]["content"] == [{"type": "text", "text": "Fixed."}]  # with the web search item, opaque


def test_an_input_opening_with_a_server_side_call_is_shaped_and_sent_as_it_came() -> None:
    # what a chain that cut the opening user message leaves, sent again: it used to fail with a 500
    body = {
        "model": "gpt-4o",
        "input": [
            {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search"}},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go on"}]},
        ],
    }
    assert [m["role"] for m in responses.to_view(body).messages] == ["assistant", "user"]
    assert run("responses", [{"type": "passthrough"}], body) == body


def test_a_server_side_call_opening_the_input_before_an_output_is_forwarded_as_it_came() -> None:
    # found by hypothesis: an item that rides with the output before it looked at a unit not yet there
    body = {
        "model": "gpt-5",
        "input": [
            {"type": "web_search_call", "id": "ws_1", "status": "completed"},
            {"type": "function_call_output", "call_id": "c1", "output": "o"},
        ],
    }
    assert run("responses", [{"type": "passthrough"}], body) == body


def test_an_unchanged_chain_sends_the_responses_request_as_it_came() -> None:
    body = codex_body()
    assert run("responses", [{"type": "passthrough"}], body) == body


def test_removing_a_call_keeps_its_parallel_sibling_and_drops_the_reasoning_before_it() -> None:
    body = codex_body()
    sent = run("responses", [{"type": "tool_call_filter", "exclude": ["shell"]}], body)["input"]
    kinds = [item.get("call_id") or item.get("type") for item in sent]
    assert kinds == ["message", "c2", "c2", "c3", "c3", "web_search_call", "message", "message"]


def test_truncated_outputs_are_written_in_place_and_instructions_are_never_edited() -> None:
    body = codex_body()
    chain: list[dict[str, Any]] = [
        {"type": "tool_result_truncation", "keep_recent": 1, "max_chars": 5},
        {"type": "remove_regex", "remove": ["Codex"]},
    ]
    sent = run("responses", chain, body)
    assert sent["instructions"] == "You are Codex."
    outputs = [item for item in sent["input"] if item.get("type") == "function_call_output"]
    assert outputs[0]["output"].startswith("a.txt\n\n[TOOL RESULT TRUNCATED")
    assert outputs[1]["output"].startswith("xxxxx\n\n[TOOL RESULT TRUNCATED")
    assert sent["input"][6:] == body["input"][6:]  # the newest output and everything after it verbatim
    assert sent["input"][1] == REASONING


def test_previous_response_id_forwards_unfiltered_with_a_note() -> None:
    body = {**codex_body(), "previous_response_id": "resp_1"}
    shaped = asyncio.run(
        shape("responses", pipeline([{"type": "tool_call_filter"}]), body, Identity(role="r"), "u")
    )
    assert shaped.body is body
    assert shaped.result.report["notes"] == ["history_at_provider:previous_response_id"]
    assert shaped.result.applied == []


def test_compaction_and_item_references_are_opaque() -> None:
    body = {
        "model": "gpt-4o",
        "input": [
            {"type": "compaction", "id": "cmp", "encrypted_content": "secret sk-AAAAAAAAAAAAAAAAAAAAAAAA"},
            {"type": "item_reference", "id": "msg_1"},
            {"role": "user", "content": "hi sk-AAAAAAAAAAAAAAAAAAAAAAAA"},
        ],
    }
    sent = run("responses", [{"type": "remove_regex", "remove": ["sk-[A-Z]{20,}"]}], body)["input"]
    assert sent[:2] == body["input"][:2]
    assert sent[2] == {"role": "user", "content": "hi "}


def test_a_string_input_is_one_user_message() -> None:
    body = {"model": "gpt-4o", "input": "key sk-AAAAAAAAAAAAAAAAAAAAAAAA here"}
    assert (
        run("responses", [{"type": "remove_regex", "remove": ["sk-[A-Z]{20,}"]}], body)["input"]
        == "key  here"
    )


def test_bad_responses_input_is_a_400_naming_the_item() -> None:
    with pytest.raises(InvalidRequestError, match=r"input\[1\]"):
        responses.to_view({"input": [{"role": "user", "content": "x"}, "oops"]})


# --- Messages ----------------------------------------------------------------------------------


def test_the_messages_view_splits_tool_results_from_the_text_beside_them() -> None:
    view = messages.to_view(claude_code_body()).messages
    assert [m["role"] for m in view] == ["system", "user", "assistant", "tool", "user", "assistant", "user"]
    assert view[2]["tool_calls"][0]["function"] == {"name": "Bash", "arguments": '{"command":"pytest"}'}
    assert view[2]["content"] == [{"type": "text", "text": "Running it."}]


def test_an_unchanged_chain_sends_the_messages_request_as_it_came() -> None:
    body = claude_code_body()
    snapshot = copy.deepcopy(body)
    assert run("messages", [{"type": "passthrough"}], body) == snapshot


def test_elided_tool_results_keep_thinking_and_the_text_beside_them() -> None:
    body = claude_code_body()
    sent = run("messages", [{"type": "last_n_observations", "n": 1}], body)["messages"]
    assert sent[1] == body["messages"][1]  # thinking and the signed message untouched
    assert sent[3] == body["messages"][3]


def test_removing_a_call_keeps_the_thinking_of_the_message_that_stays() -> None:
    body = claude_code_body()
    sent = run("messages", [{"type": "tool_call_filter", "exclude": ["Bash"]}], body)["messages"]
    assert sent[0] == body["messages"][0]
    assert sent[1] == {"role": "assistant", "content": [THINKING, {"type": "text", "text": "Running it."}]}
    assert sent[2] == {
        "role": "user",
        "content": [body["messages"][2]["content"][1]],
    }  # the result went with its call


def test_dropping_a_turn_drops_its_assistant_messages_with_their_thinking() -> None:
    body = claude_code_body()
    sent = run("messages", [{"type": "sliding_window", "window_size": 1}], body)
    assert sent["messages"] == [body["messages"][-1]]
    assert sent["system"] == body["system"]


def test_cache_marks_are_native_and_count_the_clients_own() -> None:
    body = claude_code_body()
    sent = run(
        "messages", [{"type": "passthrough"}], body, marks=True, slot={"last_n_messages": 3, "ttl": "1h"}
    )
    marks = [
        (i, b["cache_control"])
        for i, m in enumerate(sent["messages"])
        if isinstance(m["content"], list)
        for b in m["content"]
        if "cache_control" in b
    ]
    ours = {"type": "ephemeral"}  # the slot's 1h, downgraded: the client's 5-minute marks come first
    assert marks == [
        (2, ours),
        (4, ours),
    ]  # the client's 2 (tools, system) + 2: the limit of 4 stops the third
    assert sent["messages"][2]["content"][-1]["text"].startswith("<system-reminder>")
    assert sent["system"] == body["system"] and sent["tools"] == body["tools"]
    assert sent["messages"][:2] == body["messages"][:2]


def test_a_history_cut_to_an_assistant_message_opens_with_a_user_message() -> None:
    body = claude_code_body()
    sent = run("messages", [{"type": "sop_digest"}], body)
    assert sent["messages"][0]["role"] == "user"
    assert isinstance(sent["system"], list) and len(sent["system"]) == 3  # the digest joined system


def test_bad_messages_are_a_400_naming_the_field() -> None:
    with pytest.raises(InvalidRequestError, match=r"^messages\.1\.content: Input should be a valid list"):
        messages.to_view({"messages": [{"role": "system", "content": "x"}, {"role": "user", "content": 3}]})


# --- detection, preview ------------------------------------------------------------------------


def test_the_surface_of_a_body_is_detected() -> None:
    assert detect(codex_body()) == "responses"
    assert detect(claude_code_body()) == "messages"
    assert detect({"messages": [{"role": "user", "content": "hi"}]}) == "chat"


def test_the_preview_endpoint_takes_any_surface() -> None:
    config = Config.model_validate(
        {
            "upstreams": {"u": {"base_url": "mock://"}},
            "policies": {"roles": {"r": [{"type": "tool_call_filter"}]}},
        }
    )

    async def go() -> tuple[httpx.Response, httpx.Response]:
        app = create_app(config)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://proxy"
        ) as client:
            headers = {"x-agent-role": "r"}
            a = await client.post("/v1/history/preview", json=codex_body(), headers=headers)
            b = await client.post(
                "/v1/history/preview?api=messages", json=claude_code_body(), headers=headers
            )
            return a, b

    a, b = asyncio.run(go())
    assert a.status_code == b.status_code == 200
    assert a.json()["report"]["surface"] == "responses"
    assert not any(i.get("type") == "function_call" for i in a.json()["body"]["input"])
    assert b.json()["report"]["surface"] == "messages"
    assert b.json()["report"]["tokens_estimated"] is True


def test_the_preview_command_takes_a_messages_body(tmp_path: Path) -> None:
    path = tmp_path / "body.json"
    path.write_text(json.dumps(claude_code_body()), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "history_proxy", "preview", "--api", "messages", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    printed = json.loads(done.stdout)
    assert printed["body"]["messages"][1]["content"][0] == THINKING
    assert printed["report"]["surface"] == "messages"
