"""The replay page (issue 35, L1): where the chain acted is marked, a cost spike is explained, and the
legends are swatches beside dark text."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

from history_proxy.config.loading import load_config
from history_proxy.core.identity import Identity
from history_proxy.core.tokens import TokenCounters
from history_proxy.devtools.replay import ReplayResult, ReplayStep, replay
from history_proxy.devtools.replay_html import acted, cost_spike, render_html
from history_proxy.pipeline.run import Pipeline

REPO = Path(__file__).resolve().parents[2]
LOOP = REPO / "tests" / "corpus" / "tau-bench-airline-task9-trial2.json"


def worker_replay() -> ReplayResult:
    # a chain that elides the small records of this tool loop (the default keeps records under 2 KB whole)
    config = load_config(REPO / "config" / "examples" / "last_n_observations.yaml", env={})
    body = json.loads(LOOP.read_text(encoding="utf-8"))
    return asyncio.run(replay(Pipeline(config, TokenCounters()), body, Identity(role="researcher")))


def step(
    request: int, *, rewrote: bool = False, cost: float = 100.0, unfiltered: float = 100.0
) -> ReplayStep:
    return ReplayStep(
        request=request,
        messages=2 * request,
        tokens_unfiltered=100 * request,
        tokens_sent=100 * request,
        tokens_cached_prefix=0,
        cost=cost,
        unfiltered_cost=unfiltered,
        rewrote=rewrote,
    )


def test_only_requests_that_rewrote_sent_history_are_marked() -> None:
    steps = [step(1), step(2), step(3, rewrote=True), step(4)]
    page = render_html(ReplayResult(steps=steps, role="worker"), "t")
    assert acted(steps) == [3]
    assert re.findall(r'class="acted" data-request="(\d+)"', page) == ["3"]


def test_a_request_dearer_than_unfiltered_is_labelled_and_explained() -> None:
    steps = [step(1), step(2, rewrote=True, cost=218.0), step(3, cost=40.0)]
    page = render_html(ReplayResult(steps=steps, role="worker"), "t")
    assert cost_spike(steps) == steps[1]
    assert "request 2: 218% (cache written again, see below)" in page
    assert 'id="spike-note">Request 2 costs 218% of the same request unfiltered' in page
    calm = render_html(ReplayResult(steps=[step(1), step(2, cost=60.0)], role="worker"), "t")
    assert "spike-note" not in calm, "no note without a spike"


def test_legends_are_swatches_beside_dark_text() -> None:
    page = render_html(ReplayResult(steps=[step(1), step(2)], role="worker"), "t")
    assert 'style="color:' not in page, "no legend written in its own (light) colour"
    assert page.count('<span class="key">') == 8  # 4 series, the rewrite mark, 3 evidence classes
    assert ".key{margin-right:1.2em;color:#222" in page


def test_on_a_real_tool_loop_the_marks_fall_where_the_prefix_broke() -> None:
    result = worker_replay()
    marked = acted(result.steps)
    assert marked, "the worker chain elides old outputs somewhere in 31 requests"
    for number in marked:
        before, now = result.steps[number - 2], result.steps[number - 1]
        assert now.tokens_cached_prefix < before.tokens_sent, (
            "a marked request lost part of the cached prefix"
        )
