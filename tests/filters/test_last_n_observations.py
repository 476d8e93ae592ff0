"""``last_n_observations``: SWE-agent's LastNObservations rule, byte for byte."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from history_proxy.config.loading import ConfigError, load_config, parse_config
from history_proxy.core.cost import ANTHROPIC, Pricing
from history_proxy.core.evidence import DISTINCTIVE, message_text
from history_proxy.core.evidence_context import measure_context
from history_proxy.core.invariants import invariant_errors
from history_proxy.core.messages import Message, text_of
from history_proxy.core.tokens import TokenCounters
from history_proxy.devtools.replay import request_ends
from history_proxy.filters._cost_trigger import request_points
from history_proxy.filters._facts import FactsMemo
from history_proxy.filters._line_digest import line_digest
from history_proxy.filters._recall import HandleMemo, handle_of
from history_proxy.filters._reencode import is_record, minified_json, reencoded
from history_proxy.filters.base import FilterContext
from history_proxy.filters.last_n_observations import (
    LastNObservations,
    NoticeMemo,
    line_count,
    observation_positions,
)
from history_proxy.pipeline.recall import MemoryRecallStore
from tests.factories import (
    action,
    assistant,
    call,
    corpus_body,
    corpus_files,
    exchange,
    result,
    role_filters,
    system,
    user,
)
from tests.strategies import conversations

ROOT = Path(__file__).resolve().parents[2]


def elide(messages: list[Message], n: int, polling: int = 1, **tags: Any) -> list[Message]:
    return LastNObservations(type="last_n_observations", n=n, polling=polling, **tags).apply(
        messages, FilterContext()
    )


def tool_history(observations: int) -> list[Message]:
    """system, the task (observation 0), then one bash exchange per further observation."""
    messages = [system(), user("the instance template")]
    for k in range(1, observations):
        messages += exchange("bash", output=f"output {k}\nline two")
    return messages


def elided_observations(before: list[Message], after: list[Message]) -> list[int]:
    """Which observations (by their place among the observations) had their content replaced."""
    positions = observation_positions(before)
    return [k for k, i in enumerate(positions) if after[i]["content"] != before[i]["content"]]


# --- the notice ------------------------------------------------------------------------------


def test_a_three_line_observation_elides_to_exactly_the_swe_agent_notice() -> None:
    messages = [user("task"), *exchange(output="a\nb\nc"), *exchange(output="new")]
    out = elide(messages, n=1)
    assert out[2]["content"] == "Old environment output: (3 lines omitted)"


@pytest.mark.parametrize(
    ("output", "notice"),
    [
        ("a\nb\nc\n", "Old environment output: (3 lines omitted)"),  # a trailing newline adds no line
        ("a\r\nb", "Old environment output: (2 lines omitted)"),
        ("one line", "Old environment output: (1 lines omitted)"),
        ("", "Old environment output: (0 lines omitted)"),
        ("a\n\nb", "Old environment output: (3 lines omitted)"),
    ],
)
def test_lines_are_counted_as_python_splitlines_counts_them(output: str, notice: str) -> None:
    messages = [user("task"), *exchange(output=output), *exchange(output="new")]
    assert elide(messages, n=1)[2]["content"] == notice


LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(["a", " ", "\t", "é", *LINE_BREAKS]), max_size=30) | st.text())
def test_the_fast_line_count_equals_splitlines_for_every_string(text: str) -> None:
    assert line_count(text) == len(text.splitlines())


@pytest.mark.parametrize("text", ["", "\n", "\n\n", "a", "a\n", "a\nb", "\r\n", "a\rb", "é\n", *LINE_BREAKS])
def test_the_fast_line_count_agrees_on_every_line_boundary(text: str) -> None:
    assert line_count(text) == len(text.splitlines())
    assert line_count(text * 3 + "x") == len((text * 3 + "x").splitlines())


def test_one_filter_gives_every_request_the_notice_of_its_own_old_outputs() -> None:
    """The filter remembers notices by content: a later request with other outputs gets their own."""
    filter_ = LastNObservations(type="last_n_observations", n=1)
    first = [user("task"), *exchange(output="a\nb"), *exchange(output="c\nd\ne"), *exchange(output="new")]
    second = [user("task"), *exchange(output="a\nb"), *exchange(output="x\ny\nz\nw"), *exchange(output="new")]
    for _ in range(2):  # the second time from the memo
        assert [m["content"] for m in filter_.apply(copy.deepcopy(first), FilterContext())][2:5:2] == [
            "Old environment output: (2 lines omitted)",
            "Old environment output: (3 lines omitted)",
        ]
        assert filter_.apply(copy.deepcopy(second), FilterContext())[4]["content"] == (
            "Old environment output: (4 lines omitted)"
        )
    assert filter_ == LastNObservations(type="last_n_observations", n=1)  # what it remembers is no setting


def test_the_notice_memo_holds_at_most_its_entries_and_characters_dropping_the_oldest() -> None:
    memo = NoticeMemo(max_entries=3, max_chars=10)
    for text in ["a", "b\nc", "d", "e"]:
        assert memo.notice(text) == f"Old environment output: ({len(text.splitlines())} lines omitted)"
    assert len(memo) == 3
    assert memo.notice("0123456789\n" * 2) == "Old environment output: (2 lines omitted)"  # too long to keep
    assert len(memo) == 3
    assert memo.notice("123456789") == "Old environment output: (1 lines omitted)"
    assert len(memo) == 2  # "e" and "123456789": ten characters


def test_null_tool_content_counts_zero_lines() -> None:
    messages = [user("task"), *exchange(), *exchange(output="new")]
    messages[2] = {**messages[2], "content": None}
    assert elide(messages, n=1)[2]["content"] == "Old environment output: (0 lines omitted)"


def test_list_content_elides_to_one_text_part_counting_every_text_part_and_the_images() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    parts = [{"type": "text", "text": "x\ny"}, image, {"type": "text", "text": "z"}, image]
    messages = [user("task"), *exchange(), *exchange(output="new")]
    messages[2] = {**messages[2], "content": parts}
    assert elide(messages, n=1)[2]["content"] == [
        {"type": "text", "text": "Old environment output: (3 lines omitted) (2 images omitted)"}
    ]


def test_only_content_changes_so_tool_pairs_stay_valid() -> None:
    messages = [user("task"), *exchange(output="old"), *exchange(output="new")]
    messages[2] = {**messages[2], "name": "bash", "vendor_key": 1}
    out = elide(messages, n=1)
    assert {k: v for k, v in out[2].items() if k != "content"} == {
        k: v for k, v in messages[2].items() if k != "content"
    }
    assert invariant_errors(out) == {}


# --- which observations ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("total", "n", "polling", "elided"),
    [
        (10, 5, 1, [1, 2, 3, 4]),  # 10 - 5 = 5 -> [1, 5)
        (7, 5, 1, [1]),  # 7 - 5 = 2 -> [1, 2)
        (6, 5, 1, []),  # 6 - 5 = 1 -> [1, 1)
        (3, 5, 1, []),  # max(0, -2) = 0
        (12, 5, 5, [1, 2, 3, 4]),  # floor(12/5)*5 - 5 = 5
        (14, 5, 5, [1, 2, 3, 4]),  # still 5: the newest 9 observations keep their output
        (15, 5, 5, [1, 2, 3, 4, 5, 6, 7, 8, 9]),  # 15 - 5 = 10
        (9, 2, 4, [1, 2, 3, 4, 5]),  # floor(9/4)*4 - 2 = 6
        (7, 1, 3, [1, 2, 3, 4]),  # floor(7/3)*3 - 1 = 5
        (4, 1, 1, [1, 2]),  # 4 - 1 = 3
    ],
)
def test_polling_arithmetic_elides_positions_one_to_floor_n_over_polling_times_polling_minus_n(
    total: int, n: int, polling: int, elided: list[int]
) -> None:
    messages = tool_history(total)
    assert elided_observations(messages, elide(messages, n=n, polling=polling)) == elided


def test_polling_keeps_between_n_and_n_plus_polling_observations_and_moves_in_blocks() -> None:
    kept_counts = []
    for total in range(6, 21):
        messages = tool_history(total)
        kept_counts.append(total - len(elided_observations(messages, elide(messages, n=5, polling=5))))
    # observation 0 is never elided, so it is counted on top of the n..n+polling recent ones
    assert all(5 <= kept - 1 <= 5 + 5 for kept in kept_counts)
    assert kept_counts == [6, 7, 8, 9, 6, 7, 8, 9, 10, 6, 7, 8, 9, 10, 6]


def test_first_observation_is_never_elided_by_count() -> None:
    messages = tool_history(30)
    out = elide(messages, n=1)
    assert out[1] is messages[1]
    assert elided_observations(messages, out) == list(range(1, 29))


def test_unchanged_messages_are_the_same_objects_and_the_input_is_not_mutated() -> None:
    messages = tool_history(8)
    snapshot = copy.deepcopy(messages)
    out = elide(messages, n=2)
    assert messages == snapshot
    assert all(out[i] is messages[i] for i in range(len(messages)) if messages[i].get("role") != "tool")


def test_actions_and_assistant_text_are_never_touched() -> None:
    messages = [user("task"), assistant("thinking"), *exchange(text="let me look"), *exchange(), *exchange()]
    out = elide(messages, n=1)
    assert [m for m in out if m["role"] == "assistant"] == [m for m in messages if m["role"] == "assistant"]


# --- tags ------------------------------------------------------------------------------------


def test_keep_tag_saves_an_old_observation() -> None:
    messages = tool_history(6)
    messages[3] = {**messages[3], "tags": ["keep_output"]}
    assert elided_observations(messages, elide(messages, n=2)) == [2, 3]


def test_remove_tag_elides_an_observation_even_when_recent() -> None:
    messages = tool_history(4)
    messages[-1] = {**messages[-1], "tags": ["remove_output"]}
    out = elide(messages, n=5)
    assert out[-1]["content"] == "Old environment output: (2 lines omitted)"
    assert elided_observations(messages, out) == [3]


def test_remove_tag_beats_keep_tag() -> None:
    messages = tool_history(4)
    messages[-1] = {**messages[-1], "tags": ["keep_output", "remove_output"]}
    assert elided_observations(messages, elide(messages, n=5)) == [3]


def test_remove_tag_elides_even_the_first_observation() -> None:
    messages = tool_history(3)
    messages[1] = {**messages[1], "tags": ["remove_output"]}
    assert elide(messages, n=5)[1]["content"] == "Old environment output: (1 lines omitted)"


def test_remove_tag_on_a_user_task_message_is_ignored() -> None:
    later_task = user("a later task", tags=["remove_output"])
    messages = [*tool_history(3), later_task, *exchange()]
    assert elide(messages, n=5)[6] is later_task


def test_remove_tag_on_an_action_is_ignored() -> None:
    tagged = action(tags=["remove_output"])
    messages = [user("task"), tagged, result(tagged)]
    assert elide(messages, n=5) == messages


def test_configured_tag_sets_replace_the_defaults() -> None:
    messages = tool_history(6)
    messages[3] = {**messages[3], "tags": ["pinned"]}
    messages[-1] = {**messages[-1], "tags": ["noise"]}
    out = elide(
        messages, n=2, always_keep_output_for_tags={"pinned"}, always_remove_output_for_tags={"noise"}
    )
    assert elided_observations(messages, out) == [2, 3, 5]


# --- what counts as an observation -----------------------------------------------------------


def test_without_annotations_the_first_user_message_and_every_tool_message_are_observations() -> None:
    messages = [system(), user("template"), *exchange(), user("follow-up"), *exchange()]
    assert observation_positions(messages) == [1, 3, 6]


def test_annotated_observations_replace_the_inferred_ones() -> None:
    # a text-action agent (SWE-agent without function calling): observations are user messages
    messages = [system(), user("template", message_type="observation")]
    for k in range(4):
        messages += [assistant(f"```\nls {k}\n```"), user(f"out {k}\nmore", message_type="observation")]
    messages += [*exchange(output="an unannotated tool result")]
    out = elide(messages, n=2)
    assert observation_positions(messages) == [1, 3, 5, 7, 9]
    assert [m["content"] for m in out[3:6:2]] == ["Old environment output: (2 lines omitted)"] * 2
    assert out[1] is messages[1] and out[7] is messages[7] and out[-1] is messages[-1]


def test_a_text_action_conversation_without_annotations_keeps_everything() -> None:
    messages = [system(), user("template")]
    for k in range(8):
        messages += [assistant(f"```\nls {k}\n```"), user(f"out {k}")]
    assert elide(messages, n=1) == messages


# --- config ----------------------------------------------------------------------------------


def _chain(filter_: dict[str, Any]) -> Any:
    raw = {"upstreams": {"mock": {"base_url": "mock://"}}, "policies": {"roles": {"worker": [filter_]}}}
    return role_filters(parse_config(raw))[0]


def test_n_is_required_and_positive_and_polling_positive() -> None:
    for bad, message in [
        ({}, "policies.roles.worker[0].n: required"),
        ({"n": 0}, "policies.roles.worker[0].n: must be >= 1"),
        ({"n": 3, "polling": 0}, "policies.roles.worker[0].polling: must be >= 1"),
    ]:
        with pytest.raises(ConfigError) as caught:
            _chain({"type": "last_n_observations", **bad})
        assert caught.value.errors == [message]


def test_tag_sets_accept_yaml_lists() -> None:
    configured = _chain(
        {"type": "last_n_observations", "n": 3, "always_keep_output_for_tags": ["a", "b", "a"]}
    )
    assert configured.always_keep_output_for_tags == frozenset({"a", "b"})
    assert configured.describe()["always_keep_output_for_tags"] == ["a", "b"]


def test_example_config_enables_the_filter() -> None:
    config = load_config(ROOT / "config" / "examples" / "last_n_observations.yaml")
    assert any(f.type_name == "last_n_observations" for f in role_filters(config))
    assert (
        (ROOT / "docs" / "filters" / "last_n_observations.md")
        .read_text(encoding="utf-8")
        .startswith("### last_n_observations")
    )


# --- parity with SWE-agent's own loop on annotated histories ----------------------------------


def swe_agent_rule(history: list[Message], n: int, polling: int) -> list[Message]:
    """SWE-agent's LastNObservations restated (annotated observations, default tags, string content)."""
    indices = [i for i, m in enumerate(history) if m.get("message_type") == "observation"]
    omit = set(indices[1 : max(0, (len(indices) // polling) * polling - n)])
    out = []
    for i, m in enumerate(history):
        tags = set(m.get("tags", []))
        if (i not in omit or "keep_output" in tags) and "remove_output" not in tags:
            out.append(m)
        else:
            out.append(
                {**m, "content": f"Old environment output: ({len(m['content'].splitlines())} lines omitted)"}
            )
    return out


history_entries = st.tuples(
    st.booleans(),
    st.sampled_from([[], ["keep_output"], ["remove_output"], ["keep_output", "remove_output"]]),
    st.text(alphabet="ab\n", max_size=8),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(history_entries, max_size=25), st.integers(1, 6), st.integers(1, 6))
def test_matches_swe_agent_on_annotated_histories(
    entries: list[tuple[bool, list[str], str]], n: int, polling: int
) -> None:
    history: list[Message] = [system()]
    for is_observation, tags, text in entries:
        if is_observation:
            history.append(user(text, message_type="observation", tags=tags))
        else:
            history.append(assistant(text or "act"))
    assert elide(history, n=n, polling=polling) == swe_agent_rule(history, n, polling)


# --- corpus ----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.name)
def test_corpus_output_keeps_the_invariants_and_elides_by_the_rule(path: Path) -> None:
    messages = corpus_body(path.name)["messages"]
    snapshot = copy.deepcopy(messages)
    for n, polling in [(1, 1), (3, 5)]:
        out = elide(messages, n=n, polling=polling)
        assert messages == snapshot
        assert invariant_errors(out) == {}
        assert [m["role"] for m in out] == [m["role"] for m in messages]
        positions = observation_positions(messages)
        expected = list(range(1, max(0, (len(positions) // polling) * polling - n)))
        assert [k for k, i in enumerate(positions) if out[i] is not messages[i]] == expected
        assert all(
            text_of(out[positions[k]]["content"]).startswith("Old environment output: (") for k in expected
        )


@pytest.mark.parametrize(
    "path",
    [
        p
        for p in corpus_files()
        if "tool_call_id" not in (text := p.read_text(encoding="utf-8")) and '"role": "user"' in text
    ],
    ids=lambda p: p.name,
)
def test_corpus_text_action_files_elide_annotated_user_observations(path: Path) -> None:
    messages = corpus_body(path.name)["messages"]
    annotated = [{**m, "message_type": "observation"} if m["role"] == "user" else m for m in messages]
    out = elide(annotated, n=2)
    assert invariant_errors(out) == {}
    users = [i for i, m in enumerate(annotated) if m["role"] == "user"]
    assert out[users[0]] is annotated[users[0]]
    assert all(out[i]["content"].startswith("Old environment output") for i in users[1:-2])


# --- trigger: cost: the boundary moves when eliding repays the cache rewrite (issue 18) --------------

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


def test_before_the_model_s_window_it_elides_whatever_the_cost() -> None:
    messages = history(["x " * 3000] * 4)  # ~12,000 tokens: not worth a rewrite yet (see above)
    assert elided_count(messages, run(messages)) == 0
    small = FilterContext(tokens=TokenCounters(), pricing=ANTHROPIC, window=10_000, reserve=1000)
    assert elided_count(messages, cost_filter().apply(messages, small)) == 4 - 2


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


# --- notice: facts: an elided output's notice keeps its distinctive tokens (issue 23) ----------------


def facts_filter(n: int = 1, **extra: Any) -> LastNObservations:
    return LastNObservations(type="last_n_observations", n=n, notice="facts", **extra)


def run_facts(messages: list[Message], n: int = 1, **extra: Any) -> list[Message]:
    return facts_filter(n, **extra).apply(messages, FilterContext(tokens=TokenCounters(), pricing=ANTHROPIC))


def read(path: str, output: str) -> list[Message]:
    act = action(call("read_file", {"path": path}))
    return [act, result(act, output)]


LISTING = (
    "src/app/models.py\nsrc/app/views.py\n  class Reservation: id = 44172, owner = customer_9931\n"
    + "  ...\n" * 30
)


def test_the_notice_lists_the_outputs_new_facts_in_the_order_they_appear() -> None:
    messages = [system(), user("fix Reservation"), *read("src", LISTING), *exchange("bash", "ok")]
    out = run_facts(messages)
    assert out[3]["content"] == (
        "Old environment output: (33 lines omitted; facts: src/app/models.py src/app/views.py 44172 customer_9931)"
    )  # `Reservation` is in the task and `src` in the call: already in the request, not repeated


def test_a_fact_an_earlier_output_holds_is_kept_by_that_outputs_notice_only() -> None:
    messages = [
        system(),
        user("go"),
        *read("a", LISTING),
        *read("b", LISTING + "extra_token_here"),
        *exchange(),
    ]
    out = run_facts(messages)
    assert out[5]["content"] == "Old environment output: (34 lines omitted; facts: extra_token_here)"
    assert "customer_9931" in out[3]["content"]


def test_every_distinctive_token_of_the_history_stays_in_the_request() -> None:
    for path in corpus_files():
        messages = corpus_body(path.name)["messages"]
        out = run_facts(messages)
        sent = " ".join(message_text(m) for m in out)
        missing = {t for m in messages for t in DISTINCTIVE.findall(message_text(m)) if t not in sent}
        assert missing == set(), path.name


def test_an_output_no_longer_than_its_notice_stays_as_it_is() -> None:
    messages = [system(), user("go"), *read("a", "ok 4417"), *exchange("bash", "x\n" * 400), *exchange()]
    out = run_facts(messages)
    assert out[3] is messages[3]
    assert out[5]["content"].startswith("Old environment output: (400 lines omitted")


def test_list_content_keeps_its_facts_and_counts_its_images() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    act = action(call("screenshot"))
    shot = {**result(act), "content": [{"type": "text", "text": "window title_bar_9921\nok"}, image]}
    out = run_facts([system(), user("look"), act, shot, *exchange()])
    assert out[3]["content"] == [
        {
            "type": "text",
            "text": "Old environment output: (2 lines omitted; facts: window title_bar_9921) (1 images omitted)",
        }
    ]


def test_an_old_outputs_notice_is_the_same_on_every_later_request() -> None:
    messages = corpus_body("tau-bench-airline-task2-trial1.json")["messages"]
    first_seen: dict[int, Any] = {}
    for end in request_ends(messages):
        out = run_facts(messages[:end], n=2, trigger="cost")
        assert not invariant_errors(out)
        for i in observation_positions(messages[:end]):
            if out[i] is not messages[i]:
                assert first_seen.setdefault(i, out[i]["content"]) == out[i]["content"]
    assert first_seen


def test_the_cost_trigger_counts_the_facts_it_keeps() -> None:
    # outputs that are nothing but distinct ids: a notice keeping them saves next to nothing
    def ids(k: int) -> str:
        return "\n".join(f"reservation_{k:03d}_{j:05d}" for j in range(400))

    messages = [system(), user("list them")]
    for k in range(12):
        messages += read(f"page{k}", ids(k))
    lines = LastNObservations(type="last_n_observations", n=2, trigger="cost")
    ctx = FilterContext(tokens=TokenCounters(), pricing=ANTHROPIC)
    assert lines.apply(messages, ctx) != messages  # eliding to a line count pays
    assert run_facts(messages, n=2, trigger="cost") == messages  # keeping every id does not


def test_the_facts_memo_holds_at_most_its_entries_and_characters() -> None:
    memo = FactsMemo(max_entries=2, max_chars=100)
    for text in ("alpha_one", "beta_two", "gamma_three"):
        assert memo.tokens(text) == (text,)
    assert len(memo._held) == 2 and "alpha_one" not in memo._held
    memo.tokens("x" * 200)  # too long to hold: answered, not kept
    assert "x" * 200 not in memo._held


# --- keep_quoted: an old output the agent's newest steps quote stays whole (issue 23) -----------------


def quoting_history(quote: str, after: int = 1) -> list[Message]:
    """Large outputs (eliding pays from the 9th on here), the first holding a fact that the step before
    the last quotes."""
    messages = [system(), user("fix it")]
    messages += read("src/app.py", "def handle_request_4417():\n" + "x " * 3000)
    for k in range(6):
        messages += read(f"page{k}.txt", f"page {k}\n" + "y " * 3000)
    act = action(call("edit", {"target": quote}))
    messages += [act, result(act, "edited\n" + "z " * 3000)]
    for k in range(after):
        messages += read(f"more{k}.txt", f"more {k}\n" + "w " * 3000)
    return messages


def test_an_old_output_one_of_the_newest_steps_quotes_stays_whole_and_the_others_are_elided() -> None:
    messages = quoting_history("handle_request_4417")
    out = run_facts(messages, n=2, trigger="cost", keep_quoted=2)
    assert out[3] is messages[3]  # read(src/app.py): the edit, one of the 2 newest steps, quotes it
    assert out[5]["content"].startswith("Old environment output:")
    plain = run_facts(messages, n=2, trigger="cost")
    assert plain[3]["content"].startswith("Old environment output:")
    assert elided_count(messages, out) == 6  # every other output but the newest 2
    # with keep_quoted 1 the newest step alone counts, and it quotes nothing of it
    newest_only = run_facts(messages, n=2, trigger="cost", keep_quoted=1)
    assert newest_only[3]["content"].startswith("Old environment output:")


def test_a_kept_output_stays_whole_on_every_later_request() -> None:
    messages = quoting_history("handle_request_4417", after=8)  # later steps quote nothing of it
    kept_from = None
    for end in request_ends(messages):
        out = run_facts(messages[:end], n=2, trigger="cost", keep_quoted=2)
        if kept_from is None and elided_count(messages[:end], out) > 0:
            kept_from = end
        if kept_from is not None:
            assert out[3] is messages[3], end
    assert kept_from is not None


def test_an_output_nobody_quotes_is_elided_as_without_keep_quoted() -> None:
    messages = quoting_history("nothing_it_holds")
    assert run_facts(messages, n=2, trigger="cost", keep_quoted=2) == run_facts(messages, n=2, trigger="cost")


def test_keep_quoted_needs_the_cost_trigger() -> None:
    with pytest.raises(ValidationError, match="needs trigger: cost"):
        LastNObservations(type="last_n_observations", n=2, keep_quoted=1)


# --- issue 32's options: notice: digest, keep_records, reencode, recall ---------------------------------

NO_MINIMUM = Pricing(name="test", min_tokens=0, block=1)
"""A provider caching any prefix, so re-encoding applies to the short requests here."""
NUMBERED = "\n".join(f"{k:5d}\tfiller line number {k} of the module" for k in range(1, 60))
CONFIG_PY = NUMBERED + "\n   60\tLISTEN_PORT = 8443  # served_from /srv/app/config.py\n"


def chain(**options: Any) -> LastNObservations:
    return LastNObservations(type="last_n_observations", **{"n": 1, **options})


def reads(*outputs: str) -> list[Message]:
    messages = [system(), user("fix the server")]
    for output in outputs:
        messages += exchange("bash", output=output)
    return messages


def test_a_digest_quotes_the_line_holding_a_new_fact_with_its_line_number() -> None:
    out = chain(notice="digest").apply(reads(CONFIG_PY, "ok"), FilterContext())
    notice = out[3]["content"]
    assert notice.startswith("Old environment output: (60 lines omitted; ")
    assert "   60\tLISTEN_PORT = 8443  # served_from /srv/app/config.py" in notice.splitlines()
    assert len(notice) <= 0.15 * len(CONFIG_PY) + 120  # the share, plus the notice's own words


def test_the_measure_counts_a_digest_kept_in_context_and_a_fact_list_lost() -> None:
    history = reads(CONFIG_PY, "ok")
    answer = assistant("Port 8443 is in /srv/app/config.py")
    facts = chain(notice="facts").apply(history, FilterContext())
    digest = chain(notice="digest").apply(history, FilterContext())
    assert "8443" in facts[3]["content"]  # the bare token is there ...
    lost = measure_context(history, answer, facts)
    kept = measure_context(history, answer, digest)
    assert "8443" not in lost.with_context and ("8443", "notice") in lost.lost  # ... without its place
    assert "8443" in kept.with_context


def test_a_digest_never_passes_its_share_and_lists_what_it_could_not_quote() -> None:
    text = "\n".join(f"record_{k:04d} value {k * 7919}" for k in range(200))
    facts = [f"record_{k:04d}" for k in range(200)]
    quotes, left = line_digest(text, facts, 0.05)
    assert sum(len(q) + 1 for q in quotes) <= 0.05 * len(text) + 2
    assert quotes and left and set(left) <= set(facts)


def test_a_small_json_record_is_not_elided_with_keep_records() -> None:
    record = json.dumps({"reservation_id": "ZFA04Y", "flights": [{"flight_number": "HAT170"}]}, indent=2)
    big = json.dumps({"rows": [{"k": k, "name": f"item_{k}"} for k in range(300)]}, indent=2)
    out = chain(keep_records=2000).apply(reads(record, big, "ok"), FilterContext())
    assert out[3]["content"] == record
    assert out[5]["content"].startswith("Old environment output:")
    assert is_record(record, 2000) and not is_record(big, 2000) and not is_record("plain 1", 2000)


def test_reencode_minifies_json_byte_for_byte_and_keeps_indentation_of_code() -> None:
    pretty = '{\n  "price": 1.50,\n  "note": "two  spaces kept",\n  "list": [1, 2]\n}'
    assert minified_json(pretty) == '{"price":1.50,"note":"two  spaces kept","list":[1,2]}'
    code = "def f():  \n    return 1\n\n\n\n\nprint(f())\t\n"
    assert reencoded(code) == "def f():\n    return 1\n\nprint(f())\n"
    plain = "already\nclean\n"
    assert reencoded(plain) is plain
    newest = chain(n=5, reencode=True).apply(reads(pretty), FilterContext(pricing=NO_MINIMUM))
    assert newest[3]["content"] == '{"price":1.50,"note":"two  spaces kept","list":[1,2]}'


def test_reencode_leaves_a_request_under_the_providers_cache_minimum_as_it_is() -> None:
    pretty = json.dumps({"a": list(range(5))}, indent=4)
    assert chain(n=5, reencode=True).apply(reads(pretty), FilterContext())[3]["content"] == pretty
    padded = [system("policy " * 2000), *reads(pretty)[1:]]  # past Anthropic's 1,024 tokens before it
    assert chain(n=5, reencode=True).apply(padded, FilterContext())[3]["content"] == '{"a":[0,1,2,3,4]}'


def test_reencode_gives_the_same_text_on_every_request() -> None:
    pretty = json.dumps({"a": list(range(5))}, indent=4)
    f = chain(n=3, reencode=True)
    history = reads(pretty, "x", "y")
    first = f.apply(history[:6], FilterContext(pricing=NO_MINIMUM))
    later = f.apply(history, FilterContext(pricing=NO_MINIMUM))
    assert first[3] == later[3] and first[3]["content"] == '{"a":[0,1,2,3,4]}'


def test_recall_brings_an_output_back_whole_when_a_later_step_mentions_its_handle() -> None:
    history = reads(CONFIG_PY, "ok", "ok again")
    handle = handle_of(CONFIG_PY)
    elided = chain(recall=True).apply(history, FilterContext())
    assert f"mention #{handle})" in elided[3]["content"]
    asked = [*history, assistant(f"Show #{handle} again please")]
    assert chain(recall=True).apply(asked, FilterContext())[3]["content"] == CONFIG_PY


def test_recall_keeps_what_it_elides_for_the_tenant_only() -> None:
    store = MemoryRecallStore()
    handle = handle_of(CONFIG_PY)
    chain(recall=True).apply(reads(CONFIG_PY, "ok", "ok"), FilterContext(tenant="a", recall=store))
    assert store.get("a", handle) == CONFIG_PY
    assert store.get("b", handle) is None
    notice = chain(recall=True).apply(reads(CONFIG_PY, "ok", "ok"), FilterContext())[3]["content"]
    sent_back = [*reads(notice, "ok", "ok"), assistant(f"#{handle}")]
    assert (
        chain(recall=True).apply(sent_back, FilterContext(tenant="a", recall=store))[3]["content"]
        == CONFIG_PY
    )
    other = chain(recall=True).apply(sent_back, FilterContext(tenant="b", recall=store))[3]["content"]
    assert other.startswith(notice) and f"#{handle} is no longer held" in other


OPTIONS: list[dict[str, Any]] = [
    {"notice": "digest"},
    {"notice": "digest", "digest_share": 0.5, "trigger": "cost"},
    {"keep_records": 500},
    {"reencode": True},
    {"recall": True},
    {"notice": "digest", "keep_records": 2000, "reencode": True, "recall": True, "trigger": "cost"},
]


@pytest.mark.parametrize("options", OPTIONS, ids=[",".join(o) for o in OPTIONS])
@settings(max_examples=60, deadline=None)
@given(messages=conversations())
def test_each_option_keeps_a_valid_conversation_valid_and_its_input_untouched(
    options: dict[str, Any], messages: list[Message]
) -> None:
    before = json.dumps(messages, sort_keys=True)
    out = chain(**options).apply(messages, FilterContext(recall=MemoryRecallStore()))
    assert json.dumps(messages, sort_keys=True) == before
    assert invariant_errors(out) == {}
    assert out == chain(**options).apply(messages, FilterContext())


@given(st.text(max_size=400))
def test_reencoding_only_ever_removes_whitespace(text: str) -> None:
    out = reencoded(text)
    assert "".join(out.split()) == "".join(text.split())
    assert reencoded(out) == out


def test_the_handle_memo_is_bounded_in_characters() -> None:
    memo = HandleMemo(max_entries=100, max_chars=100)
    texts = [f"output {k:02d} " * 3 for k in range(10)]  # 30 characters each
    assert [memo.handle(t) for t in texts] == [handle_of(t) for t in texts]
    assert memo._chars <= 100 and len(memo._held) == 3
