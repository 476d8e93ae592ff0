"""history_proxy/pipeline/run.py: request checks, the chain run, validation after each filter, the report."""

from __future__ import annotations

import asyncio
import copy
import itertools
from typing import Any, Literal

import pytest

from history_proxy.config.loading import parse_config
from history_proxy.config.models import Config
from history_proxy.config.policies import PoliciesConfig
from history_proxy.core.identity import Identity
from history_proxy.core.invariants import cache_mark_count
from history_proxy.core.messages import Message, NotApplicable
from history_proxy.core.tokens import TokenCounters
from history_proxy.errors import FilterError, InvalidRequestError
from history_proxy.filters import Filter, FilterContext
from history_proxy.filters.last_n_observations import LastNObservations
from history_proxy.filters.passthrough import Passthrough
from history_proxy.filters.token_limiter import TokenLimiter
from history_proxy.pipeline.run import Pipeline, PipelineResult
from tests.factories import action, assistant, call, exchange, result, system, user

TOKENS = TokenCounters()

# --- filters that exist only in this file (defining them does not register them) ---------------


class DropFirstAfterSystem(Filter):
    """Drops the first message after the leading system message (a well-behaved dropping filter)."""

    type: Literal["drop_first"] = "drop_first"

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        return [messages[0], *messages[2:]]


class Record(Filter):
    """Appends an assistant note, so the order the chain ran in shows in the output."""

    type: Literal["record"] = "record"
    note: str = "x"

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        return [*messages, {"role": "assistant", "content": self.note}]


class Boom(Filter):
    type: Literal["boom"] = "boom"

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        raise RuntimeError("kaboom")


class BreakPairs(Filter):
    """Drops every tool message: a bug that leaves tool calls unanswered."""

    type: Literal["break_pairs"] = "break_pairs"

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        return [m for m in messages if m.get("role") != "tool"]


class Empty(Filter):
    type: Literal["empty"] = "empty"

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        return []


class NotAList(Filter):
    type: Literal["not_a_list"] = "not_a_list"

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        return tuple(messages)  # type: ignore[return-value]  # on purpose: the pipeline must refuse it


class NeedsPhase(Filter):
    type: Literal["needs_phase"] = "needs_phase"

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        raise NotApplicable("send X-Agent-Phase")


class Budgeted(Filter):
    """Changes nothing but declares a token budget, as token_limiter does."""

    type: Literal["budgeted"] = "budgeted"
    limit: int = 10

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        return list(messages)

    def budget(self, ctx: FilterContext | None = None) -> int | None:
        return self.limit


