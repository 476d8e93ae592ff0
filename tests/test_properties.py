"""The invariants (docs/architecture.md), by hypothesis for every registered filter, random chains and the corpus.

Every type in ``history_proxy.filters.FILTER_TYPES`` is tested with the parameters of its
``config/examples/<type>.yaml`` (the filters of that type in the example's chains), with its
defaults when the model accepts none, and, when it enforces a token budget, with tight budgets too.
New filters are picked up without editing this file; only their exceptions to the shared
properties are written down here, each with the reason from its definition.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
from collections.abc import Callable

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from history_proxy.core.invariants import broken_invariants, invariant_errors
from history_proxy.core.messages import (
    Message,
    NotApplicable,
    group_spans,
    has_text,
    leading_system_count,
    newest_user_index,
    text_of,
    tool_call_ids,
    tool_call_names,
    turn_spans,
)
from history_proxy.core.tokens import TokenCounter
from history_proxy.filters import FILTER_TYPES, Filter, FilterContext
from tests.factories import corpus_files
from tests.strategies import PROPERTY_SETTINGS, SHARED_TOKENS, FakeSummarizer, conversations, filter_contexts
from tests.support.filter_cases import CASES, TIGHT_BUDGETS, FilterCase, keeps_leading_system

# --- which filters are held to which property (each exception cites the filter's definition) -------


def keeps_newest_user(f: Filter) -> bool:
    """Whether the filter keeps the newest user message (invariant 2, docs/architecture.md); every filter does so far.

    sop_digest and manager_digest digest older messages into system messages, but both keep the
    newest user message verbatim when it is older than what they keep whole; token_limiter pins it;
    sliding_window, truncate and summarize never drop or summarize the newest user message's turn.
    A filter whose definition lets it go would be listed here.
    """
    return True


REWRITES_CONTENT = frozenset(
    {
        "cache_control",  # string content becomes a one-part text list carrying the mark
        "custom",  # as the loaded class; the shipped example loads remove_regex
        "last_n_observations",  # elides old observations, and the first user message is one
        "remove_regex",  # edits the text of every message but the newest keep_last
    }
)
"""Filters that may change the content (only) of a kept system or user message."""


IDEMPOTENT: dict[str, Callable[[Filter], bool]] = {
    # changes nothing
    "passthrough": lambda f: True,
    # clears the marks it owns before placing them again
    "cache_control": lambda f: True,
    # the output's earlier turns are already conversation messages, within the window
    "orchestrator_view": lambda f: True,
    # what it keeps (syntheses of the previous phase, the current turn) it keeps again
    "manager_view": lambda f: True,
    # other agents' groups and completion signals are already gone
    "worker_view": lambda f: True,
    # no named call is left to remove; persisted notes are plain assistant text
    "tool_call_filter": lambda f: True,
    # tags become the sorted union; a fully tagged message passes unchanged
    "tag_tool_call_observations": lambda f: True,
    # the output fits (or is the pinned minimum), so a second pass drops nothing
    "token_limiter": lambda f: True,
    # sliding_window and truncate move in blocks when step > 1: a shorter input may land on another block
    "sliding_window": lambda f: getattr(f, "step", 1) == 1,
    "truncate": lambda f: getattr(f, "step", 1) == 1,
    # Not idempotent, by definition:
    # - last_n_observations: an elided observation's notice has 1 line, so a second pass rewrites
    #   "(40 lines omitted)" to "(1 lines omitted)";
    # - tool_result_truncation / worker_compaction: a cut result (max_chars + notice) is longer than
    #   max_chars, so it is cut again and the notice's "original size" changes;
    # - remove_regex: deleting a match can join text into a new match ("aabb" minus "ab" is "ab");
    # - sop_digest / manager_digest / summarize: a second pass digests the first pass's digest;
    # - custom: whatever the loaded class does.
}


CASE_PARAMS = [pytest.param(case, id=case.name) for case in CASES]


# --- running a filter -----------------------------------------------------------------------------


def run_filter(f: Filter, messages: list[Message], ctx: FilterContext) -> list[Message] | None:
    """The filter's output (awaiting ``apply_async`` when it has one); None when it does not apply."""
    try:
        apply_async = getattr(f, "apply_async", None)
        if apply_async is not None and inspect.iscoroutinefunction(apply_async):
            result = asyncio.run(apply_async(messages, ctx))
        else:
            result = f.apply(messages, ctx)
    except NotApplicable:
        return None
    assert isinstance(result, list), f"apply returned {type(result).__name__}"
    return result


def without_content(message: Message) -> Message:
    return {k: v for k, v in message.items() if k != "content"}


def same_message(kept: Message, original: Message, content_may_change: bool) -> bool:
    if content_may_change:
        return without_content(kept) == without_content(original)
    return kept == original


