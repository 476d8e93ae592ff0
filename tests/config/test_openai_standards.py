"""Each upstream says which OpenAI context standards it speaks: ``auto`` by its base URL, or said outright."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from history_proxy.config.models import UpstreamConfig


@pytest.mark.parametrize(
    ("base_url", "compaction", "breakpoints"),
    [
        ("https://api.openai.com/v1", "native", "native"),
        ("mock://", "native", "forward"),
        ("http://127.0.0.1:8000/v1", "emulate", "forward"),
        ("https://openrouter.ai/api/v1", "emulate", "forward"),
        ("https://api.openai.com.evil.example/v1", "emulate", "forward"),
    ],
)
def test_auto_modes_follow_the_base_url(base_url: str, compaction: str, breakpoints: str) -> None:
    upstream = UpstreamConfig(base_url=base_url)
    assert (upstream.compaction, upstream.breakpoints) == (compaction, breakpoints)


def test_the_mock_answering_for_openai_without_a_key_takes_no_breakpoints() -> None:
    upstream = UpstreamConfig(base_url="https://api.openai.com/v1", mock_when_no_key=True)
    assert (upstream.compaction, upstream.breakpoints) == ("native", "forward")


def test_a_mode_said_outright_wins_over_the_base_url() -> None:
    upstream = UpstreamConfig(
        base_url="https://api.openai.com/v1", responses_compaction="strip", cache_breakpoints="strip"
    )
    assert (upstream.compaction, upstream.breakpoints) == ("strip", "strip")


def test_an_unknown_mode_is_a_config_error_naming_the_choices() -> None:
    with pytest.raises(ValidationError, match="native"):
        UpstreamConfig(base_url="http://x/v1", responses_compaction="translate")  # type: ignore[arg-type]
