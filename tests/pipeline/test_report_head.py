"""Every token report opens with the same fields, in the same order, whether the chain ran or the
request was forwarded unshaped (history_proxy/pipeline/report.py writes that head once)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from history_proxy.config.models import Config
from history_proxy.core.identity import Identity
from history_proxy.core.tokens import TokenCounters
from history_proxy.pipeline.run import Pipeline
from history_proxy.surfaces.shape import shape

HEAD = ["role", "agent", "tenant", "phase", "model", "upstream", "chain", "before", "after", "filters"]


def pipeline() -> Pipeline:
    config = Config.model_validate(
        {"upstreams": {"u": {"base_url": "mock://"}}, "policies": {"roles": {"r": [{"type": "passthrough"}]}}}
    )
    return Pipeline(config, TokenCounters())


BODIES: dict[str, tuple[str, dict[str, Any]]] = {
    "chat, shaped": ("chat", {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}),
    "responses, shaped": ("responses", {"model": "gpt-4o", "input": [{"role": "user", "content": "hi"}]}),
    "responses, history at the provider": (
        "responses",
        {"model": "gpt-4o", "input": [{"role": "user", "content": "hi"}], "previous_response_id": "resp_1"},
    ),
    "responses, nothing to shape": ("responses", {"model": "gpt-4o", "input": []}),
}


@pytest.mark.parametrize("case", sorted(BODIES))
def test_the_report_opens_with_who_where_the_chain_and_both_sides(case: str) -> None:
    api, body = BODIES[case]
    identity = Identity(role="r", agent="coder", tenant=None, phase="p1")
    report = asyncio.run(shape(api, pipeline(), body, identity, "u")).result.report
    assert list(report)[: len(HEAD)] == HEAD
    assert (report["role"], report["agent"], report["phase"]) == ("r", "coder", "p1")
    assert (report["model"], report["upstream"]) == ("gpt-4o", "u")
