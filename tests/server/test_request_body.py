"""The one parse and the one serialization of a body agree with the stdlib on real conversations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from history_proxy.config.models import LimitsConfig
from history_proxy.errors import PayloadTooLargeError
from history_proxy.server.body import check_containers, encode_json, parse_body
from tests.factories import corpus_files


@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.stem)
def test_corpus_bodies_parse_and_serialize_exactly_as_the_stdlib_reads_them(path: Path) -> None:
    raw = path.read_bytes()
    body = parse_body(raw)
    assert body == json.loads(raw)
    assert json.loads(encode_json(body)) == body


def test_a_lone_surrogate_still_goes_through_escaped() -> None:
    body = parse_body(b'{"model": "m", "messages": [{"role": "user", "content": "a\\ud800b"}]}')
    assert body["messages"][0]["content"] == "a\ud800b"
    assert b"\\ud800" in encode_json(body)


def test_non_ascii_text_is_sent_as_utf8_not_escaped() -> None:
    assert encode_json({"content": "héllo ✓"}) == '{"content":"héllo ✓"}'.encode()


def amplified(count: int) -> bytes:
    """A chat body padded with ``count`` empty objects: the shape that parses to ~30x its size."""
    return (
        b'{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"pad":['
        + b",".join([b"{}"] * count)
        + b"]}"
    )


def test_a_body_with_more_containers_than_the_limit_is_413_before_parsing() -> None:
    with pytest.raises(PayloadTooLargeError, match=r"limits\.max_json_containers") as refused:
        parse_body(amplified(1000), max_containers=500)
    assert refused.value.code == "too_many_json_containers"
    assert parse_body(amplified(400), max_containers=500)["model"] == "gpt-4o"


def test_bodies_too_short_to_exceed_the_limit_are_not_counted() -> None:
    body = b"[" * 300 + b"]" * 300  # 300 containers in 600 bytes: the densest JSON there is
    check_containers(body, 300)
    with pytest.raises(PayloadTooLargeError):
        check_containers(body, 299)


@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.name)
def test_corpus_conversations_stay_far_below_the_default_container_limit(path: Path) -> None:
    check_containers(path.read_bytes(), LimitsConfig().max_json_containers // 20)
