"""history_proxy/config/models.py: strict keys, located errors, ${VAR} interpolation, routes, chains,
no secrets shown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from history_proxy.config.loading import ConfigError, json_schema, load_config, parse_config, summary
from history_proxy.config.models import DEFAULT_CONFIG_PATH, Config
from history_proxy.filters import FILTER_TYPES

SECRET = "sk-live-0123456789abcdefSECRET"
MOCK = {"mock": {"base_url": "mock://"}}


def errors_of(raw: Any, env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_config(raw, env=env or {})
    return caught.value.errors


def with_policies(**policies: Any) -> dict[str, Any]:
    return {"upstreams": MOCK, "policies": policies}


# --- a valid config ------------------------------------------------------------------------------


def test_the_smallest_config_is_one_upstream_and_everything_else_defaults() -> None:
    config = parse_config({"upstreams": MOCK}, env={})
    assert config.default_upstream == "mock"
    assert config.identity.default_role == "default"
    assert config.identity.completion_tools == ["final_answer", "submit", "task_complete"]
    assert config.limits.max_body_bytes == 32 * 1024 * 1024
    assert config.on_filter_error == "reject"
    assert config.cache_control is None
    assert config.chain("worker", None) == []


def test_the_default_config_file_loads_without_any_environment() -> None:
    assert isinstance(load_config(DEFAULT_CONFIG_PATH, env={}), Config)


def test_a_yaml_file_loads_with_a_cache_control_slot(tmp_path: Path) -> None:
    path = tmp_path / "proxy.yaml"
    path.write_text(
        "upstreams:\n  claude: {base_url: 'https://api.anthropic.com/v1', cache_control: true}\n"
        "cache_control: {last_n_messages: 3}\n",
        encoding="utf-8",
    )
    config = load_config(path, env={})
    assert config.upstreams["claude"].cache_control is True
    assert config.cache_control is not None and config.cache_control.last_n_messages == 3


# --- unknown keys ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "location"),
    [
        ({"upstreams": MOCK, "extra": 1}, "extra"),
        ({"upstreams": {"mock": {"base_url": "mock://", "timeout": 3}}}, "upstreams.mock.timeout"),
        (
            {"upstreams": MOCK, "routes": [{"model": "*", "upstream": "mock", "weight": 1}]},
            "routes[0].weight",
        ),
        ({"upstreams": MOCK, "identity": {"role": "x"}}, "identity.role"),
        (
            {"upstreams": MOCK, "auth": {"keys": [{"key": "k", "tenant": "t", "scope": "all"}]}},
            "auth.keys[0].scope",
        ),
        ({"upstreams": MOCK, "limits": {"max_body": 1}}, "limits.max_body"),
        ({"upstreams": MOCK, "policies": {"agents": {}}}, "policies.agents"),
        (with_policies(roles={"worker": [{"type": "passthrough", "n": 1}]}), "policies.roles.worker[0].n"),
        (with_policies(tenants={"a": [{"type": "passthrough", "x": 1}]}), "policies.tenants.a[0].x"),
        (with_policies(**{"global": [{"type": "passthrough", "x": 1}]}), "policies.global[0].x"),
        ({"upstreams": MOCK, "cache_control": {"last_n": 2}}, "cache_control.last_n"),
    ],
)
def test_unknown_keys_are_rejected_at_every_level_with_their_location(
    raw: dict[str, Any], location: str
) -> None:
    assert errors_of(raw) == [f"{location}: unknown key"]


def test_every_error_is_reported_at_once() -> None:
    raw = {"upstreams": {"mock": {"base_url": "mock://", "a": 1}}, "b": 2, "limits": {"read_timeout_s": 0}}
    assert sorted(errors_of(raw)) == [
        "b: unknown key",
        "limits.read_timeout_s: must be > 0",
        "upstreams.mock.a: unknown key",
    ]


# --- filter parameters ---------------------------------------------------------------------------


def test_a_bad_filter_parameter_is_located_in_its_chain() -> None:
    raw = with_policies(
        roles={"worker": [{"type": "passthrough"}, {"type": "cache_control", "last_n_messages_offset": -1}]}
    )
    assert errors_of(raw) == ["policies.roles.worker[1].last_n_messages_offset: must be >= 0"]


@pytest.mark.skipif("last_n_observations" not in FILTER_TYPES, reason="last_n_observations not registered")
def test_the_spec_example_error_names_the_chain_position_and_the_field() -> None:
    raw = with_policies(roles={"worker": [{"type": "worker_view"}, {"type": "last_n_observations", "n": 0}]})
    [error] = errors_of(raw)
    assert error.startswith("policies.roles.worker[1].n: must be ")


def required_parameters() -> list[tuple[str, str]]:
    return [
        (type_name, field)
        for type_name, model in FILTER_TYPES.items()
        for field, info in model.model_fields.items()
        if field != "type" and info.is_required()
    ]


def test_a_missing_required_filter_parameter_is_named() -> None:
    if not required_parameters():
        pytest.skip("no registered filter has a required parameter")
    type_name, field = required_parameters()[0]
    assert f"policies.roles.worker[0].{field}: required" in errors_of(
        with_policies(roles={"worker": [{"type": type_name}]})
    )


def test_an_unknown_filter_type_lists_the_known_ones() -> None:
    [error] = errors_of(with_policies(roles={"worker": [{"type": "compress_everything"}]}))
    assert error.startswith(
        "policies.roles.worker[0]: unknown filter type 'compress_everything'; expected one of "
    )
    for name in FILTER_TYPES:
        assert name in error


def test_a_filter_without_a_type_is_rejected() -> None:
    assert errors_of(with_policies(roles={"worker": [{"n": 3}]})) == [
        "policies.roles.worker[0]: each filter needs a 'type'"
    ]


# --- ${VAR} ---------------------------------------------------------------------------------------


def test_a_missing_environment_variable_is_an_error_naming_it() -> None:
    raw = {"upstreams": {"openai": {"base_url": "https://api.openai.com/v1", "api_key": "${OPENAI_API_KEY}"}}}
    assert errors_of(raw, env={"OTHER": "x"}) == [
        "upstreams.openai.api_key: environment variable OPENAI_API_KEY is not set"
    ]


def test_variables_are_replaced_inside_strings_and_defaults_apply_when_unset_or_empty() -> None:
    raw = {
        "upstreams": {
            "a": {"base_url": "https://${HOST}/v1", "api_key": "${KEY:-fallback}"},
            "b": {"base_url": "${B_URL:-mock://}", "api_key": "${EMPTY:-used}"},
        }
    }
    config = parse_config(raw, env={"HOST": "llm.internal", "EMPTY": ""})
    assert config.upstreams["a"].base_url == "https://llm.internal/v1"
    assert config.upstreams["a"].key == "fallback"
    assert config.upstreams["b"].is_mock
    assert config.upstreams["b"].key == "used"


def test_a_set_variable_wins_over_its_default() -> None:
    raw = {"upstreams": {"a": {"base_url": "mock://", "api_key": "${KEY:-fallback}"}}}
    assert parse_config(raw, env={"KEY": "real"}).upstreams["a"].key == "real"


def test_an_empty_api_key_counts_as_unset() -> None:
    raw = {"upstreams": {"a": {"base_url": "https://x.test/v1", "api_key": "${KEY:-}"}}}
    assert parse_config(raw, env={}).upstreams["a"].key is None


# --- routes ---------------------------------------------------------------------------------------


def routed() -> Config:
    return parse_config(
        {
            "upstreams": {
                "openai": {"base_url": "mock://"},
                "anthropic": {"base_url": "mock://"},
                "spare": {"base_url": "mock://"},
            },
            "routes": [
                {"model": "claude-*", "upstream": "anthropic", "fallbacks": ["spare"]},
                {"model": "claude-3*", "upstream": "openai"},
                {"model": "gpt-4o-??", "upstream": "spare"},
            ],
        },
        env={},
    )


def test_the_first_route_whose_glob_matches_the_model_wins_with_its_fallbacks() -> None:
    config = routed()
    assert config.route("claude-3-5-sonnet") == ["anthropic", "spare"]
    assert config.route("gpt-4o-v2") == ["spare"]


def test_a_model_no_route_matches_goes_to_the_first_upstream() -> None:
    config = routed()
    assert config.route("gpt-4o") == ["openai"]
    assert config.route("CLAUDE-3") == ["openai"]  # globs are case-sensitive
    assert config.route("") == ["openai"]


def test_a_route_naming_an_unknown_upstream_is_rejected() -> None:
    raw = {"upstreams": MOCK, "routes": [{"model": "*", "upstream": "mock", "fallbacks": ["gone"]}]}
    [error] = errors_of(raw)
    assert error.startswith("routes: ") and "'gone'" in error and "mock" in error


def test_at_least_one_upstream_is_required() -> None:
    assert errors_of({"upstreams": {}}) == ["upstreams: name at least one upstream"]
    assert errors_of({}) == ["upstreams: required"]


def test_an_upstream_url_needs_a_scheme() -> None:
    assert errors_of({"upstreams": {"a": {"base_url": "api.openai.com"}}}) == [
        "upstreams.a.base_url: must start with http://, https:// or mock://"
    ]


# --- chains ---------------------------------------------------------------------------------------


def test_the_chain_runs_global_then_tenant_then_role_with_locations() -> None:
    config = parse_config(
        with_policies(
            **{
                "global": [{"type": "passthrough"}],
                "tenants": {"team-a": [{"type": "passthrough"}, {"type": "cache_control"}]},
                "roles": {"worker": [{"type": "passthrough"}], "manager": [{"type": "cache_control"}]},
            }
        ),
        env={},
    )
    located = config.chain("worker", "team-a")
    assert [at for at, _ in located] == [
        "policies.global[0]",
        "policies.tenants.team-a[0]",
        "policies.tenants.team-a[1]",
        "policies.roles.worker[0]",
    ]
    assert [f.type_name for _, f in located] == ["passthrough", "passthrough", "cache_control", "passthrough"]
    assert [at for at, _ in config.chain("worker", None)] == [
        "policies.global[0]",
        "policies.roles.worker[0]",
    ]
    assert [at for at, _ in config.chain("nobody", "team-b")] == ["policies.global[0]"]


# --- secrets --------------------------------------------------------------------------------------


def test_secrets_never_appear_in_errors_or_the_summary() -> None:
    env = {"KEY": SECRET}
    valid = {
        "upstreams": {"openai": {"base_url": "https://api.openai.com/v1", "api_key": "${KEY}"}},
        "auth": {"keys": [{"key": "${KEY}", "tenant": "team-a"}]},
    }
    config = parse_config(valid, env=env)
    assert config.upstreams["openai"].key == SECRET
    assert SECRET not in summary(config)
    assert SECRET not in repr(config)
    assert summary(config).startswith("ok: 1 upstream(s) (openai)")

    invalid = {
        "upstreams": {"openai": {"base_url": "https://api.openai.com/v1", "api_key": ["${KEY}"]}},
        "auth": {"keys": [{"key": "${KEY}", "tenant": "team-a", "oops": "${KEY}"}]},
        "limits": {"max_body_bytes": "${KEY}"},
    }
    with pytest.raises(ConfigError) as caught:
        parse_config(invalid, env=env)
    assert len(caught.value.errors) == 3
    assert SECRET not in str(caught.value)
    assert all(SECRET not in line for line in caught.value.errors)


def test_an_empty_proxy_key_is_rejected() -> None:
    assert errors_of({"upstreams": MOCK, "auth": {"keys": [{"key": "", "tenant": "t"}]}}) == [
        "auth.keys[0].key: must not be empty"
    ]


# --- files and schema -----------------------------------------------------------------------------


def test_an_unreadable_file_and_invalid_yaml_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("upstreams: {mock: [\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(bad)
    assert caught.value.errors[0].startswith("line ")
    assert "not valid YAML" in caught.value.errors[0]


def test_a_document_that_is_not_a_mapping_is_rejected() -> None:
    assert errors_of(["upstreams"]) == ["(top level): must be a mapping"]


def test_the_json_schema_describes_the_file_with_its_yaml_names() -> None:
    schema = json_schema()
    assert {"upstreams", "routes", "identity", "auth", "limits", "policies", "cache_control"} <= set(
        schema["properties"]
    )
    policies = schema["$defs"]["PoliciesConfig"]["properties"]
    assert "global" in policies and "global_" not in policies
