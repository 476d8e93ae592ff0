"""One truth for the config: `history-proxy schema` accepts what `check` accepts and rejects what it rejects,
and the YAML reader reports duplicate keys and broken constructs where they are."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from history_proxy.config.loading import ConfigError, json_schema, load_config, parse_config
from history_proxy.filters import FILTER_TYPES

REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted(p for p in (REPO / "config").rglob("*.yaml") if not p.is_symlink())
ENV = {
    "OPENAI_API_KEY": "k",
    "TEAM_A_KEY": "ka",
    "GATEWAY_KEY": "kg",
    "REDIS_URL": "redis://127.0.0.1:6379/0",
}
VALIDATOR = jsonschema.Draft202012Validator(json_schema())

BASE: dict[str, Any] = {"upstreams": {"main": {"base_url": "mock://"}}}
# Beside each repository config: variants that check accepts and variants it rejects, each a change to BASE.
ACCEPTED: list[dict[str, Any]] = [
    {"upstreams": {"main": {"base_url": "mock://", "pricing": "openai"}}},
    {"upstreams": {"main": {"base_url": "https://x/v1", "pricing": {"preset": "anthropic", "ttl_s": 3600}}}},
    {"upstreams": {"main": {"base_url": "mock://", "api": "anthropic", "status_retries": "client"}}},
    {"policies": {"roles": {"w": [{"type": "token_limiter", "limit": "80%"}]}}},
    {"policies": {"roles": {"w": {"mode": "shadow", "filters": [{"type": "worker_view"}]}}}},
    {"policies": {"tenants": {"t": [{"type": "remove_regex", "remove": ["x"]}]}}},
    {"cache_control": {"last_n_messages": 3, "ttl": "1h"}},
    {"summary_cache": {"backend": "redis", "url": "redis://h:6379/0"}},
    {"limits": {"max_concurrent": 8, "surface_memo_messages": 0}},
    {"trusted_proxies": ["10.0.0.0/8"], "context_windows": {"my-*": 32000}},
]
REJECTED: list[dict[str, Any]] = [
    {"upstreams": {}},
    {"upstreams": {"main": {"base_url": "ftp://x"}}},
    {"upstreams": {"main": {"base_url": "mock://", "pricing": "azure"}}},
    {"upstreams": {"main": {"base_url": "mock://", "retries": 11}}},
    {"upstreams": {"main": {"base_url": "mock://", "colour": "blue"}}},
    {"policies": {"roles": {"w": [{"type": "no_such_filter"}]}}},
    {"policies": {"roles": {"w": [{"type": "last_n_observations", "n": 0}]}}},
    {"policies": {"roles": {"w": [{"type": "last_n_observations"}]}}},
    {"policies": {"roles": {"w": [{"n": 3}]}}},
    {"policies": {"roles": {"w": {"mode": "later", "filters": []}}}},
    {"cache_control": {"last_n_messages": 3, "ttl": "2h"}},
    {"limits": {"max_body_bytes": 0}},
    {"auth": {"keys": [{"key": "", "tenant": "t"}]}},
    {"on_filter_error": "ignore"},
    {"spare": 1},
]
# What JSON Schema cannot say: names that must refer to other parts of the file. check rejects these.
CROSS_REFERENCES: list[dict[str, Any]] = [
    {"identity": {"default_role": "nobody"}, "policies": {"roles": {"w": [{"type": "worker_view"}]}}},
    {"routes": [{"model": "x", "upstream": "nowhere"}]},
    {"auth": {"keys": [{"key": "k", "tenant": "t", "upstreams": ["nowhere"]}]}},
    {"admin": {"tenants": ["ops"]}},
]


def merged(change: dict[str, Any]) -> dict[str, Any]:
    return {**copy.deepcopy(BASE), **change}


def check_accepts(document: Any) -> bool:
    try:
        parse_config(document, env=ENV)
    except ConfigError:
        return False
    return True


def schema_accepts(document: Any) -> bool:
    return VALIDATOR.is_valid(document)


def test_the_examples_cover_every_filter_type() -> None:
    examples = {p.stem for p in (REPO / "config" / "examples").glob("*.yaml")}
    assert set(FILTER_TYPES) <= examples


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(REPO)))
def test_schema_and_check_agree_on_every_config_in_the_repository(path: Path) -> None:
    load_config(path, env=ENV)  # check accepts it ...
    document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in VALIDATOR.iter_errors(document)]
    assert errors == []  # ... and so does the schema


@pytest.mark.parametrize("change", ACCEPTED, ids=str)
def test_schema_accepts_what_check_accepts(change: dict[str, Any]) -> None:
    document = merged(change)
    assert check_accepts(document)
    assert schema_accepts(document)


@pytest.mark.parametrize("change", REJECTED, ids=str)
def test_schema_rejects_what_check_rejects(change: dict[str, Any]) -> None:
    document = merged(change)
    assert not check_accepts(document)
    assert not schema_accepts(document)


@pytest.mark.parametrize("change", CROSS_REFERENCES, ids=str)
def test_check_also_rejects_references_to_names_the_file_does_not_define(change: dict[str, Any]) -> None:
    assert not check_accepts(merged(change))


def example_step(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A filter's example config and the step of it that uses the filter."""
    example = yaml.safe_load((REPO / "config" / "examples" / f"{name}.yaml").read_text(encoding="utf-8"))
    chains = [c for c in example["policies"].get("roles", {}).values() if isinstance(c, list)]
    return example, next(f for chain in chains for f in chain if f.get("type") == name)


