"""The Responses adapter is never stricter than the upstream, and every view keeps the leading instructions.

Codex 0.17x may send no top-level ``tools``/``instructions``: its tools travel in an ``additional_tools``
input item, followed by developer messages. Those, and any item the adapter does not know among them,
are the leading instructions; every role's view keeps them. Anything the adapter does not know is sent
unchanged, in place; the only 400s it gives name ``input`` items in OpenAI's wording.
"""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import httpx
import pytest

from history_proxy.config.loading import load_config
from history_proxy.server.app import create_app
from history_proxy.surfaces import responses
from tests.support.shaping import CHAINS, TEXT_REPLACED, run

REPO = Path(__file__).resolve().parents[2]
TOOLS = {
    "type": "additional_tools",
    "role": "developer",
    "tools": [{"type": "function", "name": "exec_command", "parameters": {"type": "object"}}],
}
SYS = {"type": "message", "role": "developer", "content": "SYS"}
COMPACTION = {"type": "compaction", "id": "cmp_0", "encrypted_content": "enc"}
UNKNOWN = {"type": "frobnicate", "id": "fr_1", "payload": {"x": 1}}
CRITIC = {"type": "message", "role": "critic", "content": [{"type": "input_text", "text": "note"}]}
REASONING = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAAB-opaque"}


def lead() -> list[dict[str, Any]]:
    return [TOOLS, SYS, COMPACTION, {**SYS, "content": "MORE"}, UNKNOWN]


def codex_history() -> dict[str, Any]:
    """Two turns of a Codex worker: tools and developer messages first, tool loops after each task."""
    return {
        "model": "gpt-5",
        "stream": True,
        "input": [
            *lead(),
            {"type": "message", "role": "user", "content": "first task"},
            REASONING,
            {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": '{"cmd":"ls"}'},
            {"type": "function_call_output", "call_id": "c1", "output": "a.txt " * 200},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]},
            {"type": "message", "role": "user", "content": "second task"},
            {**REASONING, "id": "rs_2"},
            {"type": "function_call", "call_id": "c2", "name": "exec_command", "arguments": '{"cmd":"pwd"}'},
            {"type": "function_call_output", "call_id": "c2", "output": "/work"},
        ],
    }


def test_the_codex_repro_keeps_its_tools_and_developer_messages_under_the_worker_view() -> None:
    body = {"model": "gpt-5", "input": [TOOLS, SYS, {"type": "message", "role": "user", "content": "task"}]}
    sent = run("responses", [{"type": "worker_view", "turns": "first_user"}], body)
    assert sent["input"] == body["input"]


def test_additional_tools_and_opaque_items_among_the_instructions_are_leading_system_messages() -> None:
    view = responses.to_view(codex_history()).messages
    assert [m["role"] for m in view[:5]] == ["developer"] * 5
    assert view[5] == {"role": "user", "content": "first task", "history_ref": 5}


@pytest.mark.parametrize("name", list(CHAINS))
def test_every_view_keeps_the_leading_instructions_whole_and_first(name: str) -> None:
    body = codex_history()
    snapshot = copy.deepcopy(body)
    sent = run("responses", CHAINS[name], body)
    assert body == snapshot
    kept = sent["input"]
    if name in TEXT_REPLACED:  # the text instructions are replaced, dropped or edited; never the rest
        assert [item for item in kept if item in (TOOLS, COMPACTION, UNKNOWN)] == [TOOLS, COMPACTION, UNKNOWN]
        assert kept.index(TOOLS) < 2, name
        return
    assert kept[:5] == lead(), name
    assert any(item.get("content") == "second task" for item in kept), "the newest task is kept"


def test_encrypted_reasoning_is_passed_back_intact_by_every_view() -> None:
    for name, chain in CHAINS.items():
        sent = run("responses", chain, codex_history())["input"]
        for item in sent:
            if item.get("type") == "reasoning":
                assert item in (REASONING, {**REASONING, "id": "rs_2"}), name


def test_unknown_roles_item_types_parts_and_fields_are_forwarded_unchanged_in_place() -> None:
    odd_part = {"type": "input_hologram", "data": "zz"}
    body = {
        "model": "gpt-5",
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "t"}, odd_part]},
            CRITIC,
            {**REASONING, "x_vendor": 1},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}", "x_new": True},
            {"type": "function_call_output", "call_id": "c1", "output": "y" * 600, "x_meta": {"a": 1}},
            {"type": "message", "role": "user", "content": "next", "x_field": "kept"},
        ],
    }
    sent = run("responses", [{"type": "tool_result_truncation", "keep_recent": 0, "max_chars": 5}], body)
    got = sent["input"]
    assert got[:4] == body["input"][:4]
    assert got[4]["x_meta"] == {"a": 1} and got[4]["output"].startswith("yyyyy")
    assert got[5] == body["input"][5]


