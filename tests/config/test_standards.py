"""Each upstream says what it speaks of the context standards: a default per known base URL, bounded ratios."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from history_proxy.config.models import UpstreamConfig


@pytest.mark.parametrize(
    ("base_url", "mode"),
    [
        ("https://api.anthropic.com/v1", "native"),
        ("https://API.Anthropic.com/v1", "native"),
        ("http://127.0.0.1:4141/v1", "emulate"),
        ("https://api.example-vendor.com/anthropic/v1", "emulate"),
        ("mock://local", "emulate"),
    ],
)
def test_the_default_mode_follows_the_base_url(base_url: str, mode: str) -> None:
    assert UpstreamConfig(base_url=base_url, api="anthropic").context_management_mode == mode


def test_a_mode_set_wins_over_the_default() -> None:
    upstream = UpstreamConfig(base_url="https://api.anthropic.com/v1", context_management="strip")
    assert upstream.context_management_mode == "strip"


def test_an_unknown_mode_and_an_unbounded_ratio_are_config_errors() -> None:
    with pytest.raises(ValidationError, match="native"):
        UpstreamConfig(base_url="http://x/v1", context_management="honour")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match=r"claude: must be between 0\.5 and 3\.0"):
        UpstreamConfig(base_url="http://x/v1", token_ratios={"claude": 7.0})
