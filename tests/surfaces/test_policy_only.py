"""Legacy completions and Messages batches pass the global and tenant policies, and nothing else.

(:mod:`history_proxy.surfaces.policy_only`; end to end in tests/test_every_body_filtered_e2e.py.)
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from history_proxy.config.models import Config
from history_proxy.core.identity import Identity
from history_proxy.core.tokens import TokenCounters
from history_proxy.errors import InvalidRequestError
from history_proxy.pipeline.run import Pipeline
from history_proxy.surfaces.policy_only import FILTERED, POLICY_ONLY
from history_proxy.surfaces.shape import shape
from history_proxy.surfaces.table import BY_ROUTE

SECRET = "sk-" + "Zx1Cv2Bn3M" * 3
STRIP = {"type": "remove_regex", "remove": ["sk-[A-Za-z0-9]{20,}"]}
COMPLETIONS, BATCHES = BY_ROUTE["/v1/completions"], BY_ROUTE["/v1/messages/batches"]


def shaped(
    policies: dict[str, Any], route: Any, body: dict[str, Any], identity: Identity | None = None
) -> Any:
    config = Config.model_validate({"upstreams": {"u": {"base_url": "mock://"}}, "policies": policies})
    original = copy.deepcopy(body)
    out = asyncio.run(
        shape(route, Pipeline(config, TokenCounters()), body, identity or Identity(role="r"), "u")
    )
    assert body == original  # the client's request is never edited in place
    return out


def test_a_prompt_list_keeps_its_token_arrays_and_order() -> None:
    body = {"model": "m", "prompt": [f"a {SECRET}", [1, 2, 3], "b"], "suffix": SECRET}
    out = shaped({"global": [STRIP]}, COMPLETIONS, body)
    assert out.body["prompt"] == ["a ", [1, 2, 3], "b"]
    assert out.body["suffix"] == SECRET  # not a conversation: forwarded as sent (documented)
    assert out.result.report["notes"][-2:] == [POLICY_ONLY, FILTERED]


def test_a_roles_chain_never_runs_on_a_prompt() -> None:
    body = {"model": "m", "prompt": f"x {SECRET}"}
    out = shaped({"roles": {"r": [STRIP]}}, COMPLETIONS, body)
    assert out.body is body


def test_a_tenants_policy_applies_and_shadow_mode_changes_nothing() -> None:
    body = {"model": "m", "prompt": f"x {SECRET}"}
    tenant = Identity(role="r", tenant="t")
    assert shaped({"tenants": {"t": [STRIP]}}, COMPLETIONS, body, tenant).body["prompt"] == "x "
    shadow = {"tenants": {"t": {"mode": "shadow", "filters": [STRIP]}}}
    assert shaped(shadow, COMPLETIONS, body, tenant).body is body


def test_each_batch_request_is_filtered_and_everything_else_kept() -> None:
    params = {
        "model": "claude-x",
        "max_tokens": 5,
        "system": [{"type": "text", "text": f"key {SECRET}"}],
        "messages": [{"role": "user", "content": f"use {SECRET}"}],
    }
    body = {
        "requests": [
            {"custom_id": "a", "params": params},
            {"custom_id": "b", "params": {"model": "c", "messages": [{"role": "user", "content": "ok"}]}},
            7,
        ]
    }
    out = shaped({"global": [STRIP]}, BATCHES, body)
    first = out.body["requests"][0]["params"]
    assert first["system"] == [{"type": "text", "text": "key "}]
    assert first["messages"] == [{"role": "user", "content": "use "}]
    assert out.body["requests"][1:] == body["requests"][1:]


def test_a_batch_request_the_messages_api_refuses_is_refused_at_its_place() -> None:
    body = {"requests": [{"custom_id": "a", "params": {"model": "c", "messages": "hi"}}]}
    with pytest.raises(InvalidRequestError, match=r"^requests\.0\.params\.messages"):
        shaped({"global": [STRIP]}, BATCHES, body)
