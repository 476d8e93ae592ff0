"""Very large bodies parsed in steps give exactly what one call would: the same value, the same error
at the same position."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from history_proxy.errors import InvalidRequestError, PayloadTooLargeError
from history_proxy.server.body import PARSE_IN_STEPS_BYTES, parse_pieces
from history_proxy.server.json_steps import parse_in_steps
from tests.factories import corpus_files

DECODER = json.JSONDecoder()
scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=20)
values = st.recursive(
    scalars | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)
objects = st.dictionaries(st.text(max_size=8), values, max_size=6)
spacing = st.sampled_from(["", " ", "\n", " \t\r\n "])


def spaced(value: Any, space: str) -> str:
    """``value`` as JSON with ``space`` around every separator (json.dumps puts it after them)."""
    return json.dumps(value, separators=(space + "," + space, space + ":" + space))


@given(objects, spacing)
def test_a_parse_in_steps_is_json_loads(value: dict[str, Any], space: str) -> None:
    text = space + spaced(value, space) + space
    assert parse_in_steps(text, DECODER) == json.loads(text)


def error_of(parse: Any, text: str | bytes) -> str:
    try:
        parse(text)
    except json.JSONDecodeError as exc:
        return str(exc)
    return "parsed"


@given(objects, spacing, st.data())
def test_a_broken_body_fails_with_json_loads_error_and_position(
    value: dict[str, Any], space: str, data: st.DataObject
) -> None:
    text = spaced(value, space)
    at = data.draw(st.integers(0, len(text)))
    cut = data.draw(st.sampled_from(["drop", "insert", "truncate"]))
    noise = data.draw(st.sampled_from([",", ":", "}", "]", "{", "[", '"', "x", " "]))
    broken = {
        "drop": text[:at] + text[at + 1 :],
        "insert": text[:at] + noise + text[at:],
        "truncate": text[:at],
    }[cut]
    assert error_of(lambda text: parse_in_steps(text, DECODER), broken) == error_of(json.loads, broken)


@pytest.mark.parametrize("path", corpus_files()[:6], ids=lambda p: p.stem)
def test_corpus_bodies_padded_past_the_threshold_parse_as_the_stdlib_reads_them(path: Path) -> None:
    body = json.loads(path.read_bytes())
    body["padding"] = "x" * PARSE_IN_STEPS_BYTES
    raw = json.dumps(body, indent=1, ensure_ascii=False).encode()
    pieces = [raw[at : at + 65_536] for at in range(0, len(raw), 65_536)]  # some cut inside a character
    assert parse_pieces(pieces, 100_000) == body
    assert pieces == []  # consumed


def test_a_large_body_keeps_the_strict_rules_and_the_error_shape() -> None:
    padding = b'"' + b"x" * PARSE_IN_STEPS_BYTES + b'"'
    with pytest.raises(InvalidRequestError, match="NaN is not valid JSON"):
        parse_pieces([b'{"model": "m", "messages": [NaN], "p": ', padding, b"}"], None)
    broken = b'{"model": "m", "messages": [{"role": "user"} {}], "p": ' + padding + b"}"
    with pytest.raises(InvalidRequestError) as refused:
        parse_pieces([broken], None)
    assert f"({error_of(json.loads, broken)})" in refused.value.message
    with pytest.raises(InvalidRequestError, match="must be a JSON object"):
        parse_pieces([b"[" + padding + b"]"], None)


def test_a_large_body_counts_its_containers_across_pieces() -> None:
    padding = b'"' + b"x" * PARSE_IN_STEPS_BYTES + b'"'
    with pytest.raises(PayloadTooLargeError):
        parse_pieces([b'{"p": ' + padding + b', "pad": [', b"{}," * 1000, b"{}]}"], 500)
