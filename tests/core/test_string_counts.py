"""The token-count cache in bytes, and tokenizing long texts in linear time with exact counts."""

from __future__ import annotations

import random

import pytest
import tiktoken

from history_proxy.core.encodings import CHUNK_CHARS, install_encoding_files, tiktoken_length
from history_proxy.core.string_counts import LARGE_CHARS, LOOP_BUDGET, CountLater, StringCounts
from history_proxy.core.tokens import approximate_length

WORDS = [
    "hello",
    "world",
    "def",
    "return",
    "x_1",
    "foo.bar()",
    "{",
    "}",
    "\n",
    "  ",
    "12345",
    "été",
    "日本語",
    "\t",
    "'s",
]


@pytest.fixture(scope="module", params=["o200k_base", "cl100k_base"])
def encoding(request: pytest.FixtureRequest) -> str:
    install_encoding_files()
    return str(request.param)


def test_long_prose_and_code_count_exactly_as_tiktoken_in_one_piece(encoding: str) -> None:
    rng = random.Random(7)
    encode = tiktoken.get_encoding(encoding).encode_ordinary
    for glue in (" ", ""):
        text = glue.join(rng.choice(WORDS) for _ in range(20_000))
        assert len(text) > 4 * CHUNK_CHARS
        assert tiktoken_length(encoding)(text) == len(encode(text))


def test_a_long_run_of_one_character_is_counted_in_linear_time_and_close_to_exact(encoding: str) -> None:
    run = "a" * 200_000
    exact = len(tiktoken.get_encoding(encoding).encode_ordinary(run))
    counted = tiktoken_length(encoding)(run)
    assert abs(counted - exact) <= len(run) // 512 + 1


def test_the_cache_never_holds_more_bytes_than_its_bound() -> None:
    counts = StringCounts(approximate_length, max_entries=1_000_000, max_bytes=1_000_000)
    for i in range(2_000):
        text = f"{i} " + "x" * 2_000
        assert counts.tokenize(text) == approximate_length(text)
        assert counts.held_bytes <= 1_000_000
    assert 0 < len(counts.cache) < 2_000


def test_a_large_string_is_remembered_by_its_hash_and_costs_no_room() -> None:
    counts = StringCounts(approximate_length, max_entries=10, max_bytes=1_000_000)
    text = "y" * (LARGE_CHARS * 4)
    assert counts.tokenize(text) == approximate_length(text)
    assert counts.held_bytes == 0
    assert counts.known("y" * (LARGE_CHARS * 4))  # an equal string, another object
    misses = counts.misses
    assert counts.tokenize("y" * (LARGE_CHARS * 4)) == approximate_length(text)
    assert counts.misses == misses


def test_tokenizing_past_the_loop_budget_asks_for_counting_elsewhere() -> None:
    counts = StringCounts(approximate_length, max_entries=100, max_bytes=1_000_000)
    token = LOOP_BUDGET.set([100])
    try:
        counts.tokenize("z" * 60)
        with pytest.raises(CountLater):
            counts.tokenize("w" * 60)
    finally:
        LOOP_BUDGET.reset(token)
    assert counts.tokenize("w" * 60) == 15  # no budget: counted where it runs
