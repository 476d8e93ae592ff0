"""Never stricter than the upstream, proven by hypothesis: what the proxy does not know comes out unchanged, in place.

Generated conversations, as Responses and chat requests, get what no filter knows: unknown item
types, messages of an unknown role, unknown content parts and an unknown field on every item or
message (``x_probe``, the item's original position), and a leading block of instructions mixing
tool declarations (``additional_tools``), developer messages and opaque items. For every filter case
of :mod:`tests.support.filter_cases` and random chains:

- the request sent is valid for its API and the client's body is not changed;
- every sent item that came from the client keeps every field the proxy does not own; opaque items
  (unknown types and roles, compaction, tool declarations, reasoning) are byte-identical;
- the client's items keep their order (the probes come out increasing);
- the tool declarations and opaque items of the leading block all come out, in order, before the
  first user message; the leading developer messages too, wherever the filter's definition keeps
  the leading system messages (:func:`tests.support.filter_cases.keeps_leading_system`).
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from history_proxy.core.identity import Identity
from history_proxy.core.messages import ANNOTATION_KEYS, Message
from history_proxy.errors import InvalidRequestError
from history_proxy.filters import Filter
from history_proxy.surfaces.shape import shape
from tests.strategies import conversations
from tests.support.filter_cases import CASES, keeps_leading_system
from tests.support.surface_chains import SETTINGS, pipeline_for
from tests.surface_bodies import plain_chat, responses_body, responses_errors

IDENTITY = Identity(role="r", agent="alice", phase="1")
PROBE = "x_probe"
ODD_PART = {"type": "input_hologram", "data": "zz"}
OPAQUE_KINDS = frozenset({"additional_tools", "compaction", "x_frobnicate", "reasoning", "web_search_call"})
OWNED = frozenset({"content", "tool_calls", "cache_control"})
"""Chat message fields filters own: the text, the calls (views drop them) and the cache_control mark."""
LEAD_KINDS = ("tools", "developer", "unknown", "compaction", "critic")


def lead_item(kind: str, n: int) -> dict[str, Any]:
    if kind == "tools":
        return {
            "type": "additional_tools",
            "role": "developer",
            "tools": [{"type": "function", "name": f"t{n}"}],
        }
    if kind == "developer":
        return {"type": "message", "role": "developer", "content": f"instruction {n}"}
    if kind == "unknown":
        return {"type": "x_frobnicate", "id": f"fr_{n}", "payload": {"n": n}}
    if kind == "compaction":
        return {"type": "compaction", "id": f"cmp_{n}", "encrypted_content": f"enc{n}"}
    return {"type": "message", "role": "critic", "content": [{"type": "input_text", "text": f"note {n}"}]}


def has_odd_part(message: dict[str, Any]) -> bool:
    """Whether the message holds the unknown part as it came (a cache mark on it aside)."""
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(part, dict) and {k: v for k, v in part.items() if k != "cache_control"} == ODD_PART
        for part in content
    )


def same_parts(sent: dict[str, Any], original: dict[str, Any]) -> bool:
    """Whether the content was edited part for part (an elision or a digest replaces it whole, by definition)."""
    content = sent.get("content")
    return isinstance(content, list) and len(content) == len(original["content"])


def opaque(item: dict[str, Any]) -> bool:
    return item.get("type") in OPAQUE_KINDS or item.get("role") not in (
        None,
        "user",
        "assistant",
        "system",
        "developer",
    )


@st.composite
def responses_requests(draw: st.DrawFn) -> tuple[dict[str, Any], int]:
    """A Responses request with a leading block and unknown things everywhere; and the block's length."""
    chat = draw(conversations())
    body = responses_body(plain_chat(chat), draw(st.lists(st.integers(0, 3), min_size=1, max_size=4)))
    lead = [
        lead_item(kind, n)
        for n, kind in enumerate(draw(st.lists(st.sampled_from(LEAD_KINDS), min_size=1, max_size=5)))
    ]
    items: list[dict[str, Any]] = list(body["input"])
    for _ in range(
        draw(st.integers(0, 3))
    ):  # unknown items among the history, never right after a reasoning item
        places = [i for i in range(1, len(items) + 1) if items[i - 1].get("type") != "reasoning"]
        if places:
            at = draw(st.sampled_from(places))
            items.insert(at, {"type": "x_frobnicate", "id": f"fr_h{at}", "payload": [at]})
    for i in draw(st.lists(st.integers(0, max(len(items) - 1, 0)), max_size=3)):
        if (
            i < len(items)
            and isinstance(items[i].get("content"), list)
            and items[i].get("role") in ("user", "system")
        ):
            items[i] = {**items[i], "content": [*items[i]["content"], ODD_PART]}
    everything = [*lead, *items]
    body["input"] = [{**item, PROBE: n} for n, item in enumerate(everything)]
    return body, len(lead)


