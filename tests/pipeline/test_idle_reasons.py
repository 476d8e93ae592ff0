"""A filter that changed nothing says why in the report (issue 35, H3): `not triggered: under budget`."""

from __future__ import annotations

import asyncio
from typing import Any

from history_proxy.config.loading import parse_config
from history_proxy.core.identity import Identity
from history_proxy.core.tokens import TokenCounters
from history_proxy.pipeline.run import Pipeline
from tests.factories import exchange, system, user


def report(chain: list[dict[str, Any]], messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    config = parse_config({"upstreams": {"u": {"base_url": "mock://"}}, "policies": {"roles": {"r": chain}}})
    body = {"model": "gpt-4o-mini", "messages": messages}
    result = asyncio.run(Pipeline(config, TokenCounters()).run(body, Identity(role="r"), "u"))
    filters: list[dict[str, Any]] = result.report["filters"]
    return filters


def test_each_filter_of_a_short_request_says_why_it_did_nothing() -> None:
    chain: list[dict[str, Any]] = [
        {"type": "remove_regex", "remove": ["sk-[a-z]{20,}"]},
        {"type": "worker_view"},
        {"type": "last_n_observations", "n": 2},
        {"type": "token_limiter", "limit": 100000},
    ]
    filters = report(chain, [user("Hello")])
    reasons = {f["type"]: f["why_unchanged"] for f in filters}
    assert reasons == {
        "remove_regex": "no match",
        "worker_view": "nothing outside this role's view: every message kept",
        "last_n_observations": "not triggered: no observation older than the newest 2 to elide",
        "token_limiter": "not triggered: under budget (8 of 100000 tokens)",
    }


def test_a_filter_that_removed_something_has_no_reason_to_give() -> None:
    messages = [
        system("s"),
        user("task"),
        *exchange("ls", "x " * 300),
        *exchange("cat", "y " * 300),
        user("go"),
    ]
    (filtered,) = report([{"type": "last_n_observations", "n": 1}], messages)
    assert filtered["tokens_removed"] > 0 and "why_unchanged" not in filtered
