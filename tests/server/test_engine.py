"""``POST /v1/compress`` and ``GET /v1/retrieve/{hash}``: the gateways' engine contract, in process."""

from __future__ import annotations

import time
from typing import Any

import pytest

from history_proxy.config.loading import parse_config
from history_proxy.config.models import Config
from tests.factories import action, call, result, system, user
from tests.support.asgi_app import serve

pytestmark = pytest.mark.anyio

GATEWAY_KEY = "gw-key-PLANTED-0123456789abcdef"
OTHER_KEY = "gw-key-OTHER-0123456789abcdef01"
LONG = "\n".join(f"line {n} of /repo/src/module_{n}.py" for n in range(40))


def engine_config(**overrides: Any) -> Config:
    raw: dict[str, Any] = {
        "upstreams": {"main": {"base_url": "https://upstream.test/v1", "retries": 0}},
        "policies": {
            "roles": {
                "worker": [{"type": "last_n_observations", "n": 1}],
                "reviewer": [{"type": "tool_call_filter", "exclude": ["grep"]}],
                "broken": [{"type": "custom", "path": "tests.server.test_engine:Exploding"}],
            }
        },
        **overrides,
    }
    return parse_config(raw, env={})


class Exploding:
    """A custom filter that always raises (a dead chain)."""

    type_name = "custom"

    def __init__(self, **params: Any) -> None:
        pass

    def apply(self, messages: Any, ctx: Any) -> Any:
        raise RuntimeError("this chain is dead")


def tool_loop() -> list[dict[str, Any]]:
    first, second, third = action(call("bash")), action(call("grep")), action(call("bash"))
    return [
        system("You are a coding agent."),
        user("Fix the failing test."),
        first,
        result(first, LONG),
        second,
        result(second, "src/a.py:12: def broken_function_name()"),
        third,
        result(third, "tests pass: 1234 passed"),
        user("Now tell me what you did."),
    ]


async def test_the_worker_chain_elides_old_observations_and_answers_one_message_per_message_sent() -> None:
    sent = tool_loop()
    async with serve(engine_config()) as client:
        answer = await client.post(
            "/v1/compress", json={"messages": sent, "model": "gpt-4o"}, headers={"X-Agent-Role": "worker"}
        )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert len(body["messages"]) == len(sent)
    assert [m["role"] for m in body["messages"]] == [m["role"] for m in sent]
    assert body["messages"][3]["content"].startswith("Old environment output: (40 lines omitted)")
    assert body["messages"][7] == sent[7], "the newest observation is kept"
    assert body["messages"][0] == sent[0], "the system prompt comes back verbatim"
    assert body["tokens_before"] > body["tokens_after"] > 0
    assert body["tokens_saved"] == body["tokens_before"] - body["tokens_after"]
    assert body["transforms_applied"] == ["last_n_observations"]
    assert 0 < body["compression_ratio"] < 1
    ours = body["history_proxy"]
    assert ours["role"] == "worker" and ours["mode"] == "enforce"
    assert 0 < ours["evidence_kept"] < 1
    assert answer.headers["x-history-role"] == "worker"


async def test_dropped_messages_become_placeholders_that_keep_their_pairs_and_are_retrievable() -> None:
    sent = tool_loop()
    async with serve(engine_config()) as client:
        answer = await client.post("/v1/compress", json={"messages": sent, "config": {"role": "reviewer"}})
        body = answer.json()
        assert answer.status_code == 200, answer.text
        assert body["history_proxy"]["role"] == "reviewer"
        grep_result = body["messages"][5]
        assert grep_result["role"] == "tool" and grep_result["tool_call_id"] == sent[5]["tool_call_id"]
        assert body["messages"][4]["tool_calls"] == sent[4]["tool_calls"], "the call stays: the pair is whole"
        call_left_out, left_out = body["history_proxy"]["left_out"]
        assert [call_left_out["index"], left_out["index"]] == [4, 5], "the grep call and its result"
        assert f"hash={left_out['hash']}" in grep_result["content"]
        assert body["ccr_hashes"] == [call_left_out["hash"], left_out["hash"]]
        again = await client.get(f"/v1/retrieve/{left_out['hash']}")
        assert again.status_code == 200
        assert again.json()["original_content"] == sent[5]["content"]
        unknown = await client.get("/v1/retrieve/0123456789abcdef01234567")
        assert unknown.status_code == 404
        assert unknown.json()["error"]["code"] == "hash_not_found"