class AsyncKeepLast(Filter):
    """An I/O-style filter: only ``apply_async``; keeps the leading system and the last message."""

    type: Literal["async_keep_last"] = "async_keep_last"

    async def apply_async(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        await asyncio.sleep(0)
        return [messages[0], messages[-1]]


# --- helpers ---------------------------------------------------------------------------------------


def make_config(
    *,
    roles: dict[str, list[Filter]] | None = None,
    global_: list[Filter] | None = None,
    tenants: dict[str, list[Filter]] | None = None,
    on_filter_error: str = "reject",
    **raw: Any,
) -> Config:
    base = parse_config({"upstreams": {"mock": {"base_url": "mock://"}}, **raw}, env={})
    policies = PoliciesConfig.model_construct(global_=global_ or [], tenants=tenants or {}, roles=roles or {})
    return base.model_copy(update={"policies": policies, "on_filter_error": on_filter_error})


def run(
    config: Config, body: Any, identity: Identity | None = None, upstream: str | None = "mock"
) -> PipelineResult:
    pipeline = Pipeline(config, TOKENS)
    return asyncio.run(pipeline.run(body, identity or Identity(role="worker"), upstream))


def conversation() -> list[Message]:
    act = action(call("bash", {"cmd": "ls"}, call_id="c1"))
    return [
        system("You are a coding agent."),
        user("Fix the build.", tags=["keep_output"]),
        act,
        result(act, "setup.py\nsrc/", message_type="observation", agent="coder"),
        assistant("Found it.", agent="coder"),
        user("Now run the tests."),
    ]


def body(messages: list[Message] | None = None, **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": conversation() if messages is None else messages, **extra}


# --- request checks -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_body", "message"),
    [
        ([], "the request body must be a JSON object"),
        ({"model": "gpt-4o"}, "'messages' is required"),
        ({"messages": {"role": "user"}}, "'messages' must be a list of message objects"),
        ({"messages": []}, "'messages' must contain at least one message"),
        ({"messages": ["hello"]}, "messages[0] must be an object with a 'role'"),
        ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role must be one of"),
        ({"messages": [{"content": "hi"}]}, "messages[0].role must be one of"),
        (
            {"messages": [{"role": "user", "content": "a", "tags": "keep_output"}]},
            "messages[0].tags must be a list of strings",
        ),
        (
            {"messages": [{"role": "user", "content": "a", "message_type": "chat"}]},
            "messages[0].message_type must be one of",
        ),
        (
            {"messages": [{"role": "user", "content": "a", "phase_id": True}]},
            "messages[0].phase_id must be an integer or a string",
        ),
        ({"messages": [{"role": "user", "content": "a", "agent": 7}]}, "messages[0].agent must be a string"),
        (
            {"messages": [user(), {"role": "assistant", "content": None, "tool_calls": [{"id": "x"}]}]},
            "messages[1].tool_calls must be a list of",
        ),
        (
            {"messages": [user(), {"role": "assistant", "tool_calls": "bash"}]},
            "messages[1].tool_calls must be a list of",
        ),
    ],
)
def test_a_malformed_request_is_a_400_that_says_what_to_fix(request_body: Any, message: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        run(make_config(), request_body)
    assert caught.value.status_code == 400
    assert caught.value.message.startswith(message)


def test_an_unknown_role_is_quoted_but_cut_short() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        run(make_config(), {"messages": [{"role": "x" * 500}]})
    assert len(caught.value.message) < 200


# --- the chain and the report ---------------------------------------------------------------------


def test_the_report_counts_messages_and_tokens_before_and_after_per_role_and_per_filter() -> None:
    config = make_config(roles={"worker": [DropFirstAfterSystem()]})
    original = body()
    outcome = run(config, original)
    report = outcome.report
    counter = TOKENS.get(model="gpt-4o")

    assert report["role"] == "worker"
    assert report["chain"] == ["drop_first"]
    assert report["before"]["messages"] == 6
    assert report["after"]["messages"] == 5
    assert report["before"]["tokens"] == counter.messages(conversation())
    assert report["after"]["tokens"] == counter.messages(outcome.body["messages"])
    assert sum(report["before"]["tokens_by_role"].values()) + 3 == report["before"]["tokens"]
    assert set(report["before"]["tokens_by_role"]) == {"system", "user", "assistant", "tool"}
    assert report["after"]["tokens_by_role"]["user"] == counter.message(user("Now run the tests."))

    [step] = report["filters"]
    assert step["type"] == "drop_first" and step["at"] == "policies.roles.worker[0]"
    assert step["messages_removed"] == 1
    assert step["tokens_removed"] == counter.message(conversation()[1])
    assert "limit" not in report and "failed_filter" not in report
    assert (outcome.messages_before, outcome.messages_after) == (6, 5)
    assert (outcome.tokens_before, outcome.tokens_after) == (
        report["before"]["tokens"],
        report["after"]["tokens"],
    )
    assert outcome.applied == ["drop_first"]


def test_annotations_are_stripped_before_forwarding_and_the_rest_of_the_body_is_kept() -> None:
    original = body(stream=True, temperature=0.2, tools=[{"type": "function", "function": {"name": "bash"}}])
    snapshot = copy.deepcopy(original)
    outcome = run(make_config(), original)
    forwarded = outcome.body
    assert original == snapshot, "the client's body was mutated"
    assert {k: v for k, v in forwarded.items() if k != "messages"} == {
        k: v for k, v in original.items() if k != "messages"
    }
    for message in forwarded["messages"]:
        assert not {"tags", "message_type", "phase_id", "agent"} & set(message)
    assert forwarded["messages"][1] == {"role": "user", "content": "Fix the build."}


def test_the_chain_runs_global_then_tenant_then_role_each_on_the_previous_output() -> None:
    config = make_config(
        global_=[Record(note="global")],
        tenants={"team-a": [Record(note="tenant")]},
        roles={"worker": [Record(note="role")]},
    )
    outcome = run(config, body(), Identity(role="worker", tenant="team-a"))
    assert [m["content"] for m in outcome.body["messages"][-3:]] == ["global", "tenant", "role"]
    assert [f["at"] for f in outcome.report["filters"]] == [
        "policies.global[0]",
        "policies.tenants.team-a[0]",
        "policies.roles.worker[0]",
    ]
    assert outcome.report["tenant"] == "team-a"


def test_a_role_without_a_chain_is_forwarded_unchanged_but_stripped() -> None:
    outcome = run(make_config(roles={"manager": [Boom()]}), body(), Identity(role="worker"))
    assert outcome.report["chain"] == []
    assert len(outcome.body["messages"]) == 6


def test_an_unchanged_chain_reports_the_same_figures_after_as_before_in_their_own_objects() -> None:
    plain = [
        system("You are a coding agent."),
        *exchange(output="setup.py\nsrc/"),
        user("Now run the tests."),
    ]
    outcome = run(make_config(roles={"worker": [Passthrough()]}), body(plain))
    before, after = outcome.report["before"], outcome.report["after"]
    assert after == before
    assert after["tokens"] == TOKENS.get(model="gpt-4o").messages(plain)
    after["tokens_by_role"]["user"] += 1  # a consumer editing one side leaves the other alone
    assert after["tokens_by_role"] != before["tokens_by_role"]


def test_one_pipeline_gives_every_caller_its_own_chain_past_the_callers_it_remembers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("history_proxy.pipeline.run.MAX_RESOLVED_CALLERS", 2)
    config = make_config(
        global_=[Record(note="global")],
        tenants={"team-a": [Record(note="tenant")]},
        roles={"worker": [Record(note="role"), Budgeted(limit=10)], "manager": [Passthrough()]},
    )
    pipeline = Pipeline(config, TOKENS)
    callers = [Identity(role="worker"), Identity(role="worker", tenant="team-a"), Identity(role="manager")]
    expected = [
        ["record", "record", "budgeted"],
        ["record", "record", "record", "budgeted"],
        ["record", "passthrough"],
    ]
    for _ in range(2):  # the second round from what the pipeline remembered (but the third caller)
        for identity, chain in zip(callers, expected, strict=True):
            report = asyncio.run(pipeline.run(body(), identity, "mock")).report
            assert report["chain"] == chain
            assert ("limit" in report) == (identity.role == "worker")
            report["chain"].append("edited by a consumer")  # each report has its own list


def test_a_budgeted_filter_adds_the_limit_block() -> None:
    outcome = run(make_config(roles={"worker": [Budgeted(limit=10), Budgeted(limit=100_000)]}), body())
    tokens = outcome.report["after"]["tokens"]
    assert outcome.report["limit"] == {
        "limit": 10,
        "within_limit": False,
        "tokens_remaining": 0,
        "tokens_over": tokens - 10,
    }
    roomy = run(make_config(roles={"worker": [Budgeted(limit=100_000)]}), body()).report["limit"]
    assert (
        roomy["within_limit"] is True
        and roomy["tokens_remaining"] == 100_000 - tokens
        and roomy["tokens_over"] == 0
    )


def test_an_async_filter_is_awaited() -> None:
    outcome = run(make_config(roles={"worker": [AsyncKeepLast()]}), body())
    assert [m["role"] for m in outcome.body["messages"]] == ["system", "user"]


# --- cache marks ------------------------------------------------------------------------------------


def test_the_cache_control_slot_marks_only_for_upstreams_that_accept_marks() -> None:
    config = make_config(
        upstreams={
            "openai": {"base_url": "mock://"},
            "claude": {"base_url": "mock://", "cache_control": True},
        },
        cache_control={"last_n_messages": 2},
    )
    marked = run(config, body(), upstream="claude").body["messages"]
    plain = run(config, body(), upstream="openai").body["messages"]
    assert cache_mark_count(marked) == 2
    assert cache_mark_count(plain) == 0
    assert cache_mark_count(run(config, body(), upstream=None).body["messages"]) == 0


def test_without_a_cache_control_slot_nothing_is_marked() -> None:
    config = make_config(upstreams={"claude": {"base_url": "mock://", "cache_control": True}})
    assert cache_mark_count(run(config, body(), upstream="claude").body["messages"]) == 0


# --- failures ---------------------------------------------------------------------------------------


def test_a_raising_filter_is_a_filter_error_naming_its_type_and_place() -> None:
    config = make_config(roles={"worker": [Record(), Boom()]})
    with pytest.raises(FilterError) as caught:
        run(config, body())
    assert caught.value.status_code == 500
    assert caught.value.code == "filter_failed"
    assert caught.value.filter_type == "boom"
    assert caught.value.position == "policies.roles.worker[1]"
    assert "'boom'" in caught.value.message and "policies.roles.worker[1]" in caught.value.message
    assert "kaboom" in caught.value.message


def test_with_on_filter_error_passthrough_the_original_is_forwarded_and_the_failure_reported() -> None:
    config = make_config(roles={"worker": [Record(), Boom()]}, on_filter_error="passthrough")
    outcome = run(config, body())
    assert len(outcome.body["messages"]) == 6
    assert outcome.body["messages"][1] == {"role": "user", "content": "Fix the build."}
    assert outcome.failed_filter == "boom@policies.roles.worker[1]"
    assert outcome.report["failed_filter"] == "boom@policies.roles.worker[1]"
    assert outcome.applied == []
    assert outcome.report["filters"] == []


@pytest.mark.parametrize(
    ("bad_filter", "broken"),
    [(BreakPairs(), "tool_pairs"), (Empty(), "non_empty"), (NotAList(), "TypeError")],
)
def test_a_filter_whose_output_is_invalid_is_caught_before_sending(bad_filter: Filter, broken: str) -> None:
    with pytest.raises(FilterError) as caught:
        run(make_config(global_=[bad_filter]), body())
    assert caught.value.position == "policies.global[0]"
    assert broken in caught.value.message

    passed = run(make_config(global_=[bad_filter], on_filter_error="passthrough"), body())
    assert len(passed.body["messages"]) == 6
    assert passed.report["failed_filter"] == f"{bad_filter.type_name}@policies.global[0]"


def test_an_input_that_already_broke_an_invariant_is_not_blamed_on_the_filter() -> None:
    stray = [user("hi"), {"role": "tool", "tool_call_id": "gone", "content": "orphan"}, user("again")]
    outcome = run(make_config(roles={"worker": [Record()]}), body(stray))
    assert outcome.failed_filter is None
    assert len(outcome.body["messages"]) == 4


def test_the_filter_that_broke_an_invariant_is_named_even_when_later_filters_ran() -> None:
    config = make_config(
        roles={"worker": [Record(note="a"), BreakPairs(), Record(note="b"), DropFirstAfterSystem()]}
    )
    with pytest.raises(FilterError) as caught:
        run(config, body())
    assert (caught.value.filter_type, caught.value.position) == ("break_pairs", "policies.roles.worker[1]")
    assert "tool_pairs" in caught.value.message

    passed = run(config.model_copy(update={"on_filter_error": "passthrough"}), body())
    assert passed.failed_filter == "break_pairs@policies.roles.worker[1]"
    assert len(passed.body["messages"]) == 6 and passed.report["filters"] == []


def test_a_filter_fed_a_broken_list_is_not_blamed_for_failing_on_it() -> None:
    # DropFirstAfterSystem indexes messages[0] of the empty list Empty returned
    with pytest.raises(FilterError) as caught:
        run(make_config(global_=[Empty()], roles={"worker": [DropFirstAfterSystem(), Boom()]}), body())
    assert (caught.value.filter_type, caught.value.position) == ("empty", "policies.global[0]")
    assert "non_empty" in caught.value.message


def test_a_filter_that_breaks_an_invariant_and_then_cannot_apply_is_a_500_not_a_400() -> None:
    with pytest.raises(FilterError) as caught:
        run(make_config(roles={"worker": [BreakPairs(), NeedsPhase()]}), body())
    assert caught.value.filter_type == "break_pairs"


def test_per_filter_token_figures_equal_a_fresh_count_of_every_output() -> None:
    reads = [action(call("bash", {"cmd": f"cat log{k}"}, call_id=f"r{k}")) for k in range(3)]
    logs = [
        [act, result(act, f"log line {k}\n" * 40, message_type="observation")] for k, act in enumerate(reads)
    ]
    messages = [
        *conversation(),
        *(m for pair in logs for m in pair),
        assistant("Read them."),
        user("And now?"),
    ]
    chain = [
        Record(note="first note"),
        DropFirstAfterSystem(),
        LastNObservations(type="last_n_observations", n=1),
        TokenLimiter(type="token_limiter", limit=60),
    ]
    outcome = run(make_config(roles={"worker": chain}), body(copy.deepcopy(messages)))
    fresh = TokenCounters().get(model="gpt-4o")
    outputs = [messages]
    for filter_ in chain:
        outputs.append(filter_.apply(outputs[-1], FilterContext(model="gpt-4o", tokens=TokenCounters())))
    removed = [fresh.messages(a) - fresh.messages(b) for a, b in itertools.pairwise(outputs)]
    assert [f["tokens_removed"] for f in outcome.report["filters"]] == removed
    assert outcome.report["before"]["tokens"] == fresh.messages(messages)
    assert outcome.report["after"]["tokens"] == fresh.messages(outcome.body["messages"])
    assert outcome.report["after"]["tokens_by_role"] == {
        role: sum(fresh.message(m) for m in outcome.body["messages"] if m["role"] == role)
        for role in {m["role"] for m in outcome.body["messages"]}
    }


def test_a_growing_conversation_tokenizes_only_its_new_strings_per_request() -> None:
    tokens = TokenCounters()
    pipeline = Pipeline(
        make_config(roles={"worker": [TokenLimiter(type="token_limiter", limit=100_000)]}), tokens
    )
    history = conversation()
    asyncio.run(pipeline.run(copy.deepcopy(body(history)), Identity(role="worker")))
    misses = tokens.get(model="gpt-4o").misses
    grown = [*history, assistant("Tests pass."), user("Ship it.")]
    asyncio.run(
        pipeline.run(copy.deepcopy(body(grown)), Identity(role="worker"))
    )  # parsed afresh, as from JSON
    assert tokens.get(model="gpt-4o").misses == misses + 2


@pytest.mark.parametrize(
    ("message", "field"),
    [
        (
            {"role": "assistant", "content": None, "tool_calls": [{"id": 7, "function": {"name": "f"}}]},
            "tool_calls",
        ),
        (
            {"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": {}}}]},
            "tool_calls",
        ),
        ({"role": "tool", "content": "ok", "tool_call_id": 5}, "tool_call_id"),
        ({"role": "user", "content": "hi", "name": None}, "name"),
        ({"role": "user", "content": {"text": "hi"}}, "content"),
        ({"role": "user", "content": [{"type": "text", "text": 3}]}, "content"),
    ],
)
def test_every_malformed_field_is_caught_whatever_else_the_message_holds(
    message: Message, field: str
) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        run(make_config(), {"messages": [user(), message]})
    assert caught.value.message.startswith(f"messages[1].{field} must be")


