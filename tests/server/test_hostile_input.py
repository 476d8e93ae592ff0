"""Hostile input and secrets: whatever a client sends, it gets a clear 4xx (never a crash), the
upstream URL comes only from the config, and no key or upstream secret leaks through any channel.

Every filter of ``config/examples`` runs here (one role per example chain), so broken input meets
the whole filter library, not just the parser.
"""

from __future__ import annotations

import functools
import hmac
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import respx
import yaml
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from history_proxy import cli
from history_proxy.config.loading import parse_config
from history_proxy.config.models import Config
from history_proxy.core.messages import KNOWN_ROLES, MESSAGE_TYPES, text_of
from history_proxy.server.app import create_app
from history_proxy.server.caller import tenant_for_key
from tests.factories import action, corpus_body, corpus_files, result, system, user
from tests.strategies import PROPERTY_SETTINGS, conversations
from tests.support.asgi_app import serve
from tests.upstream_respx import UPSTREAM_MOCKER

pytestmark = pytest.mark.anyio

MAIN = "https://upstream.test/v1"
UPSTREAM_KEY = "sk-upstreamPLANTED0123456789abcdefXYZ"
PROXY_KEY = "hp-proxy-PLANTED-fedcba9876543210"
ADMIN_KEY = "hp-admin-PLANTED-0011223344556677"
SECRETS = (UPSTREAM_KEY, PROXY_KEY, ADMIN_KEY)
EXAMPLES = Path(__file__).resolve().parents[2] / "config" / "examples"
COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-4o",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}],
}


def example_roles() -> dict[str, Any]:
    """Every role chain of every example config, as ``<example>.<role>``."""
    roles: dict[str, Any] = {}
    for path in sorted(EXAMPLES.glob("*.yaml")):
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        for role, chain in raw.get("policies", {}).get("roles", {}).items():
            roles[f"{path.stem}.{role}"] = chain
    return roles


ROLES = example_roles()


def hostile_config(**extra: Any) -> Config:
    return parse_config(
        {
            "upstreams": {
                "main": {"base_url": MAIN, "api_key": "${UPSTREAM_KEY}", "retries": 0, "cache_control": True}
            },
            "limits": {
                "max_body_bytes": 1_000_000,
                "max_messages": 2_000,
                "connect_timeout_s": 1,
                "read_timeout_s": 1,
            },
            "policies": {"roles": ROLES},
            "cache_control": {"last_n_messages": 2},
            **extra,
        },
        env={"UPSTREAM_KEY": UPSTREAM_KEY},
    )


@dataclass
class Live:
    """One app (every example chain) in a background event loop; its upstream answers 200."""

    portal: BlockingPortal
    client: httpx.AsyncClient
    upstream: respx.MockRouter

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.portal.call(functools.partial(self.client.post, path, **kwargs))

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.portal.call(functools.partial(self.client.get, path, **kwargs))


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    with (
        respx.mock(assert_all_called=False, using=UPSTREAM_MOCKER) as router,
        start_blocking_portal("asyncio") as portal,
    ):
        router.route(host="upstream.test").mock(return_value=httpx.Response(200, json=COMPLETION))
        app = create_app(hostile_config())
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://proxy", timeout=10
        )
        with portal.wrap_async_context_manager(app.router.lifespan_context(app)):
            yield Live(portal, client, router)
            portal.call(client.aclose)


@pytest.fixture
def mocked(live: Live) -> respx.MockRouter:
    """The live app's upstream mock, its calls forgotten: the configured upstream answers 200 to
    anything, and a request to any other host is an error the test sees."""
    live.upstream.reset()
    return live.upstream


