"""``last_n_observations`` with ``notice: facts``: an elided output's notice keeps its distinctive tokens (issue 23)."""

from __future__ import annotations

from typing import Any

from proxy.core.cost import ANTHROPIC
from proxy.core.evidence import DISTINCTIVE, message_text
from proxy.core.invariants import invariant_errors
from proxy.core.messages import Message
from proxy.core.tokens import TokenCounters
from proxy.devtools.replay import request_ends
from proxy.filters._facts import FactsMemo
from proxy.filters.base import FilterContext
from proxy.filters.last_n_observations import LastNObservations, observation_positions
from tests.factories import action, call, corpus_body, corpus_files, exchange, result, system, user


def facts_filter(n: int = 1, **extra: Any) -> LastNObservations:
    return LastNObservations(type="last_n_observations", n=n, notice="facts", **extra)


def run(messages: list[Message], n: int = 1, **extra: Any) -> list[Message]:
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
    out = run(messages)
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
    out = run(messages)
    assert out[5]["content"] == "Old environment output: (34 lines omitted; facts: extra_token_here)"
    assert "customer_9931" in out[3]["content"]


def test_every_distinctive_token_of_the_history_stays_in_the_request() -> None:
    for path in corpus_files():
        messages = corpus_body(path.name)["messages"]
        out = run(messages)
        sent = " ".join(message_text(m) for m in out)
        missing = {t for m in messages for t in DISTINCTIVE.findall(message_text(m)) if t not in sent}
        assert missing == set(), path.name


def test_an_output_no_longer_than_its_notice_stays_as_it_is() -> None:
    messages = [system(), user("go"), *read("a", "ok 4417"), *exchange("bash", "x\n" * 400), *exchange()]
    out = run(messages)
    assert out[3] is messages[3]
    assert out[5]["content"].startswith("Old environment output: (400 lines omitted")


def test_list_content_keeps_its_facts_and_counts_its_images() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    act = action(call("screenshot"))
    shot = {**result(act), "content": [{"type": "text", "text": "window title_bar_9921\nok"}, image]}
    out = run([system(), user("look"), act, shot, *exchange()])
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
        out = run(messages[:end], n=2, trigger="cost")
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
    assert run(messages, n=2, trigger="cost") == messages  # keeping every id does not


def test_the_facts_memo_holds_at_most_its_entries_and_characters() -> None:
    memo = FactsMemo(max_entries=2, max_chars=100)
    for text in ("alpha_one", "beta_two", "gamma_three"):
        assert memo.tokens(text) == (text,)
    assert len(memo._tokens) == 2 and "alpha_one" not in memo._tokens
    memo.tokens("x" * 200)  # too long to hold: answered, not kept
    assert "x" * 200 not in memo._tokens