def counter_for(f: Filter, ctx: FilterContext) -> TokenCounter:
    """The counter the filter counts its budget with (its own encoding/tokenizer when it has them)."""
    return ctx.tokens.get(
        model=ctx.model,
        encoding=getattr(f, "encoding", "auto"),
        tokenizer=getattr(f, "tokenizer", "tiktoken"),
    )


def irreducible_minimum(f: Filter, messages: list[Message]) -> list[Message]:
    """What a budgeted filter must keep even over budget (each budgeted filter's page in docs/filters/).

    token_limiter pins the leading system (with keep_system), the newest user message and the newest
    group; truncate and any other budgeted filter keep the leading system and the newest turn.
    """
    lead = leading_system_count(messages) if getattr(f, "keep_system", True) else 0
    if f.type_name == "token_limiter":
        newest_group = group_spans(messages)[-1]
        user = newest_user_index(messages)
        pinned_user = [messages[user]] if user is not None and user < newest_group[0] else []
        return [*messages[:lead], *pinned_user, *messages[newest_group[0] :]]
    newest_turn = turn_spans(messages)[-1]
    return [*messages[:lead], *messages[max(lead, newest_turn[0]) :]]


# --- the generated conversations themselves -------------------------------------------------------


@PROPERTY_SETTINGS
@given(messages=conversations())
def test_generated_conversations_satisfy_every_invariant(messages: list[Message]) -> None:
    assert invariant_errors(messages) == {}


def _shuffled_results(messages: list[Message]) -> bool:
    for start, stop in group_spans(messages):
        calls = tool_call_ids(messages[start]) if messages[start].get("role") == "assistant" else []
        answers = [m.get("tool_call_id") for m in messages[start + 1 : stop]]
        if len(calls) > 1 and answers and answers != calls:
            return True
    return False


def _reused_ids(messages: list[Message]) -> bool:
    ids = [i for m in messages for i in tool_call_ids(m)]
    return len(ids) != len(set(ids))


COVERAGE: dict[str, Callable[[list[Message]], bool]] = {
    "leading developer message": lambda ms: leading_system_count(ms) == 2 and ms[1]["role"] == "developer",
    "parallel calls": lambda ms: any(len(tool_call_ids(m)) >= 3 for m in ms),
    "results out of call order": _shuffled_results,
    "tool-call ids reused across turns": _reused_ids,
    "text-part content": lambda ms: any(isinstance(m.get("content"), list) for m in ms),
    "null content on an action": lambda ms: any(m.get("tool_calls") and m.get("content") is None for m in ms),
    "name and vendor keys": lambda ms: (
        any("name" in m for m in ms) and any("reasoning_content" in m for m in ms)
    ),
    "annotations": lambda ms: {"tags", "message_type", "phase_id", "agent"} <= {k for m in ms for k in m},
    "system message mid-conversation": lambda ms: any(
        m["role"] == "system" for m in ms[leading_system_count(ms) :]
    ),
    "completion-tool call": lambda ms: any(set(tool_call_names(m)) & {"final_answer", "submit"} for m in ms),
    "trailing unanswered action": lambda ms: bool(tool_call_ids(ms[-1])),
    "several turns": lambda ms: len(turn_spans(ms)) >= 4,
}


def test_the_conversation_generator_covers_what_real_agents_send() -> None:
    seen: set[str] = set()

    # generation only: no shrinking, no replay, so the test costs one pass of 150 draws
    @settings(max_examples=150, database=None, phases=[Phase.generate], deadline=None)
    @given(messages=conversations())
    def collect(messages: list[Message]) -> None:
        seen.update(feature for feature, present in COVERAGE.items() if present(messages))

    collect()
    assert set(COVERAGE) - seen == set()


def test_every_registered_filter_has_property_cases() -> None:
    tested = {case.filter.type_name for case in CASES}
    assert set(FILTER_TYPES) - tested == set(), "give these an example config or defaults that construct"


# --- properties of every filter -------------------------------------------------------------------
# One test per filter case checks every property on the same drawn input: drawing conversations
# costs more than running a filter, so the properties share each draw.


def assert_valid_output(out: list[Message]) -> None:
    assert out, "the output is empty"
    assert invariant_errors(out) == {}


def assert_keeps_leading_system_and_newest_user(
    f: Filter, messages: list[Message], out: list[Message]
) -> None:
    content_may_change = f.type_name in REWRITES_CONTENT
    if keeps_leading_system(f):
        lead = leading_system_count(messages)
        assert len(out) >= lead, "leading system messages were dropped"
        for kept, original in zip(out[:lead], messages[:lead], strict=True):
            assert same_message(kept, original, content_may_change), f"leading system message changed: {kept}"
    user = newest_user_index(messages)
    if keeps_newest_user(f) and user is not None:
        users = [m for m in out if m.get("role") == "user"]
        assert users, "the newest user message was dropped"
        assert same_message(users[-1], messages[user], content_may_change), "the newest user message changed"


