"""Prompt-cache pricing (issue 18): the presets, the config, and what a sequence of requests costs."""

from __future__ import annotations

from pathlib import Path

import pytest

from history_proxy.config.loading import ConfigError, parse_config
from history_proxy.config.models import UpstreamConfig
from history_proxy.core.cost import ANTHROPIC, OPENAI, CacheSimulator, Pricing
from history_proxy.filters.base import Filter


def test_openai_bills_cached_reads_in_128_token_blocks_from_1024_tokens() -> None:
    assert OPENAI.cached(1023) == 0
    assert OPENAI.cached(1024) == 1024
    assert OPENAI.cached(1151) == 1024
    assert OPENAI.cached(1152) == 1152
    # 2000 tokens of which 1100 repeat a cached prefix: 1024 read at 0.1, 976 at the full price
    assert OPENAI.cost(2000, 1100) == pytest.approx(1024 * 0.1 + 976 * 1.0)


def test_anthropic_bills_writes_at_1_25_and_reads_at_0_1() -> None:
    assert ANTHROPIC.cost(3000, 2000) == pytest.approx(2000 * 0.1 + 1000 * 1.25)
    assert ANTHROPIC.cost(3000, 0) == pytest.approx(3000 * 1.25)


def test_a_request_under_min_tokens_is_neither_read_nor_written() -> None:
    assert ANTHROPIC.cost(900, 800) == 900.0
    assert OPENAI.cost(900, 800) == 900.0


def test_the_simulator_reads_the_longest_prefix_of_any_live_earlier_request() -> None:
    sim = CacheSimulator(ANTHROPIC)
    first = sim.send(["a", "b"], [1000, 500], 1500)
    assert (first.prefix_tokens, first.cost) == (0, 1500 * 1.25)
    sim.send(["x"], [2000], 2000)  # another prefix in between does not evict the first
    third = sim.send(["a", "b", "c"], [1000, 500, 100], 1600)
    assert third.prefix_tokens == 1500
    assert third.cost == pytest.approx(1500 * 0.1 + 100 * 1.25)


def test_the_simulator_forgets_a_prefix_unused_for_longer_than_the_ttl() -> None:
    sim = CacheSimulator(Pricing(ttl_s=300))
    sim.send(["a"], [2000], 2000, at=0.0)
    assert sim.send(["a", "b"], [2000, 10], 2010, at=301.0).prefix_tokens == 0
    assert sim.send(["a", "b", "c"], [2000, 10, 10], 2020, at=400.0).prefix_tokens == 2010


def test_an_upstream_names_a_preset_or_overrides_its_numbers() -> None:
    assert (
        UpstreamConfig.model_validate({"base_url": "http://x", "pricing": "anthropic"}).price_model
        == ANTHROPIC
    )
    custom = UpstreamConfig.model_validate(
        {"base_url": "http://x", "pricing": {"preset": "anthropic", "ttl_s": 3600, "write": 2.0}}
    )
    assert (custom.price_model.write, custom.price_model.ttl_s, custom.price_model.read) == (2.0, 3600, 0.1)


def test_without_pricing_an_upstream_taking_cache_marks_is_priced_as_anthropic() -> None:
    assert UpstreamConfig(base_url="http://x", cache_control=True).price_model == ANTHROPIC
    assert UpstreamConfig(base_url="http://x").price_model == OPENAI


def test_an_unknown_preset_is_a_located_config_error() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config({"upstreams": {"a": {"base_url": "mock://", "pricing": "azure"}}})
    assert "upstreams.a.pricing" in str(raised.value)


def test_the_compaction_only_config_is_the_default_worker_chain_without_its_view() -> None:
    """docs/cost.md measures both; they must not drift apart."""
    from history_proxy.config.loading import load_config
    from history_proxy.config.models import DEFAULT_CONFIG_PATH

    def compaction(path: Path) -> list[Filter]:
        policy = load_config(path, env={}).policies.roles["worker"]
        filters = policy if isinstance(policy, list) else policy.filters
        return [f for f in filters if f.type_name not in {"worker_view", "orchestrator_view", "manager_view"}]

    assert compaction(Path(__file__).resolve().parents[2] / "config" / "compaction_only.yaml") == compaction(
        DEFAULT_CONFIG_PATH
    )