def chat(*messages: Any, **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": list(messages or [user("hi")]), **extra}


def error_of(response: httpx.Response) -> dict[str, Any]:
    body: dict[str, dict[str, Any]] = response.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


# --- bodies -------------------------------------------------------------------------------------


def truncated_corpus_body() -> bytes:
    raw = json.dumps(corpus_body(corpus_files()[0].name)).encode()
    return raw[: len(raw) // 2]


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"{",
        b'{"model": "gpt-4o", "messages": [',
        truncated_corpus_body(),
        b'\xef\xbb\xbf{"model": ',
        b"nul",
        b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "\xff\xfe"}]}',
        b'{"model": "gpt-4o", "messages": [], "temperature": 1e999}',
        b'{"model": "gpt-4o", "messages": [], "n": ' + b"9" * 5000 + b"}",
        b"[" * 100_000 + b"]" * 100_000,
        b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "x": '
        + b"[" * 50_000
        + b"]" * 50_000
        + b"}",
    ],
    ids=[
        "empty",
        "open-brace",
        "cut-mid-list",
        "truncated-corpus-body",
        "bom",
        "bare-word",
        "invalid-utf8",
        "infinite-number",
        "5000-digit-integer",
        "nested-100k-deep",
        "nested-field-50k-deep",
    ],
)
def test_malformed_json_is_a_400_saying_what_to_send(live: Live, content: bytes) -> None:
    for path in ("/v1/chat/completions", "/v1/history/preview"):
        answer = live.post(path, content=content, headers={"content-type": "application/json"})
        assert answer.status_code == 400, answer.text
        assert error_of(answer)["code"] == "invalid_json"


WRONG_TYPES = [
    ({"messages": {}}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": [1]}, "messages[0]"),
    ({"messages": [None]}, "messages[0]"),
    ({"messages": [[]]}, "messages[0]"),
    ({"messages": [{}]}, "messages[0].role"),
    ({"messages": [{"role": []}]}, "messages[0].role"),
    ({"messages": [{"role": {"a": 1}}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": 1}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": {"text": "hi"}}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": [1, 2]}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": "hi", "name": 7}]}, "messages[0].name"),
    ({"messages": [{"role": "assistant", "tool_calls": "bash"}]}, "messages[0].tool_calls"),
    ({"messages": [{"role": "assistant", "tool_calls": [1]}]}, "messages[0].tool_calls"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"function": "bash"}]}]}, "messages[0].tool_calls"),
    (
        {
            "messages": [
                {"role": "assistant", "tool_calls": [{"id": 1, "function": {"name": "a", "arguments": "{}"}}]}
            ]
        },
        "messages[0].tool_calls",
    ),
    (
        {
            "messages": [
                {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "a", "arguments": {}}}]}
            ]
        },
        "messages[0].tool_calls",
    ),
    ({"messages": [{"role": "tool", "tool_call_id": 3, "content": "x"}]}, "messages[0].tool_call_id"),
    ({"messages": [{"role": "user", "content": "hi", "tags": "keep_output"}]}, "messages[0].tags"),
    ({"messages": [{"role": "user", "content": "hi", "tags": [1]}]}, "messages[0].tags"),
    ({"messages": [{"role": "user", "content": "hi", "message_type": ["task"]}]}, "messages[0].message_type"),
    ({"messages": [{"role": "user", "content": "hi", "message_type": "bogus"}]}, "messages[0].message_type"),
    ({"messages": [{"role": "user", "content": "hi", "phase_id": [1]}]}, "messages[0].phase_id"),
    ({"messages": [{"role": "user", "content": "hi", "agent": 1}]}, "messages[0].agent"),
    ({"model": 1, "messages": [{"role": "user", "content": "hi"}]}, "model"),
    ({"model": ["gpt-4o"], "messages": [{"role": "user", "content": "hi"}]}, "model"),
]


