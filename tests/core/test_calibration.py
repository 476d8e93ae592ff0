"""Token counts calibrated to the provider's: learned per upstream and model family, bounded, smoothed."""

from __future__ import annotations

import pytest

from history_proxy.core.calibration import (
    MAX_ENTRIES,
    MAX_RATIO,
    MIN_RATIO,
    Calibration,
    calibrated_limit,
    family_of,
)


@pytest.mark.parametrize(
    ("model", "family"),
    [
        ("claude-opus-4-6", "claude-opus"),
        ("claude-sonnet-4-5-20250929", "claude-sonnet"),
        ("claude-3-5-sonnet-latest", "claude"),
        ("gpt-4o-mini", "gpt"),
        ("o3-mini", "o3"),
        ("anthropic/claude-haiku-4-5", "claude-haiku"),
        ("", "unknown"),
    ],
)
def test_the_family_is_the_models_leading_words(model: str, family: str) -> None:
    assert family_of(model) == family


def test_nothing_known_is_a_ratio_of_one_and_a_limit_unchanged() -> None:
    calibration = Calibration()
    assert calibration.ratio("claude", "claude-opus-4-6") == 1.0
    assert calibrated_limit(100_000, 1.0) == 100_000


def test_the_first_answer_sets_the_ratio_and_later_ones_move_it_smoothly() -> None:
    calibration = Calibration()
    calibration.observe("claude", "claude-opus-4-6", 10_000, 16_000)
    assert calibration.ratio("claude", "claude-opus-4-7") == pytest.approx(1.6)  # the same family
    calibration.observe("claude", "claude-opus-4-6", 10_000, 10_000)
    assert 1.4 < calibration.ratio("claude", "claude-opus-4-6") < 1.6
    assert calibration.ratio("other", "claude-opus-4-6") == 1.0  # per upstream


def test_a_100k_budget_is_62_5k_of_the_proxys_tokens_at_a_ratio_of_1_6() -> None:
    assert calibrated_limit(100_000, 1.6) == 62_500


def test_ratios_are_bounded_and_tiny_requests_teach_nothing() -> None:
    calibration = Calibration()
    calibration.observe("u", "claude-x", 10, 1000)
    assert calibration.ratio("u", "claude-x") == 1.0
    calibration.observe("u", "claude-x", 1000, 100_000)
    assert calibration.ratio("u", "claude-x") == MAX_RATIO
    calibration.observe("v", "claude-x", 1000, 1)
    assert calibration.ratio("v", "claude-x") == MIN_RATIO


def test_seeds_from_config_start_the_ratio_and_learning_moves_from_there() -> None:
    calibration = Calibration({"claude": {"claude-opus": 1.6}})
    assert calibration.ratio("claude", "claude-opus-4-6") == 1.6
    calibration.observe("claude", "claude-opus-4-6", 1000, 1000)
    assert 1.0 < calibration.ratio("claude", "claude-opus-4-6") < 1.6
    assert ("claude", "claude-opus", calibration.ratio("claude", "claude-opus-4-6")) in list(
        calibration.items()
    )


def test_the_table_is_bounded() -> None:
    calibration = Calibration()
    for n in range(MAX_ENTRIES + 10):
        calibration.observe(f"u{n}", "claude-x", 1000, 1500)
    assert len(list(calibration.items())) == MAX_ENTRIES


def test_a_seed_for_a_family_covers_its_longer_families_until_they_learn() -> None:
    calibration = Calibration({"claude": {"claude": 1.5}})
    assert calibration.ratio("claude", "claude-opus-4-6") == 1.5
    calibration.observe("claude", "claude-opus-4-6", 1000, 2000)
    assert 1.5 < calibration.ratio("claude", "claude-opus-4-6") < 2.0  # smoothed from the seed
    assert calibration.ratio("claude", "claude-haiku-4-5") == 1.5