# custom: its parameters belong to the class it loads, which only check can import
@pytest.mark.parametrize("name", [n for n in FILTER_TYPES if n != "custom"])
def test_each_filter_with_an_unknown_parameter_is_rejected_by_both(name: str) -> None:
    example, step = example_step(name)
    document = {**example, "policies": {"roles": {"r": [{**step, "surplus": 1}]}}}
    assert not check_accepts(document)
    assert not schema_accepts(document)


GENERATED_VALUES: list[Any] = [-1, 0, 1, 2.5, "80%", "x", None, True, [], {}]


def known_difference(step: dict[str, Any], key: str) -> bool:
    """Where the schema is looser than check: ``step`` may not exceed ``window_size`` (one field bounded
    by another is not expressible per field)."""
    return step.get("type") == "sliding_window" and key in ("window_size", "step")


@pytest.mark.parametrize("name", [n for n in FILTER_TYPES if n != "custom"])
def test_schema_and_check_agree_on_every_parameter_of_every_filter_set_to_odd_values(name: str) -> None:
    example, step = example_step(name)
    disagreements = []
    for key in [k for k in step if k != "type"] or ["type"]:
        for value in GENERATED_VALUES:
            document = {**example, "policies": {"roles": {"r": [{**step, key: value}]}}}
            if check_accepts(document) != schema_accepts(document) and not known_difference(step, key):
                disagreements.append(f"{key}: {value!r} (check accepts: {check_accepts(document)})")
    assert disagreements == []


def test_a_number_or_a_boolean_from_the_environment_is_valid_as_written() -> None:
    document = merged(
        {
            "upstreams": {
                "main": {"base_url": "mock://", "retries": "${RETRIES}", "mock_when_no_key": "${MOCK:-true}"}
            },
            "policies": {"roles": {"w": [{"type": "last_n_observations", "n": "${KEEP_OBSERVATIONS:-5}"}]}},
        }
    )
    parse_config(document, env={"RETRIES": "3"})  # check, after ${VAR} is read
    assert schema_accepts(document)  # the schema, on the file as written
    assert not schema_accepts(merged({"upstreams": {"main": {"base_url": "mock://", "retries": "$RETRIES"}}}))


def located(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    return caught.value.errors


def test_a_duplicate_key_is_an_error_naming_both_lines(tmp_path: Path) -> None:
    errors = located(
        tmp_path,
        "upstreams:\n  m: {base_url: 'mock://'}\npolicies:\n  roles:\n"
        "    worker: [{type: passthrough}]\n    manager: []\n    worker: [{type: worker_view}]\n",
    )
    assert len(errors) == 1
    assert errors[0].startswith("line 7: duplicate key 'worker' (first at line 5)")


def test_an_unterminated_quote_is_reported_where_it_opened(tmp_path: Path) -> None:
    text = (
        'upstreams:\n  m:\n    base_url: "mock://\n    retries: 2\nroutes: []\nidentity:\n  default_role: x\n'
    )
    (error,) = located(tmp_path, text)
    assert error.startswith("line 3, column 15: not valid YAML: while scanning a quoted scalar")
    assert "noticed at line" in error


def test_yaml_booleans_are_not_numbers_nor_numbers_booleans(tmp_path: Path) -> None:
    errors = located(
        tmp_path,
        "upstreams: {m: {base_url: 'mock://', retries: yes}}\n"
        "policies: {roles: {w: [{type: last_n_observations, n: on}, {type: worker_view, include_global: 1}]}}\n",
    )
    assert errors == [
        "upstreams.m.retries: must be a number, not true",
        "policies.roles.w[0].n: must be a number, not true",
        "policies.roles.w[1].include_global: must be true or false, not 1",
    ]


def test_check_lists_every_error_in_one_pass_bad_references_included(tmp_path: Path) -> None:
    errors = located(
        tmp_path,
        "upstreams:\n  m: {base_url: 'mock://', retries: 99}\n"
        "routes:\n  - {model: a, upstream: nowhere}\n  - {model: b, upstream: m, fallbacks: [gone]}\n"
        "policies:\n  roles:\n    worker: [{type: last_n_observations, n: 0}]\n",
    )
    assert errors[0] == "upstreams.m.retries: must be <= 10"
    assert "'nowhere'" in errors[1] and "'gone'" in errors[1]
    assert errors[2] == "policies.roles.worker[0].n: must be >= 1"