VENDOR_FIELDS = ("name", "reasoning_content", "refusal", "audio")
"""Fields no filter owns: a kept message carries them unchanged (docs/http.md, message annotations)."""


def assert_keeps_fields_it_does_not_own(messages: list[Message], out: list[Message]) -> None:
    """A kept message, recognised by its role and (generated, unique) text, keeps its vendor fields."""
    originals: dict[tuple[str, str], list[Message]] = {}
    for message in messages:
        if has_text(message):
            originals.setdefault((str(message.get("role")), text_of(message.get("content"))), []).append(
                message
            )
    for kept in out:
        matches = originals.get((str(kept.get("role")), text_of(kept.get("content"))), [])
        if len(matches) == 1:
            lost = {
                k: matches[0][k] for k in VENDOR_FIELDS if k in matches[0] and kept.get(k) != matches[0][k]
            }
            assert lost == {}, f"fields lost or changed on a kept message: {lost}"


def assert_within_budget(f: Filter, messages: list[Message], out: list[Message], ctx: FilterContext) -> None:
    limit = f.budget()
    if limit is None:
        return
    counter = counter_for(f, ctx)
    sent = counter.messages(out)
    minimum = counter.messages(irreducible_minimum(f, messages))
    assert sent <= limit or sent <= minimum, (
        f"{sent} tokens sent, limit {limit}, irreducible minimum {minimum}"
    )


def is_idempotent(f: Filter) -> bool:
    check = IDEMPOTENT.get(f.type_name)
    return check is not None and check(f)


@pytest.mark.parametrize("case", CASE_PARAMS)
@PROPERTY_SETTINGS
@given(messages=conversations(), ctx=filter_contexts())
def test_filter_keeps_the_spec_properties_on_any_valid_conversation(
    case: FilterCase, messages: list[Message], ctx: FilterContext
) -> None:
    """Input left alone; output valid, never empty, deterministic; leading system and newest user kept;
    vendor fields kept; budget held; idempotent where :data:`IDEMPOTENT` says so.

    NotApplicable (answered as a 400) is an acceptable outcome.
    """
    f = case.filter
    snapshot = copy.deepcopy(messages)
    out = run_filter(f, messages, ctx)
    assert messages == snapshot, "the filter mutated its input"
    if out is None:
        return
    assert_valid_output(out)
    assert run_filter(f, copy.deepcopy(snapshot), ctx) == out, "same input, different output"
    assert_keeps_leading_system_and_newest_user(f, messages, out)
    assert_keeps_fields_it_does_not_own(messages, out)
    assert_within_budget(f, messages, out, ctx)
    if is_idempotent(f):
        assert run_filter(f, out, ctx) == out, "a second pass changed the output"


def test_budgeted_filters_are_tested_over_their_budget() -> None:
    budgeted = {case.filter.type_name for case in CASES if case.filter.budget() is not None}
    tight = {case.filter.type_name for case in CASES if (case.filter.budget() or 10**9) <= max(TIGHT_BUDGETS)}
    assert budgeted == tight


# --- chains ---------------------------------------------------------------------------------------


@PROPERTY_SETTINGS
@given(
    chain=st.lists(st.sampled_from([case.filter for case in CASES]), min_size=2, max_size=4),
    messages=conversations(),
    ctx=filter_contexts(),
)
def test_random_chains_keep_every_invariant(
    chain: list[Filter], messages: list[Message], ctx: FilterContext
) -> None:
    snapshot = copy.deepcopy(messages)
    current = messages
    for f in chain:
        out = run_filter(f, current, ctx)
        if out is None:
            return
        assert invariant_errors(out) == {}, f"after {[g.type_name for g in chain]}: {invariant_errors(out)}"
        current = out
    assert messages == snapshot


# --- the corpus -----------------------------------------------------------------------------------


def test_every_filter_keeps_the_invariants_on_every_corpus_conversation() -> None:
    import json

    files = corpus_files()
    assert files, "the corpus is missing"
    checked = 0
    failures: list[str] = []
    for path in files:
        body = json.loads(path.read_text(encoding="utf-8"))
        messages: list[Message] = body["messages"]
        ctx = FilterContext(
            role="worker",
            phase="1",
            model=str(body.get("model", "")),
            tokens=SHARED_TOKENS,
            summarizer=FakeSummarizer(),
            upstream="mock",
        )
        for case in CASES:
            snapshot = copy.deepcopy(messages)
            try:
                out = run_filter(case.filter, messages, ctx)
            except Exception as exc:
                failures.append(f"{path.name} / {case.name}: raised {type(exc).__name__}: {exc}")
                checked += 1
                continue
            if messages != snapshot:
                failures.append(f"{path.name} / {case.name}: mutated its input")
            if out is not None:
                broken = broken_invariants(messages, out)
                if broken:
                    failures.append(f"{path.name} / {case.name}: {broken}")
            checked += 1
    assert failures == []
    assert checked == len(files) * len(CASES)
