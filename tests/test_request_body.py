"""The one parse and the one serialization of a body agree with the stdlib on real conversations."""

from __future__ import annotations

import json

import pytest

from proxy.server.body import encode_json, parse_body
from tests.factories import corpus_files


@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.stem)
def test_corpus_bodies_parse_and_serialize_exactly_as_the_stdlib_reads_them(path: object) -> None:
    raw = path.read_bytes()  # type: ignore[attr-defined]
    body = parse_body(raw)
    assert body == json.loads(raw)
    assert json.loads(encode_json(body)) == body


def test_a_lone_surrogate_still_goes_through_escaped() -> None:
    body = parse_body(b'{"model": "m", "messages": [{"role": "user", "content": "a\\ud800b"}]}')
    assert body["messages"][0]["content"] == "a\ud800b"
    assert b"\\ud800" in encode_json(body)


def test_non_ascii_text_is_sent_as_utf8_not_escaped() -> None:
    assert encode_json({"content": "héllo ✓"}) == '{"content":"héllo ✓"}'.encode()