@pytest.mark.parametrize(
    ("body", "names"), WRONG_TYPES, ids=[f"{n}-{i}" for i, (_, n) in enumerate(WRONG_TYPES)]
)
def test_wrong_types_at_every_level_are_a_400_naming_the_field(
    live: Live, body: dict[str, Any], names: str
) -> None:
    forwarded = live.upstream.calls.call_count
    for role in ("default", "worker_view.worker", "token_limiter.worker", "manager_digest.manager"):
        answer = live.post("/v1/chat/completions", json=body, headers={"x-agent-role": role})
        assert answer.status_code == 400, answer.text
        assert names in error_of(answer)["message"]
    assert live.upstream.calls.call_count == forwarded


async def test_huge_strings_are_served_up_to_the_body_limit_and_413_beyond(mocked: respx.MockRouter) -> None:
    async with serve(hostile_config()) as client:
        fits = await client.post(
            "/v1/chat/completions",
            json=chat(user("word " * 180_000)),
            headers={"x-agent-role": "truncate.worker"},
        )
        too_big = await client.post("/v1/chat/completions", json=chat(user("word " * 250_000)))
    assert fits.status_code == 200
    assert too_big.status_code == 413 and error_of(too_big)["code"] == "payload_too_large"


async def test_more_messages_than_the_limit_is_a_413_before_any_filter_runs(mocked: respx.MockRouter) -> None:
    many = [system(), *[user(f"m{i}") for i in range(2_500)]]
    async with serve(hostile_config()) as client:
        answer = await client.post(
            "/v1/chat/completions", json=chat(*many), headers={"x-agent-role": "worker_view.worker"}
        )
        within = await client.post(
            "/v1/chat/completions",
            json=chat(*many[:1_500]),
            headers={"x-agent-role": "sliding_window.support"},
        )
    assert answer.status_code == 413 and error_of(answer)["code"] == "too_many_messages"
    assert "limits.max_messages" in error_of(answer)["message"]
    assert within.status_code == 200


async def test_a_lone_surrogate_is_forwarded_as_valid_json(mocked: respx.MockRouter) -> None:
    async with serve(hostile_config()) as client:
        answer = await client.post(
            "/v1/chat/completions",
            content=b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "half a pair: \\ud800"}]}',
            headers={"content-type": "application/json"},
        )
        preview = await client.post(
            "/v1/history/preview",
            content=b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "\\udfff"}]}',
            headers={"content-type": "application/json"},
        )
    assert answer.status_code == 200
    sent = mocked.calls.last.request.content
    assert text_of(json.loads(sent)["messages"][0]["content"]) == "half a pair: \ud800"
    assert text_of(json.loads(preview.content)["body"]["messages"][0]["content"]) == "\udfff"
    assert preview.status_code == 200


# --- headers --------------------------------------------------------------------------------------


@pytest.mark.parametrize("header", ["x-agent-role", "x-agent-name", "x-agent-phase"])
@pytest.mark.parametrize(
    "value",
    [
        b"worker\r\nx-injected: 1",
        b"worker\nx",
        b"r" * 129,
        b"a\x00b",
        b"esc\x1b[31m",
        b"del\x7f",
    ],
    ids=["crlf", "lf", "overlong", "nul", "escape", "del"],
)
def test_unsafe_identity_header_values_are_a_400(live: Live, header: str, value: bytes) -> None:
    answer = live.post("/v1/chat/completions", json=chat(), headers=[(header.encode(), value)])
    assert answer.status_code == 400
    assert error_of(answer)["code"] == "invalid_header" and error_of(answer)["param"]


@pytest.mark.parametrize("header", ["x-agent-role", "x-agent-name", "x-agent-phase"])
@pytest.mark.parametrize(
    "value",
    [
        b"Senior Researcher (weather, EU)",
        b"coder#1",
        b"Weather agent!",
        b"caf\xc3\xa9",
        b"<script>",
        b"\xff\xfe",
    ],
    ids=["crewai-role", "hash", "bang", "utf8", "markup", "latin1"],
)
def test_identity_headers_as_people_write_them_are_served(live: Live, header: str, value: bytes) -> None:
    answer = live.post("/v1/chat/completions", json=chat(), headers=[(header.encode(), value)])
    assert answer.status_code == 200