def check_responses(chain: list[Filter], body: dict[str, Any], lead: int) -> None:
    snapshot = copy.deepcopy(body)
    try:
        sent = asyncio.run(shape("responses", pipeline_for(chain), body, IDENTITY, "u")).body
    except InvalidRequestError:
        return  # a filter that cannot apply to this input: the same 400 as on chat
    names = [f.type_name for f in chain]
    assert body == snapshot, "the client's body was changed in place"
    assert responses_errors(sent) == [], names
    originals = snapshot["input"]
    probes = [item[PROBE] for item in sent["input"] if PROBE in item]
    assert probes == sorted(set(probes)), f"{names}: the client's items out of place"
    for item in sent["input"]:
        if PROBE not in item:
            continue
        original = originals[item[PROBE]]
        if opaque(original):
            assert item == original, names
        else:  # text and outputs may be rewritten; nothing else
            assert {k: v for k, v in item.items() if k not in ("content", "output")} == {
                k: v
                for k, v in original.items()
                if k not in ("content", "output") and k not in ANNOTATION_KEYS
            }, names
            if has_odd_part(original) and same_parts(item, original):
                assert has_odd_part(item), names
    first_user = next(
        (n for n, item in enumerate(sent["input"]) if item.get("role") == "user"), len(sent["input"])
    )
    before_user = [item.get(PROBE) for item in sent["input"][:first_user]]
    must = [n for n in range(lead) if opaque(originals[n])]
    if keeps_leading_system_all(chain):
        must = list(range(lead))
    assert [p for p in before_user if p in must] == must, (
        f"{names}: the leading instructions were not all kept"
    )


def keeps_leading_system_all(chain: list[Filter]) -> bool:
    return all(keeps_leading_system(f) and f.type_name != "remove_regex" for f in chain)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in CASES])
@SETTINGS
@given(request=responses_requests())
def test_every_filter_forwards_unknown_responses_items_unchanged_and_in_place(
    case: Any, request: tuple[dict[str, Any], int]
) -> None:
    check_responses([case.filter], *request)


@SETTINGS
@given(
    chain=st.lists(st.sampled_from([case.filter for case in CASES]), min_size=2, max_size=4),
    request=responses_requests(),
)
def test_random_chains_forward_unknown_responses_items_unchanged_and_in_place(
    chain: list[Filter], request: tuple[dict[str, Any], int]
) -> None:
    check_responses(chain, *request)


# --- chat ------------------------------------------------------------------------------------------


@st.composite
def chat_requests(draw: st.DrawFn) -> tuple[list[Message], int]:
    """A chat conversation with leading developer messages, an unknown field on every message and
    unknown content parts here and there; and how many messages lead."""
    chat = draw(conversations())
    lead = [{"role": "developer", "content": f"instruction {n}"} for n in range(draw(st.integers(0, 2)))]
    messages = [*lead, *chat]
    for i in draw(st.lists(st.integers(0, len(messages) - 1), max_size=3)):
        content = messages[i].get("content")
        if isinstance(content, list):
            messages[i] = {**messages[i], "content": [*content, ODD_PART]}
    leading = next(
        (n for n, m in enumerate(messages) if m.get("role") not in ("system", "developer")), len(messages)
    )
    return [{**m, PROBE: n} for n, m in enumerate(messages)], leading


def check_chat(chain: list[Filter], messages: list[Message], lead: int) -> None:
    snapshot = copy.deepcopy(messages)
    try:
        result = asyncio.run(
            pipeline_for(chain).run({"model": "gpt-4o", "messages": messages}, IDENTITY, "u")
        )
    except InvalidRequestError:
        return
    names = [f.type_name for f in chain]
    assert messages == snapshot
    sent = result.body["messages"]
    probes = [m[PROBE] for m in sent if PROBE in m]
    assert probes == sorted(set(probes)), f"{names}: the client's messages out of place"
    for message in sent:
        if PROBE not in message:
            continue
        original = snapshot[message[PROBE]]
        assert {k: v for k, v in message.items() if k not in OWNED} == {
            k: v for k, v in original.items() if k not in OWNED and k not in ANNOTATION_KEYS
        }, names
        if has_odd_part(original) and same_parts(message, original):
            assert has_odd_part(message), names
    if keeps_leading_system_all(chain):
        assert [m.get(PROBE) for m in sent[:lead]] == list(range(lead)), f"{names}: leading instructions lost"


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in CASES])
@SETTINGS
@given(request=chat_requests())
def test_every_filter_keeps_unknown_chat_fields_and_parts_in_place(
    case: Any, request: tuple[list[Message], int]
) -> None:
    check_chat([case.filter], *request)


@SETTINGS
@given(
    chain=st.lists(st.sampled_from([case.filter for case in CASES]), min_size=2, max_size=4),
    request=chat_requests(),
)
def test_random_chains_keep_unknown_chat_fields_and_parts_in_place(
    chain: list[Filter], request: tuple[list[Message], int]
) -> None:
    check_chat(chain, *request)
