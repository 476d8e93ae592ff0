"""Shadow mode: the chain runs and is reported, the original messages go upstream (issue 7)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import respx
from prometheus_client.parser import text_string_to_metric_families

from history_proxy.config.loading import ConfigError, parse_config, summary
from history_proxy.config.models import Config
from history_proxy.core.identity import Identity
from history_proxy.core.messages import Message
from history_proxy.core.tokens import TokenCounters
from history_proxy.devtools.replay import replay
from history_proxy.filters.base import FilterContext
from history_proxy.pipeline.run import Pipeline
from tests.factories import action, result, system, user
from tests.support.asgi_app import serve
from tests.upstream_respx import UPSTREAM_MOCKER

MAIN = "https://upstream.test/v1"
PROXY_KEY = "hp-proxy-PLANTED-fedcba9876543210"
LONG_OUTPUT = "\n".join(f"{i}: compiling module_{i}.py ... ok" for i in range(40))
COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-4o",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}],
}
TRUNCATE = [{"type": "tool_result_truncation", "keep_recent": 1, "max_chars": 20}]


class Exploding:
    """A custom filter with a bug."""

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        raise RuntimeError("filter bug")


@pytest.fixture
def upstream() -> Iterator[respx.Route]:
    with respx.mock(assert_all_called=False, using=UPSTREAM_MOCKER) as router:
        yield router.post(f"{MAIN}/chat/completions").mock(return_value=httpx.Response(200, json=COMPLETION))


def make_config(roles: dict[str, Any], **overrides: Any) -> Config:
    raw = {"upstreams": {"main": {"base_url": MAIN, "retries": 0}}, "policies": {"roles": roles}, **overrides}
    return parse_config(raw, env={})


def errors_of(policies: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_config({"upstreams": {"main": {"base_url": MAIN}}, "policies": policies}, env={})
    return caught.value.errors


def build_conversation() -> list[Message]:
    first, second = action(), action()
    return [
        system(),
        user("Fix the bug.", message_type="task", tags=["keep_output"]),
        first,
        result(first, LONG_OUTPUT, agent="w1"),
        second,
        result(second, "recent output"),
    ]


CONVERSATION = build_conversation()


def conversation() -> list[Message]:
    """The same worker conversation every time (fresh dicts, so no test can change another's)."""
    fresh: list[Message] = json.loads(json.dumps(CONVERSATION))
    return fresh


def forwarded_messages(route: respx.Route) -> list[Message]:
    forwarded: list[Message] = json.loads(route.calls.last.request.content)["messages"]
    return forwarded


def without_annotations(messages: list[Message]) -> list[Message]:
    return [
        {k: v for k, v in m.items() if k not in ("message_type", "tags", "agent", "phase_id")}
        for m in messages
    ]


def metric(text: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return 0.0


# --- config ---------------------------------------------------------------------------------------


def test_a_policy_is_a_list_or_a_mapping_with_a_mode() -> None:
    config = make_config(
        {},
        policies={
            "roles": {
                "worker": {"mode": "shadow", "filters": TRUNCATE},
                "manager": TRUNCATE,
                "planner": {"filters": TRUNCATE},
            },
            "tenants": {"team-a": {"mode": "shadow", "filters": [{"type": "passthrough"}]}},
        },
    )
    assert config.mode("worker", None) == "shadow"
    assert config.mode("manager", None) == "enforce"
    assert config.mode("planner", None) == "enforce"  # the mapping's default mode
    assert config.mode("manager", "team-a") == "shadow"  # shadow wins: nothing is enforced
    assert config.mode("nobody", None) == "enforce"
    assert [at for at, _ in config.chain("worker", "team-a")] == [
        "policies.tenants.team-a.filters[0]",
        "policies.roles.worker.filters[0]",
    ]
    assert "worker(1, shadow)" in summary(config) and "manager(1)" in summary(config)


def test_config_errors_are_located_in_either_form() -> None:
    bad = [{"type": "passthrough"}, {"type": "last_n_observations", "n": 0}]
    assert errors_of({"roles": {"worker": {"mode": "shadow", "filters": bad}}}) == [
        "policies.roles.worker.filters[1].n: must be >= 1"
    ]
    assert errors_of({"roles": {"worker": bad}}) == ["policies.roles.worker[1].n: must be >= 1"]
    assert errors_of({"tenants": {"a": {"mode": "dry-run", "chain": []}}}) == [
        "policies.tenants.a.mode: Input should be 'enforce' or 'shadow'",
        "policies.tenants.a.chain: unknown key",
    ]
    assert errors_of({"roles": {"worker": "truncate"}}) == [
        "policies.roles.worker: must be a list of filters or a mapping {mode: enforce|shadow, filters: [...]}"
    ]


# --- the pipeline ---------------------------------------------------------------------------------


def test_the_pipeline_reports_the_chain_and_returns_the_original_to_forward() -> None:
    config = make_config({"worker": {"mode": "shadow", "filters": TRUNCATE}})
    enforced = make_config({"worker": TRUNCATE})
    body = {"model": "gpt-4o", "messages": conversation()}
    shadow = asyncio.run(Pipeline(config, TokenCounters()).run(body, Identity(role="worker"), "main"))
    enforce = asyncio.run(Pipeline(enforced, TokenCounters()).run(body, Identity(role="worker"), "main"))
    assert shadow.body["messages"] == without_annotations(conversation())
    assert shadow.filtered_messages == enforce.body["messages"]
    assert (shadow.report["mode"], enforce.report["mode"]) == ("shadow", "enforce")
    assert shadow.report["after"] == enforce.report["after"]
    assert shadow.report["filters"][0]["tokens_removed"] == enforce.report["filters"][0]["tokens_removed"] > 0
    assert shadow.report["forwarded"] == {"messages": 6, "tokens": shadow.tokens_before}
    assert "forwarded" not in enforce.report


# --- the proxy ------------------------------------------------------------------------------------

anyio_mark = pytest.mark.anyio


@anyio_mark
async def test_shadow_forwards_the_original_while_headers_and_metrics_report_the_chain(
    upstream: respx.Route, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="history_proxy.access")
    config = make_config({"worker": {"mode": "shadow", "filters": TRUNCATE}})
    async with serve(config) as client:
        response = await client.post(
            "/v1/chat/completions",
            json={"model": "gpt-4o", "messages": conversation()},
            headers={"x-agent-role": "worker"},
        )
        metrics = (await client.get("/metrics")).text
    assert response.status_code == 200
    assert forwarded_messages(upstream) == without_annotations(conversation())
    headers = response.headers
    before, after = int(headers["x-history-tokens-before"]), int(headers["x-history-tokens-after"])
    assert headers["x-history-mode"] == "shadow"
    assert after < before == int(headers["x-history-tokens-forwarded"])
    assert headers["x-history-messages-forwarded"] == headers["x-history-messages-before"] == "6"
    assert headers["x-history-filters"] == "tool_result_truncation"
    assert metric(metrics, "history_proxy_shadow_requests_total", role="worker") == 1
    assert metric(metrics, "history_proxy_tokens_after_sum", role="worker") == after
    assert (
        metric(
            metrics,
            "history_proxy_filter_tokens_removed_total",
            filter="tool_result_truncation",
            role="worker",
        )
        == before - after
    )
    [line] = [json.loads(r.getMessage()) for r in caplog.records if r.name == "history_proxy.access"]
    assert (line["mode"], line["tokens_after"], line["tokens_forwarded"]) == ("shadow", after, before)


@anyio_mark
async def test_enforce_mode_says_so_and_sends_the_filtered_messages(upstream: respx.Route) -> None:
    config = make_config({"worker": {"mode": "enforce", "filters": TRUNCATE}})
    async with serve(config) as client:
        response = await client.post(
            "/v1/chat/completions",
            json={"model": "gpt-4o", "messages": conversation()},
            headers={"x-agent-role": "worker"},
        )
    assert response.headers["x-history-mode"] == "enforce"
    assert "x-history-tokens-forwarded" not in response.headers
    assert len(forwarded_messages(upstream)[3]["content"]) < len(LONG_OUTPUT)


@anyio_mark
async def test_a_tenant_in_shadow_mode_shadows_every_role_it_calls_as(upstream: respx.Route) -> None:
    config = make_config(
        {},
        auth={"keys": [{"key": PROXY_KEY, "tenant": "team-a"}]},
        policies={"tenants": {"team-a": {"mode": "shadow", "filters": []}}, "roles": {"worker": TRUNCATE}},
    )
    async with serve(config) as client:
        response = await client.post(
            "/v1/chat/completions",
            json={"model": "gpt-4o", "messages": conversation()},
            headers={"x-agent-role": "worker", "authorization": f"Bearer {PROXY_KEY}"},
        )
    assert response.headers["x-history-mode"] == "shadow"
    assert forwarded_messages(upstream) == without_annotations(conversation())


@anyio_mark
async def test_a_failing_chain_in_shadow_mode_never_fails_the_request(upstream: respx.Route) -> None:
    config = make_config(
        {
            "worker": {
                "mode": "shadow",
                "filters": [{"type": "custom", "path": "tests.pipeline.test_shadow:Exploding"}],
            }
        }
    )
    async with serve(config) as client:
        response = await client.post(
            "/v1/chat/completions",
            json={"model": "gpt-4o", "messages": conversation()},
            headers={"x-agent-role": "worker"},
        )
        metrics = (await client.get("/metrics")).text
    assert response.status_code == 200
    assert response.headers["x-history-filters"] == "failed:custom@policies.roles.worker.filters[0]"
    assert forwarded_messages(upstream) == without_annotations(conversation())
    assert metric(metrics, "history_proxy_filter_failures_total", filter="custom") == 1


@anyio_mark
async def test_preview_in_shadow_mode_shows_the_body_sent_and_the_chains_figures(
    upstream: respx.Route,
) -> None:
    config = make_config({"worker": {"mode": "shadow", "filters": TRUNCATE}})
    async with serve(config) as client:
        response = await client.post(
            "/v1/history/preview",
            json={"model": "gpt-4o", "messages": conversation()},
            headers={"x-agent-role": "worker"},
        )
    answer = response.json()
    assert answer["body"]["messages"] == without_annotations(conversation())
    assert answer["report"]["mode"] == "shadow"
    assert answer["report"]["after"]["tokens"] < answer["report"]["before"]["tokens"]
    assert not upstream.called


def test_replay_of_a_shadowed_role_measures_what_the_chain_would_send() -> None:
    shadow = make_config({"worker": {"mode": "shadow", "filters": TRUNCATE}})
    enforce = make_config({"worker": TRUNCATE})
    body = {"model": "gpt-4o", "messages": conversation()}
    shadowed = asyncio.run(replay(Pipeline(shadow, TokenCounters()), body, Identity(role="worker")))
    enforced = asyncio.run(replay(Pipeline(enforce, TokenCounters()), body, Identity(role="worker")))
    assert shadowed.mode == "shadow"
    assert shadowed.totals == enforced.totals
    assert shadowed.totals["tokens_sent"] < shadowed.totals["tokens_unfiltered"]
