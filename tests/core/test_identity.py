"""history_proxy/core/identity.py: who is calling, from headers and the proxy key."""

from __future__ import annotations

from typing import Any

import pytest

from history_proxy.config.loading import parse_config
from history_proxy.config.models import Config
from history_proxy.core.identity import Identity, bearer_token
from history_proxy.errors import AuthError, InvalidRequestError
from history_proxy.server.caller import resolve_identity

MOCK = {"mock": {"base_url": "mock://"}}


ROLES = {"roles": {"worker": [{"type": "passthrough"}], "manager": [{"type": "passthrough"}]}}


def config(**extra: Any) -> Config:
    return parse_config({"upstreams": MOCK, "policies": ROLES, **extra}, env={})


def keyed() -> Config:
    return config(auth={"keys": [{"key": "key-a", "tenant": "team-a"}, {"key": "key-b", "tenant": "team-b"}]})


def test_role_agent_and_phase_come_from_the_default_headers() -> None:
    headers = {"x-agent-role": "worker", "x-agent-name": "coder-1", "x-agent-phase": "2"}
    assert resolve_identity(config(), headers) == Identity(
        role="worker", agent="coder-1", phase="2", tenant=None
    )


def test_without_a_role_header_the_default_role_applies_with_a_note() -> None:
    assert resolve_identity(config(), {}) == Identity(role="default", notes=("identity:role_defaulted",))
    assert resolve_identity(config(identity={"default_role": "worker"}), {}).role == "worker"


def test_a_role_the_config_does_not_name_gets_the_default_roles_chain_with_a_note() -> None:
    identity = resolve_identity(config(), {"x-agent-role": "Reviewer"})
    assert identity.role == "default"
    assert identity.notes == ("identity:role_unknown:Reviewer",)
    assert identity.role_sent == "Reviewer"


@pytest.mark.parametrize("sent", ["Worker", "WORKER", " worker", "wor ker", "Wor-ker"])
def test_a_role_differing_only_by_case_or_spacing_is_matched_with_a_note(sent: str) -> None:
    identity = resolve_identity(config(), {"x-agent-role": sent})
    assert identity.role == "worker"
    if sent.strip() != "worker":
        assert identity.notes == (f"identity:role_matched:{sent.strip()}",)


def test_a_loose_match_to_two_configured_roles_is_not_guessed() -> None:
    twins = config(policies={"roles": {"code_reviewer": [], "code-reviewer": []}})
    identity = resolve_identity(twins, {"x-agent-role": "Code Reviewer"})
    assert identity.role == "default"
    assert identity.notes == ("identity:role_unknown:Code Reviewer",)


def test_the_default_role_is_known_even_without_a_chain_of_its_own() -> None:
    assert resolve_identity(config(), {"x-agent-role": "default"}).notes == ()


def test_a_blank_header_counts_as_missing() -> None:
    identity = resolve_identity(config(), {"x-agent-role": "  ", "x-agent-name": ""})
    assert identity.role == "default"
    assert identity.agent is None


def test_header_names_are_configurable() -> None:
    custom = config(identity={"role_header": "X-Role", "agent_header": "X-Who", "phase_header": "X-Step"})
    identity = resolve_identity(
        custom, {"x-role": "manager", "x-who": "lead", "x-step": "1", "x-agent-role": "worker"}
    )
    assert identity == Identity(role="manager", agent="lead", phase="1")


def test_values_are_trimmed() -> None:
    assert resolve_identity(config(), {"x-agent-role": " worker "}).role == "worker"


@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("x-agent-role", "worker\nX-Injected: 1"),
        ("x-agent-name", "a" * 129),
        ("x-agent-phase", "1\x00"),
        ("x-agent-name", "coder\x1b[2J"),
    ],
)
def test_a_bad_header_value_is_a_400_naming_the_header(header: str, value: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        resolve_identity(config(), {header: value})
    assert caught.value.status_code == 400
    assert caught.value.code == "invalid_header"
    assert caught.value.param is not None and caught.value.param.lower() == header


def test_a_header_value_of_128_safe_characters_is_accepted() -> None:
    name = "agent_1.team-a:worker@host/x+y " * 4
    assert resolve_identity(config(), {"x-agent-name": name[:128]}).agent == name[:128].strip()


def test_a_proxy_key_selects_its_tenant() -> None:
    assert resolve_identity(keyed(), {"authorization": "Bearer key-b"}).tenant == "team-b"
    assert resolve_identity(keyed(), {"authorization": "bearer key-a"}).tenant == "team-a"


@pytest.mark.parametrize(
    "headers",
    [{}, {"authorization": "Bearer "}, {"authorization": "Basic a2V5LWE="}, {"authorization": "key-a"}],
)
def test_a_missing_proxy_key_is_a_401(headers: dict[str, str]) -> None:
    with pytest.raises(AuthError, match="missing proxy key") as caught:
        resolve_identity(keyed(), headers)
    assert caught.value.status_code == 401


def test_an_unknown_proxy_key_is_a_401_that_does_not_echo_it() -> None:
    with pytest.raises(AuthError) as caught:
        resolve_identity(keyed(), {"authorization": "Bearer key-c-guess"})
    assert caught.value.status_code == 401
    assert "key-c-guess" not in caught.value.message


def test_an_open_proxy_lets_any_authorization_through_without_a_tenant() -> None:
    assert resolve_identity(config(), {"authorization": "Bearer sk-client"}).tenant is None
    assert resolve_identity(config(), {}).tenant is None


def test_bearer_token_reads_only_the_bearer_scheme() -> None:
    assert bearer_token({"authorization": "Bearer abc"}) == "abc"
    assert bearer_token({"authorization": "BEARER  abc "}) == "abc"
    assert bearer_token({"authorization": "Token abc"}) is None
    assert bearer_token({}) is None


@pytest.mark.parametrize(
    "name", ["Senior Researcher (weather, EU)", "coder#1", "Weather agent!", "<b>x</b>", "1;drop", "CoDeR"]
)
def test_any_printable_text_is_an_agent_name_matched_as_sent(name: str) -> None:
    assert resolve_identity(config(), {"x-agent-name": name}).agent == name


def test_a_utf8_header_value_is_read_as_utf8() -> None:
    sent = "Ärztin-€".encode().decode("latin-1")  # how HTTP servers hand header bytes over
    assert resolve_identity(config(), {"x-agent-name": sent}).agent == "Ärztin-€"