async def test_unknown_roles_are_served_as_the_default_role_and_labels_stay_bounded(
    mocked: respx.MockRouter,
) -> None:
    async with serve(hostile_config()) as client:
        for i in range(30):
            answer = await client.post(
                "/v1/chat/completions", json=chat(), headers={"x-agent-role": f"made-up-{i}"}
            )
            assert answer.status_code == 200
        metrics = (await client.get("/metrics")).text
    roles = {
        sample.labels["role"]
        for family in text_string_to_metric_families(metrics)
        for sample in family.samples
        if "role" in sample.labels
    }
    assert "default" in roles
    assert not any(role.startswith("made-up") for role in roles)


# --- the property: no input makes the proxy answer 500 -----------------------------------------------

_LEAF = (
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
JSON_VALUES = st.recursive(
    _LEAF,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
_IDS = st.sampled_from(["call_1", "call_2", "call_3"])
_CALLS = st.lists(
    st.fixed_dictionaries(
        {
            "id": _IDS,
            "type": st.just("function"),
            "function": st.fixed_dictionaries(
                {
                    "name": st.sampled_from(["bash", "submit", "view_file"]),
                    "arguments": st.sampled_from(["{}", "", "{"]),
                }
            ),
        }
    ),
    max_size=2,
)
_TEXT_PARTS = st.lists(
    st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url"]), "text": st.text(max_size=10)}),
    max_size=2,
)
PLAUSIBLE = {  # well-typed values that may still make no sense where they land
    "role": st.sampled_from(sorted(KNOWN_ROLES)),
    "content": st.text(max_size=30) | st.none() | _TEXT_PARTS,
    "tool_calls": _CALLS,
    "tool_call_id": _IDS,
    "name": st.text(max_size=8),
    "tags": st.lists(st.sampled_from(["keep_output", "remove_output"]), max_size=2),
    "message_type": st.sampled_from(sorted(MESSAGE_TYPES)),
    "phase_id": st.integers(-1, 3) | st.sampled_from(["0", "2", "x"]),
    "agent": st.sampled_from(["alice", "bob", ""]),
    "cache_control": st.just({"type": "ephemeral"}),
}
ANY_FIELD = {key: values | JSON_VALUES for key, values in PLAUSIBLE.items()}
MESSAGES = st.fixed_dictionaries({}, optional=PLAUSIBLE) | st.fixed_dictionaries({}, optional=ANY_FIELD)


@st.composite
def broken_conversation(draw: st.DrawFn) -> list[Any]:
    """A valid conversation with a few messages changed (mostly well-typed), swapped, added or dropped."""
    messages: list[Any] = list(draw(conversations(max_turns=3, max_steps=3)))
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(messages) - 1))
        change = draw(st.sampled_from(["field", "field", "field", "insert", "swap", "drop", "replace"]))
        if change == "field" and isinstance(messages[at], dict):
            key = draw(st.sampled_from(sorted(PLAUSIBLE)))
            values = PLAUSIBLE[key] if draw(st.integers(0, 9)) else JSON_VALUES
            messages[at] = {**messages[at], key: draw(values)}
        elif change == "insert":
            messages.insert(at, draw(MESSAGES))
        elif change == "swap":
            other = draw(st.integers(0, len(messages) - 1))
            messages[at], messages[other] = messages[other], messages[at]
        elif change == "replace":
            messages[at] = draw(MESSAGES | JSON_VALUES)
        elif len(messages) > 1:
            del messages[at]
    return messages


def _encoded(value: Any) -> bytes:
    return json.dumps(value).encode()


