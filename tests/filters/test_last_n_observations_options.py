"""``last_n_observations``'s issue-32 options: ``notice: digest``, ``keep_records``, ``reencode``, ``recall``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from history_proxy.core.cost import Pricing
from history_proxy.core.evidence_context import measure_context
from history_proxy.core.invariants import invariant_errors
from history_proxy.core.messages import Message
from history_proxy.filters._line_digest import line_digest
from history_proxy.filters._recall import handle_of
from history_proxy.filters._reencode import is_record, minified_json, reencoded
from history_proxy.filters.base import FilterContext
from history_proxy.filters.last_n_observations import LastNObservations
from history_proxy.pipeline.recall import MemoryRecallStore
from tests.factories import assistant, exchange, system, user
from tests.strategies import conversations

NO_MINIMUM = Pricing(name="test", min_tokens=0, block=1)
"""A provider caching any prefix, so re-encoding applies to the short requests here."""
LISTING = "\n".join(f"{k:5d}\tfiller line number {k} of the module" for k in range(1, 60))
CONFIG_PY = LISTING + "\n   60\tLISTEN_PORT = 8443  # served_from /srv/app/config.py\n"


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


def test_the_recall_store_is_bounded_in_bytes_per_tenant_and_in_all() -> None:
    store = MemoryRecallStore(max_bytes=10_000, max_tenant_bytes=4_000)
    for k in range(20):
        store.put("a", f"h{k}", "x" * 1000)
        store.put(f"t{k}", "h", "y" * 900)
        assert store.tenant_bytes("a") <= 4_000 and store.bytes <= 10_000
    assert store.get("a", "h19") is not None and store.get("a", "h0") is None
    store.put("a", "huge", "z" * 5_000)  # over a tenant's share: not held
    assert store.get("a", "huge") is None


def test_the_recall_store_forgets_after_its_ttl() -> None:
    now = [0.0]
    store = MemoryRecallStore(ttl_s=10, clock=lambda: now[0])
    store.put("a", "h", "text")
    now[0] = 9.0
    assert store.get("a", "h") == "text"  # a read renews it
    now[0] = 18.0
    assert store.get("a", "h") == "text"
    now[0] = 40.0
    assert store.get("a", "h") is None and store.bytes == 0


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
