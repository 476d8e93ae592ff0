"""Budgets that know the model: limits written as a share of the request model's context window (issue 18)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from history_proxy.config.loading import ConfigError, parse_config
from history_proxy.core.identity import Identity
from history_proxy.core.tokens import TokenCounters
from history_proxy.core.windows import DEFAULT_WINDOW, output_reserve, window_of
from history_proxy.pipeline.run import Pipeline
from tests.factories import exchange, system, user


def test_the_packaged_table_knows_the_common_families_and_the_first_match_wins() -> None:
    assert window_of("gpt-4o-mini-2024-07-18") == 128_000
    assert window_of("gpt-4-0613") == 8192
    assert window_of("gpt-4.1-mini") == 1_047_576
    assert window_of("claude-sonnet-4-20250514") == 200_000
    assert window_of("my-local-model") is None


def test_the_config_overrides_the_table() -> None:
    assert window_of("gpt-4o", {"gpt-4o*": 64_000}) == 64_000
    assert window_of("my-local-model", {"my-*": 32_768}) == 32_768


def test_the_answer_s_room_comes_from_max_completion_tokens_else_max_tokens() -> None:
    assert output_reserve({"max_completion_tokens": 2000, "max_tokens": 10}) == 2000
    assert output_reserve({"max_tokens": 1000}) == 1000
    assert output_reserve({}) == 0


def run(limit: Any, body: dict[str, Any], windows: dict[str, int] | None = None) -> dict[str, Any]:
    config = parse_config(
        {
            "upstreams": {"main": {"base_url": "mock://"}},
            "policies": {"roles": {"worker": [{"type": "token_limiter", "limit": limit}]}},
            "context_windows": windows or {},
        }
    )
    result = asyncio.run(Pipeline(config, TokenCounters()).run(body, Identity(role="worker"), "main"))
    return result.report


def long_conversation() -> list[Any]:
    messages = [system(), user("fix the build")]
    for k in range(40):
        messages += exchange("bash", output=f"{k}: " + "compiling module ... ok\n" * 40)
    return messages


def test_a_share_limit_is_that_share_of_the_model_s_window_less_the_answer_s_room() -> None:
    report = run("80%", {"model": "gpt-4-0613", "max_tokens": 1000, "messages": long_conversation()})
    assert report["limit"]["limit"] == int(8192 * 0.8) - 1000
    assert report["after"]["tokens"] <= report["limit"]["limit"]


def test_a_share_of_an_unknown_model_uses_the_default_window_and_says_so() -> None:
    report = run("50%", {"model": "my-local-model", "messages": long_conversation()})
    assert report["limit"]["limit"] == DEFAULT_WINDOW // 2
    assert "window:unknown-model" in report["notes"]
    report = run("50%", {"model": "my-local-model", "messages": long_conversation()}, {"my-*": 10_000})
    # the window is known now (a repeated identical call may still be noted as a re-fetch)
    assert report["limit"]["limit"] == 5000
    assert not [note for note in report.get("notes", []) if note.startswith("window:")]


@pytest.mark.parametrize("limit", ["120%", "0%", "eighty percent", 0])
def test_a_limit_that_is_neither_tokens_nor_a_share_is_a_located_config_error(limit: Any) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(
            {
                "upstreams": {"main": {"base_url": "mock://"}},
                "policies": {"roles": {"worker": [{"type": "truncate", "max_tokens": limit}]}},
            }
        )
    assert "policies.roles.worker[0]" in str(raised.value)