BODIES = st.one_of(
    st.fixed_dictionaries(
        {"model": st.sampled_from(["gpt-4o", "gpt-4", "claude-x"]), "messages": broken_conversation()},
        optional={"stream": st.booleans(), "tools": JSON_VALUES},
    ).map(_encoded),
    st.fixed_dictionaries(
        {"messages": broken_conversation()}, optional={"model": JSON_VALUES, "stream": JSON_VALUES}
    ).map(_encoded),
    st.fixed_dictionaries(
        {}, optional={"model": JSON_VALUES, "messages": st.lists(MESSAGES, max_size=5) | JSON_VALUES}
    ).map(_encoded),
    JSON_VALUES.map(_encoded),
    st.binary(max_size=80),
)
_ROLE_VALUES = [role.encode() for role in ROLES] + [b"worker", b"made-up"]
_GARBAGE = st.binary(max_size=40) | st.text(max_size=20).map(lambda s: s.encode())


def _mostly(usual: st.SearchStrategy[bytes], rarely: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    return st.integers(0, 9).flatmap(lambda n: rarely if n == 0 else usual)


HEADERS = st.fixed_dictionaries(
    {b"x-agent-role": st.sampled_from(_ROLE_VALUES)},
    optional={
        b"x-agent-name": _mostly(st.sampled_from([b"alice", b"bob"]), _GARBAGE),
        b"x-agent-phase": _mostly(st.sampled_from([b"0", b"1", b"2", b"x"]), _GARBAGE),
        b"authorization": _GARBAGE,
        b"x-request-id": _GARBAGE,
        b"host": _GARBAGE,
        b"x-forwarded-host": _GARBAGE,
        b"content-type": _GARBAGE,
    },
).map(lambda headers: list(headers.items())) | st.lists(
    st.tuples(st.sampled_from([b"x-agent-role", b"x-agent-name", b"x-agent-phase"]), _GARBAGE), max_size=3
)
PATHS = st.sampled_from(
    ["/v1/chat/completions"] * 4 + ["/v1/history/preview"] * 2 + ["/v1/embeddings", "/admin/reload"]
)


@settings(
    PROPERTY_SETTINGS,
    max_examples=PROPERTY_SETTINGS.max_examples * 2,  # HYPOTHESIS_PROFILE=thorough: 1000
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
@given(path=PATHS, body=BODIES, headers=HEADERS)
def test_no_body_or_header_makes_the_proxy_answer_500(
    live: Live, path: str, body: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    answer = live.post(path, content=body, headers=headers)
    event(f"{path} answered {answer.status_code}")
    assert answer.status_code != 500, answer.text  # a 500 filter_failed names the filter with a bug
    assert answer.status_code < 500 or answer.status_code in (502, 504)
    assert live.get("/healthz").status_code == 200


@st.composite
def odd_but_well_typed(draw: st.DrawFn) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """A conversation broken only in sense (order, pairs, annotations), sent as a known role."""
    messages = [
        {**m, key: draw(PLAUSIBLE[key])} if isinstance(m, dict) and draw(st.integers(0, 4)) == 0 else m
        for m in draw(broken_conversation())
        for key in [draw(st.sampled_from(sorted(PLAUSIBLE)))]
    ]
    messages = [
        m if isinstance(m, dict) and str(m.get("role")) in KNOWN_ROLES else user("x") for m in messages
    ]
    body = {
        "model": draw(st.sampled_from(["gpt-4o", "gpt-4"])),
        "messages": messages,
        "stream": draw(st.booleans()),
    }
    headers = [
        (b"x-agent-role", draw(st.sampled_from(_ROLE_VALUES))),
        (b"x-agent-name", draw(st.sampled_from([b"alice", b"bob"]))),
        (b"x-agent-phase", draw(st.sampled_from([b"0", b"1", b"2"]))),
    ]
    return _encoded(body), headers


@settings(
    PROPERTY_SETTINGS,
    max_examples=PROPERTY_SETTINGS.max_examples * 2,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
@given(request=odd_but_well_typed(), path=st.sampled_from(["/v1/chat/completions", "/v1/history/preview"]))
def test_every_filter_survives_well_typed_nonsense(
    live: Live, request: tuple[bytes, list[tuple[bytes, bytes]]], path: str
) -> None:
    body, headers = request
    answer = live.post(path, content=body, headers=headers)
    event(f"answered {answer.status_code}")
    assert answer.status_code in (200, 400), answer.text  # a 500 filter_failed names the filter with a bug


# --- the upstream URL comes from the config only ---------------------------------------------------


async def test_no_header_or_body_field_can_redirect_the_upstream(mocked: respx.MockRouter) -> None:
    redirecting_headers = {
        "host": "evil.test",
        "x-forwarded-host": "evil.test",
        "x-forwarded-proto": "http",
        "x-forwarded-port": "8080",
        "forwarded": "host=evil.test;proto=http",
        "x-original-url": "http://evil.test/v1/chat/completions",
        "x-rewrite-url": "http://evil.test/",
        "x-upstream": "http://evil.test/v1",
        "x-base-url": "http://evil.test/v1",
        "x-history-upstream": "evil",
    }
    redirecting_fields = {
        "base_url": "http://evil.test/v1",
        "api_base": "http://evil.test/v1",
        "url": "http://evil.test/",
        "upstream": "evil",
        "host": "evil.test",
    }
    async with serve(hostile_config()) as client:
        answers = [
            await client.post(
                "/v1/chat/completions", json=chat(**redirecting_fields), headers=redirecting_headers
            ),
            await client.post(
                "/v1/chat/completions",
                json={**chat(), "model": "http://evil.test/gpt-4o"},
                headers=redirecting_headers,
            ),
            await client.post(
                "/v1/embeddings",
                json={"model": "x", "input": "y", **redirecting_fields},
                headers=redirecting_headers,
            ),
            await client.get("/v1/models", headers=redirecting_headers),
            await client.get("/v1//evil.test/models"),
        ]
        climbing = await client.get("/v1/models/%2e%2e/%2e%2e/admin")
    assert [a.status_code for a in answers] == [200] * len(answers)
    assert {str(call.request.url.host) for call in mocked.calls} == {"upstream.test"}
    assert all(str(call.request.url).startswith(MAIN + "/") for call in mocked.calls)
    assert climbing.status_code == 400 and error_of(climbing)["code"] == "invalid_path"


# --- secrets ------------------------------------------------------------------------------------------


def test_every_proxy_key_is_compared_even_after_a_match(monkeypatch: pytest.MonkeyPatch) -> None:
    config = parse_config(
        {
            "upstreams": {"main": {"base_url": MAIN}},
            "auth": {
                "keys": [
                    {"key": PROXY_KEY, "tenant": "a"},
                    {"key": ADMIN_KEY, "tenant": "ops"},
                    {"key": "k3", "tenant": "c"},
                ]
            },
        },
        env={},
    )
    compared: list[bytes] = []
    compare = hmac.compare_digest

    def recording(a: bytes, b: bytes) -> bool:
        compared.append(a)
        return compare(a, b)

    monkeypatch.setattr("history_proxy.server.caller.hmac.compare_digest", recording)
    assert tenant_for_key(config, PROXY_KEY) == "a"
    assert len(compared) == 3  # no early exit on the first match: the time does not tell which key matched


async def test_planted_secrets_never_reach_logs_answers_metrics_or_check(
    mocked: respx.MockRouter,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    caplog.set_level(logging.DEBUG)
    mocked.route(host="down.test").mock(side_effect=httpx.ConnectError("refused"))
    mocked.route(host="slow.test").mock(side_effect=httpx.ReadTimeout("slow"))
    raw = {
        "upstreams": {
            "main": {"base_url": MAIN, "api_key": UPSTREAM_KEY, "retries": 0},
            "down": {"base_url": "https://down.test/v1", "api_key": UPSTREAM_KEY, "retries": 1},
            "slow": {"base_url": "https://slow.test/v1", "api_key": UPSTREAM_KEY, "retries": 0},
        },
        "routes": [{"model": "down-*", "upstream": "down"}, {"model": "slow-*", "upstream": "slow"}],
        "auth": {"keys": [{"key": PROXY_KEY, "tenant": "team-a"}, {"key": ADMIN_KEY, "tenant": "ops"}]},
        "admin": {"tenants": ["ops"]},
        "limits": {"max_body_bytes": 2000},
        "log_bodies": True,
        "policies": {
            "roles": {"worker": [{"type": "tool_result_truncation", "keep_recent": 0, "max_chars": 5}]}
        },
    }
    path = tmp_path / "proxy.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    app = create_app(parse_config(raw, env={}), config_path=str(path))
    ok, admin = {"authorization": f"Bearer {PROXY_KEY}"}, {"authorization": f"Bearer {ADMIN_KEY}"}
    act = action()
    leaky = chat(user(f"my keys are {PROXY_KEY} and {UPSTREAM_KEY}"), act, result(act, ADMIN_KEY))
    answers: list[httpx.Response] = []
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://p") as client,
    ):
        for body, headers in [
            (chat(), ok),
            (leaky, {**ok, "x-agent-role": "worker"}),
            ({**chat(), "model": "down-1"}, ok),
            ({**chat(), "model": "slow-1"}, ok),
            (chat(), {"authorization": f"Bearer {PROXY_KEY}x"}),
            (chat(), {"authorization": PROXY_KEY}),
            (chat(user("x" * 3000)), ok),
        ]:
            answers.append(await client.post("/v1/chat/completions", json=body, headers=headers))
        answers.append(await client.post("/v1/history/preview", json=leaky, headers=ok))
        answers.append(await client.post("/admin/reload", headers=ok))
        answers.append(await client.post("/admin/reload", headers=admin))
        path.write_text(yaml.safe_dump({**raw, "limits": {"max_body_bytes": -1}}), encoding="utf-8")
        answers.append(await client.post("/admin/reload", headers=admin))
        metrics = (await client.get("/metrics")).text
    assert [a.status_code for a in answers] == [200, 200, 502, 504, 401, 401, 413, 200, 403, 200, 400]

    cli.main(["check", str(path)])  # invalid: located errors
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    cli.main(["check", str(path)])  # valid: the summary line
    printed = capsys.readouterr()
    assert "limits.max_body_bytes" in printed.out + printed.err

    answers_without_echo = answers[:7] + answers[8:]  # the preview answer shows the client its own body
    channels = {
        "log": caplog.text,
        "answers": "".join(a.text + str(a.headers) for a in answers_without_echo),
        "metrics": metrics,
        "check": printed.out + printed.err,
    }
    for secret in SECRETS:
        for name, text in channels.items():
            assert secret not in text, f"{secret} leaked through {name}"
    assert any("[REDACTED]" in r.getMessage() for r in caplog.records if r.name == "history_proxy.access")


async def test_request_bodies_are_not_logged_unless_log_bodies_is_set(
    mocked: respx.MockRouter, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    marker = "the-secret-plan-of-the-client"
    async with serve(hostile_config()) as client:
        await client.post("/v1/chat/completions", json=chat(user(marker)))
        await client.post("/v1/chat/completions", json=chat(user(marker), model=["bad"]))
    assert marker not in caplog.text
    async with serve(hostile_config(log_bodies=True)) as client:
        await client.post("/v1/chat/completions", json=chat(user(marker)))
    assert marker in caplog.text


async def test_the_worker_keeps_serving_after_every_kind_of_bad_request(mocked: respx.MockRouter) -> None:
    async with serve(hostile_config()) as client:
        for content in (
            b"{",
            b"[" * 10_000,
            b"\xff",
            json.dumps(chat({"role": "user", "content": 1})).encode(),
        ):
            assert (await client.post("/v1/chat/completions", content=content)).status_code == 400
        with anyio.fail_after(5):
            answer = await client.post("/v1/chat/completions", json=chat())
    assert answer.status_code == 200