def preview(body: Any, role: str, path: str = "/v1/history/preview") -> httpx.Response:
    """``body`` posted to the app on the default config (JSON, or raw bytes as they are)."""

    async def go() -> httpx.Response:
        app = create_app(load_config(REPO / "config" / "default.yaml", env={"HISTORY_PROXY_MOCK": "1"}))
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
                sent = {"content": body} if isinstance(body, bytes) else {"json": body}
                headers = {"X-Agent-Role": role, "content-type": "application/json"}
                return await client.post(path, headers=headers, **sent)

    return asyncio.run(go())


@pytest.mark.parametrize("role", ["worker", "orchestrator", "manager", "default"])
def test_the_default_configs_roles_keep_codexs_instructions(role: str) -> None:
    body = {
        "model": "gpt-5",
        "input": [TOOLS, SYS, CRITIC, {"type": "message", "role": "user", "content": "task"}],
    }
    answer = preview(body, role)
    assert answer.status_code == 200, answer.text
    assert answer.json()["body"]["input"] == body["input"]


@pytest.mark.parametrize(
    ("input_", "param", "message"),
    [
        (
            [{"role": "user", "content": "x"}, "oops"],
            "input[1]",
            "Invalid type for 'input[1]': expected an object",
        ),
        ([{"type": "message", "role": 3}], "input[0].role", "Invalid type for 'input[0].role'"),
        ({"role": "user"}, "input", "Invalid type for 'input'"),
    ],
)
def test_the_proxys_own_400s_on_responses_are_worded_like_openais(
    input_: Any, param: str, message: str
) -> None:
    answer = preview({"model": "gpt-5", "input": input_}, "worker")
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == param and error["message"].startswith(message)
    assert error["type"] == "invalid_request_error" and "messages" not in error["message"]


def test_an_unknown_item_between_parallel_outputs_rides_with_the_output_before_it() -> None:
    body = {
        "model": "gpt-5",
        "input": [
            {"type": "message", "role": "user", "content": "task"},
            {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
            {"type": "function_call", "call_id": "b", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "a", "output": "1"},
            UNKNOWN,
            {"type": "function_call_output", "call_id": "b", "output": "2"},
            {"type": "message", "role": "user", "content": "next"},
        ],
    }
    view = responses.to_view(body).messages
    assert [m["role"] for m in view] == ["user", "assistant", "tool", "tool", "user"]
    assert run("responses", [{"type": "passthrough"}], body) == body
    edited = run("responses", [{"type": "remove_regex", "remove": ["1"]}], body)
    assert edited["input"][3]["output"] == "" and edited["input"][4] == UNKNOWN
    assert run("responses", [{"type": "tool_call_filter"}], body)["input"] == [
        body["input"][0],
        body["input"][6],
    ]


@pytest.mark.parametrize("raw", [b"{nope", b"[1, 2]"])
def test_a_body_that_is_no_json_object_on_responses_asks_for_input_not_messages(raw: bytes) -> None:
    error = preview(raw, "worker", "/v1/responses").json()["error"]
    assert "'input'" in error["message"] and "messages" not in error["message"]


@pytest.mark.parametrize("body", [{"model": "gpt-5"}, {"model": "gpt-5", "input": []}])
def test_a_request_with_no_history_to_shape_is_the_upstreams_to_judge(body: dict[str, Any]) -> None:
    answer = preview(body, "worker", "/v1/responses")
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-history-notes"] == "history_at_provider:no_input"


@pytest.mark.parametrize(
    "name", ["worker_view", "orchestrator_view", "manager_view", "sliding_window", "truncate"]
)
def test_tools_declared_mid_conversation_are_kept_in_place_by_every_view(name: str) -> None:
    more_tools = {**TOOLS, "tools": [{"type": "function", "name": "view_image", "parameters": {}}]}
    body = codex_history()
    body["input"].insert(10, more_tools)  # declared in the first turn, after its answer
    sent = run("responses", CHAINS[name], body)["input"]
    assert more_tools in sent, name
    at = sent.index(more_tools)
    assert sent[at + 1 :] == [i for i in body["input"][11:] if i in sent], "in place: before what followed it"