def test_a_filter_that_cannot_apply_is_a_400_naming_it() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        run(make_config(roles={"worker": [Record(), NeedsPhase()]}, on_filter_error="passthrough"), body())
    assert caught.value.status_code == 400
    assert caught.value.code == "filter_not_applicable"
    assert "'needs_phase'" in caught.value.message
    assert "policies.roles.worker[1]" in caught.value.message
    assert "send X-Agent-Phase" in caught.value.message


def test_one_failing_request_does_not_affect_the_next() -> None:
    pipeline = Pipeline(make_config(roles={"worker": [BreakPairs()]}), TOKENS)
    with pytest.raises(FilterError):
        asyncio.run(pipeline.run(body(), Identity(role="worker")))
    calm = asyncio.run(pipeline.run(body([user("no tools here")]), Identity(role="worker")))
    assert calm.body["messages"] == [{"role": "user", "content": "no tools here"}]
    assert calm.applied == ["break_pairs"]


def test_the_tool_pairs_of_a_well_behaved_chain_survive_annotation_stripping() -> None:
    messages = [system(), user(), *exchange("bash", "out", agent="coder"), assistant("done")]
    outcome = run(make_config(), body(messages))
    assert outcome.body["messages"][2]["tool_calls"] == messages[2]["tool_calls"]
    assert outcome.body["messages"][3]["tool_call_id"] == messages[2]["tool_calls"][0]["id"]