async def test_audit_mode_reports_the_chain_and_answers_the_messages_as_sent() -> None:
    sent = tool_loop()
    async with serve(engine_config()) as client:
        answer = await client.post(
            "/v1/compress",
            json={"messages": sent, "config": {"mode": "audit", "role": "worker"}},
        )
    body = answer.json()
    assert body["messages"] == sent
    assert body["tokens_saved"] == 0 and body["history_proxy"]["mode"] == "audit"
    assert body["history_proxy"]["chain_tokens_after"] < body["tokens_before"]


async def test_tool_results_sent_without_their_calls_are_shaped_as_litellm_sends_them() -> None:
    """LiteLLM withholds assistant rows: the results arrive alone and still count as observations."""
    sent = [m for m in tool_loop()[1:-1] if m["role"] != "assistant"]
    async with serve(engine_config()) as client:
        answer = await client.post(
            "/v1/compress", json={"messages": sent}, headers={"X-Agent-Role": "worker"}
        )
    body = answer.json()
    assert answer.status_code == 200, answer.text
    assert [m["role"] for m in body["messages"]] == ["user", "tool", "tool", "tool"]
    assert body["messages"][1]["content"].startswith("Old environment output")
    assert body["messages"][3] == sent[3]
    assert all("history_ref" not in m for m in body["messages"])


async def test_the_gateway_key_selects_tenant_and_role_and_other_tenants_cannot_retrieve() -> None:
    config = engine_config(
        auth={
            "keys": [
                {"key": GATEWAY_KEY, "tenant": "team-a", "role": "reviewer"},
                {"key": OTHER_KEY, "tenant": "team-b"},
            ]
        }
    )
    async with serve(config) as client:
        refused = await client.post("/v1/compress", json={"messages": tool_loop()})
        assert refused.status_code == 401
        answer = await client.post(
            "/v1/compress", json={"messages": tool_loop()}, headers={"Authorization": f"Bearer {GATEWAY_KEY}"}
        )
        body = answer.json()
        assert body["history_proxy"]["role"] == "reviewer"
        handle = body["ccr_hashes"][0]
        mine = await client.get(f"/v1/retrieve/{handle}", headers={"Authorization": f"Bearer {GATEWAY_KEY}"})
        theirs = await client.get(f"/v1/retrieve/{handle}", headers={"Authorization": f"Bearer {OTHER_KEY}"})
        nobody = await client.get(f"/v1/retrieve/{handle}")
    assert mine.status_code == 200
    assert theirs.status_code == 404
    assert nobody.status_code == 401


async def test_a_key_scoped_to_other_upstreams_is_refused_as_on_every_route() -> None:
    config = engine_config(
        upstreams={
            "main": {"base_url": "https://upstream.test/v1", "retries": 0},
            "other": {"base_url": "https://other.test/v1", "retries": 0},
        },
        auth={"keys": [{"key": OTHER_KEY, "tenant": "team-b", "upstreams": ["other"], "role": "worker"}]},
    )
    async with serve(config) as client:
        answer = await client.post(
            "/v1/compress",
            json={"messages": tool_loop(), "model": "gpt-4o"},
            headers={"Authorization": f"Bearer {OTHER_KEY}"},
        )
        unknown = await client.post(
            "/v1/compress", json={"messages": tool_loop()}, headers={"Authorization": "Bearer nope"}
        )
    assert answer.status_code == 403
    assert "auth.keys[].upstreams" in answer.json()["error"]["message"]
    assert unknown.status_code == 401


async def test_a_dead_chain_answers_an_error_at_once_so_the_gateway_sends_uncompressed() -> None:
    async with serve(engine_config()) as client:
        await client.post("/v1/compress", json={"messages": tool_loop()})  # warm
        started = time.perf_counter()
        answer = await client.post(
            "/v1/compress", json={"messages": tool_loop()}, headers={"X-Agent-Role": "broken"}
        )
        elapsed_ms = (time.perf_counter() - started) * 1000
    assert answer.status_code == 500
    assert answer.json()["error"]["code"] == "filter_failed"
    assert elapsed_ms < 100, elapsed_ms


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": []}, "messages"),
        ({"messages": "hi"}, "messages"),
        ({"messages": [{"role": "user", "content": "x"}], "config": {"mode": "squash"}}, "config.mode"),
        ({"messages": [{"role": "user", "content": "x"}], "config": []}, "config"),
    ],
)
async def test_a_body_that_is_not_a_conversation_is_a_clear_400(body: dict[str, Any], param: str) -> None:
    async with serve(engine_config()) as client:
        answer = await client.post("/v1/compress", json=body)
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == param
