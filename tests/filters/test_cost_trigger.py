"""``last_n_observations`` with ``trigger: cost``: the boundary moves when eliding repays the cache rewrite."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from proxy.core.cost import ANTHROPIC, Pricing
from proxy.core.messages import Message
from proxy.core.tokens import TokenCounters
from proxy.devtools.replay import request_ends
from proxy.filters._cost_trigger import request_points
from proxy.filters.base import FilterContext
from proxy.filters.last_n_observations import LastNObservations, observation_positions
from tests.factories import corpus_body, exchange, system, user

FREE = Pricing(name="free", read=1.0, write=1.0)
"""A provider whose cache writes cost no more than reads: every advance is free."""


def cost_filter(n: int = 2) -> LastNObservations:
    return LastNObservations(type="last_n_observations", n=n, trigger="cost")


def run(messages: list[Message], pricing: Pricing = ANTHROPIC, n: int = 2) -> list[Message]:
    return cost_filter(n).apply(messages, FilterContext(tokens=TokenCounters(), pricing=pricing))


def elided_count(before: list[Message], after: list[Message]) -> int:
    return sum(after[i]["content"] != before[i]["content"] for i in observation_positions(before))


def history(outputs: list[str]) -> list[Message]:
    messages = [system(), user("the task")]
    for text in outputs:
        messages += exchange("bash", output=text)
    return messages


def test_polling_and_the_cost_trigger_are_not_combined() -> None:
    with pytest.raises(ValidationError, match="set one of them"):
        LastNObservations(type="last_n_observations", n=2, polling=3, trigger="cost")


def test_request_points_are_the_requests_replay_cuts() -> None:
    messages = corpus_body("swe-agent-marshmallow-1867-fc.json")["messages"]
    assert request_points(messages) == request_ends(messages)


def test_when_writes_cost_what_reads_cost_it_elides_like_polling_1() -> None:
    messages = history(["line\n" * 200 for _ in range(6)])
    eager = LastNObservations(type="last_n_observations", n=2).apply(messages, FilterContext())
    assert run(messages, FREE) == eager


def test_small_observations_in_a_short_conversation_are_never_worth_a_rewrite() -> None:
    messages = history(["ok"] * 8)
    assert elided_count(messages, run(messages)) == 0


def test_large_old_outputs_are_elided_in_one_step_once_they_pay() -> None:
    # ~3000-token outputs: from the 8th request on, eliding all but the newest two repays its rewrite
    # within a quarter of the requests so far (docs/cost.md has the arithmetic)
    counts = [elided_count(history(["x " * 3000] * k), run(history(["x " * 3000] * k))) for k in range(1, 13)]
    assert counts == [0, 0, 0, 0, 0, 0, 0, 6, 6, 6, 6, 6]


def test_the_boundary_only_moves_forward_and_the_prefix_holds_between_moves() -> None:
    """Replayed request by request, each sent request repeats the previous one except at an advance."""
    messages = corpus_body("openhands-codeact-ponylang-ponyc-4588.json")["messages"]
    previous: list[Message] = []
    advances, counts = 0, []
    for end in request_ends(messages):
        sent = run(messages[:end])
        counts.append(elided_count(messages[:end], sent))
        if previous and sent[: len(previous)] != previous:
            advances += 1
        previous = sent
    assert counts == sorted(counts) and counts[-1] > 0
    assert 0 < advances < len(counts) / 4  # a few large steps, not a move per request


def test_every_replica_agrees_the_answer_depends_on_the_request_alone() -> None:
    messages = corpus_body("tau-bench-airline-task2-trial1.json")["messages"]
    assert (
        run(messages)
        == run(list(messages))
        == cost_filter().apply(messages, FilterContext(tokens=TokenCounters(), pricing=ANTHROPIC))
    )
