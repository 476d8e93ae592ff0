"""Pinned Messages messages pass the history-free filters of the global and tenant policies.

A mid-conversation ``system`` message or a message of an unknown role is kept out of the chain's view
(never dropped, moved or counted), but the policy's ``remove_regex`` still runs over its text
(docs/surfaces.md, "Never stricter than the upstream").
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from history_proxy.config.models import Config
from history_proxy.core.identity import Identity
from history_proxy.core.tokens import TokenCounters
from history_proxy.pipeline.run import Pipeline
from history_proxy.surfaces.messages_pinned import PINNED_FILTERED
from history_proxy.surfaces.messages_valid import REMOVED
from history_proxy.surfaces.shape import shape

SECRET = "sk-" + "Qw3Er4Ty5U" * 3
STRIP = {"type": "remove_regex", "remove": ["sk-[A-Za-z0-9]{20,}"]}


def shaped(policies: dict[str, Any], body: dict[str, Any], identity: Identity | None = None) -> Any:
    config = Config.model_validate({"upstreams": {"u": {"base_url": "mock://"}}, "policies": policies})
    pipe = Pipeline(config, TokenCounters())
    original = copy.deepcopy(body)
    out = asyncio.run(shape("messages", pipe, body, identity or Identity(role="r"), "u"))
    assert body == original  # the client's request is never edited in place
    return out


def request(*pinned: dict[str, Any]) -> dict[str, Any]:
    return {
        "model": "claude-x",
        "max_tokens": 10,
        "messages": [
            {"role": "user", "content": "task"},
            *pinned,
            {"role": "assistant", "content": "done"},
            {"role": "user", "content": "next"},
        ],
    }


def test_an_unknown_roles_text_blocks_are_cleaned_and_its_other_blocks_and_fields_kept() -> None:
    critic = {
        "role": "critic",
        "content": [
            {"type": "text", "text": f"key {SECRET}", "citations": [1]},
            {"type": "verdict", "ok": True, "text": SECRET},  # not a text block: not scanned
            {"type": "text", "text": SECRET},
        ],
        "score": 3,
    }
    out = shaped({"global": [STRIP]}, request(critic))
    assert out.body["messages"][1] == {
        "role": "critic",
        "content": [
            {"type": "text", "text": "key ", "citations": [1]},
            {"type": "verdict", "ok": True, "text": SECRET},
        ],
        "score": 3,
    }
    assert PINNED_FILTERED in out.result.report["notes"]
    assert "remove_regex" in out.result.report["chain"]


def test_a_pinned_message_left_without_text_is_kept_saying_removed() -> None:
    body = request(
        {"role": "system", "content": SECRET},
        {"role": "system", "content": [{"type": "text", "text": SECRET}]},
    )
    sent = shaped({"global": [STRIP]}, body).body["messages"]
    assert sent[1:3] == [
        {"role": "system", "content": REMOVED},
        {"role": "system", "content": [{"type": "text", "text": REMOVED}]},
    ]


def test_a_tenants_policy_applies_and_a_roles_chain_does_not() -> None:
    body = request({"role": "system", "content": f"a {SECRET}"})
    tenant = Identity(role="r", tenant="t")
    assert shaped({"tenants": {"t": [STRIP]}}, body, tenant).body["messages"][1]["content"] == "a "
    assert shaped({"roles": {"r": [STRIP]}}, body).body["messages"][1]["content"] == f"a {SECRET}"


def test_shadow_mode_changes_no_pinned_message() -> None:
    body = request({"role": "system", "content": f"a {SECRET}"})
    policies = {"global": [STRIP], "roles": {"r": {"mode": "shadow", "filters": []}}}
    out = shaped(policies, body)
    assert out.body["messages"] == body["messages"]
    assert PINNED_FILTERED not in out.result.report.get("notes", [])


def test_keep_last_counts_the_messages_as_sent() -> None:
    body = request({"role": "system", "content": f"old {SECRET}"})
    body["messages"].append({"role": "system", "content": f"new {SECRET}"})
    sent = shaped({"global": [{**STRIP, "keep_last": 2}]}, body).body["messages"]
    assert [m["content"] for m in sent if m["role"] == "system"] == ["old ", f"new {SECRET}"]


def test_nothing_changes_when_no_pinned_message_matches() -> None:
    body = request({"role": "system", "content": "nothing secret"})
    out = shaped({"global": [STRIP]}, body)
    assert out.body is body
    assert PINNED_FILTERED not in out.result.report.get("notes", [])
