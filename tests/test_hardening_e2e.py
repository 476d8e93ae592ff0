"""Issue 26's findings (N1-N12), each through the real `history-proxy serve`.

The upstream is the built-in mock behind a recorder (run in this process), so each test checks what
the upstream received. Every request is small and bounded in time: the big loads of the issue are
measured in docs/hardening.md, not here.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.support.recorder import Recorder, recorder  # noqa: F401 - the fixture
from tests.support.serve_process import Server, start

SECRET = "sk-" + "A1b2C3d4E5" * 3
UPSTREAM_SECRET_KEY = "sk-upstream-only-for-ops-0123456789"
KEY_A, KEY_B, KEY_OPS = "proxy-key-team-a", "proxy-key-team-b", "proxy-key-ops"
MAX_CONNECTIONS = 8


@pytest.fixture(scope="module")
def proxy(recorder: tuple[Recorder, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:  # noqa: F811
    folder = tmp_path_factory.mktemp("hardening")
    config = folder / "config.yaml"
    url = recorder[1]
    config.write_text(
        f"""
upstreams:
  openai: {{base_url: "{url}"}}
  claude: {{base_url: "{url}", api: anthropic, api_key: "sk-ant-upstream", cache_control: true}}
  ops: {{base_url: "{url}", api_key: "{UPSTREAM_SECRET_KEY}"}}
routes:
  - {{model: "claude-*", upstream: claude}}
  - {{model: "ops-*", upstream: ops}}
auth:
  keys:
    - {{key: "{KEY_A}", tenant: team-a, upstreams: [openai, claude]}}
    - {{key: "{KEY_B}", tenant: team-b, upstreams: [openai, claude]}}
    - {{key: "{KEY_OPS}", tenant: ops}}
admin: {{tenants: [ops], metrics: admin}}
limits: {{token_cache_bytes: 2000000, surface_memo_bytes: 2000000, max_connections: {MAX_CONNECTIONS}}}
cache_control: {{last_n_messages: 2}}
policies:
  global: [{{type: remove_regex, remove: ["sk-[A-Za-z0-9]{{20,}}"]}}]
  roles:
    via_ops: [{{type: summarize, keep_recent: 1, step: 1, upstream: ops, model: ops-model}}]
    summary: [{{type: summarize, keep_recent: 1, step: 1}}]
    elide: [{{type: last_n_observations, n: 1}}]
""",
        encoding="utf-8",
    )
    yield from start("serve", "--config", str(config), log=folder / "proxy.log", ready_path="/healthz")


def headers(key: str = KEY_A, role: str = "default") -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "X-Agent-Role": role}


def post(server: Server, path: str, body: Any, key: str = KEY_A, role: str = "default") -> httpx.Response:
    return httpx.post(f"{server.url}{path}", json=body, headers=headers(key, role), timeout=30)


def turns(count: int, tag: str) -> list[dict[str, Any]]:
    """A chat conversation of ``count`` user/assistant turns, then a last user message."""
    out: list[dict[str, Any]] = []
    for i in range(count):
        out += [
            {"role": "user", "content": f"{tag} question {i}: the PIN is 4{i}71"},
            {"role": "assistant", "content": f"{tag} answer {i}"},
        ]
    return [*out, {"role": "user", "content": f"{tag} and now?"}]


def summary_calls(rec: Recorder) -> list[dict[str, Any]]:
    return [r for r in rec.seen if r["headers"].get("x-history-purpose")]


# --- N1: preview obeys auth.keys[].upstreams ---------------------------------------------------


def test_preview_refuses_an_upstream_the_key_may_not_reach(proxy: Server) -> None:
    body = {"model": "ops-model", "messages": turns(1, "n1")}
    assert post(proxy, "/v1/chat/completions", body).status_code == 403
    answer = post(proxy, "/v1/history/preview", body)
    assert answer.status_code == 403
    assert "auth.keys[].upstreams" in answer.json()["error"]["message"]


def test_preview_never_calls_a_summary_upstream_outside_the_callers_scope(
    proxy: Server,
    recorder: tuple[Recorder, str],  # noqa: F811
) -> None:
    rec = recorder[0]
    before = len(rec.seen)
    answer = post(
        proxy, "/v1/history/preview", {"model": "gpt-4o", "messages": turns(4, "n1b")}, role="via_ops"
    )
    assert answer.status_code == 200
    reached = [r for r in rec.seen[before:] if UPSTREAM_SECRET_KEY in r["headers"].get("authorization", "")]
    assert reached == []
    assert "summarize:fallback" in answer.json()["report"]["notes"]
    # the same role on a forwarded request obeys the same rule
    before = len(rec.seen)
    sent = post(
        proxy, "/v1/chat/completions", {"model": "gpt-4o", "messages": turns(4, "n1c")}, role="via_ops"
    )
    assert sent.status_code == 200
    assert not [r for r in rec.seen[before:] if UPSTREAM_SECRET_KEY in r["headers"].get("authorization", "")]


# --- N2: a long run of one character never holds the event loop --------------------------------


def test_a_long_run_of_one_character_does_not_stall_other_clients(proxy: Server) -> None:
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "a" * 3_000_000}]}
    done = threading.Event()
    result: list[int] = []

    def hostile() -> None:
        result.append(post(proxy, "/v1/chat/completions", body).status_code)
        done.set()

    thread = threading.Thread(target=hostile)
    thread.start()
    time.sleep(0.1)  # the body is on its way
    waits: list[float] = []
    while not done.is_set() and len(waits) < 200:
        started = time.perf_counter()
        assert httpx.get(f"{proxy.url}/healthz", timeout=30).status_code == 200
        waits.append(time.perf_counter() - started)
        time.sleep(0.02)
    thread.join(timeout=60)
    assert result == [200]
    # none when the request was done before the first probe: then nothing was held either
    longest = max(waits, default=0.0)
    assert longest < 0.5, f"healthz waited {longest:.2f} s behind one request"


# --- N3/N4: caches bounded in bytes, shown in /metrics -------------------------------------------


def gauge(server: Server, name: str) -> float:
    text = httpx.get(f"{server.url}/metrics", headers=headers(KEY_OPS), timeout=10).text
    values = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(name)]
    assert values, f"{name} not in /metrics"
    return sum(values)


def test_the_token_count_cache_and_the_view_memo_stay_under_their_byte_bounds(proxy: Server) -> None:
    assert gauge(proxy, "history_proxy_token_cache_max_bytes") == 2_000_000
    assert gauge(proxy, "history_proxy_surface_memo_max_bytes") == 2_000_000
    for i in range(12):
        big = f"{i} " + "lorem ipsum dolor " * 15_000  # ~270 KB of distinct text
        chat = {"model": "gpt-4o", "messages": [{"role": "user", "content": big}]}
        assert post(proxy, "/v1/chat/completions", chat).status_code == 200
        claude = {
            "model": "claude-x",
            "max_tokens": 8,
            "messages": [
                {"role": "user", "content": big},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "go on"},
            ],
        }
        assert post(proxy, "/v1/messages", claude).status_code == 200
    assert 0 < gauge(proxy, "history_proxy_token_cache_bytes") <= 2_000_000
    assert 0 < gauge(proxy, "history_proxy_surface_memo_bytes") <= 2_000_000


# --- N5: Messages stay valid when a filter empties a block ---------------------------------------


def test_a_block_the_secret_filter_empties_is_removed_and_the_request_still_ends_with_the_user(
    proxy: Server,
    recorder: tuple[Recorder, str],  # noqa: F811
) -> None:
    client = anthropic.Anthropic(base_url=proxy.url, api_key=KEY_A, max_retries=0)
    client.messages.create(
        model="claude-x",
        max_tokens=8,
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "here"}, {"type": "text", "text": SECRET}]},
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "ok"}, {"type": "text", "text": SECRET}],
            },
            {"role": "user", "content": [{"type": "text", "text": "and"}]},
            {"role": "assistant", "content": "noted"},
            {"role": "user", "content": [{"type": "text", "text": SECRET}]},
        ],
    )
    sent = recorder[0].last("/v1/messages")["body"]["messages"]
    assert SECRET not in json.dumps(sent)
    for message in sent:
        content = message["content"]
        assert content not in ("", [])
        if isinstance(content, list):
            assert all(b.get("text") != "" for b in content if b.get("type") == "text"), message
    assert sent[-1]["role"] == "user"


# --- N6: summary calls carry native content, never the view's internals ---------------------------


def test_summary_calls_on_messages_carry_no_internal_fields(
    proxy: Server,
    recorder: tuple[Recorder, str],  # noqa: F811
) -> None:
    rec = recorder[0]
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    messages: list[dict[str, Any]] = []
    for i in range(4):
        messages += [
            {"role": "user", "content": [{"type": "text", "text": f"n6 step {i}"}, image]},
            {"role": "assistant", "content": f"n6 done {i}"},
        ]
    messages.append({"role": "user", "content": "n6 next"})
    before = len(summary_calls(rec))
    answer = post(
        proxy, "/v1/messages", {"model": "claude-x", "max_tokens": 8, "messages": messages}, role="summary"
    )
    assert answer.status_code == 200
    calls = summary_calls(rec)[before:]
    assert calls, "no summary call was made"
    text = json.dumps(calls[-1]["body"])
    assert "history_ref" not in text
    assert '"native"' not in text
    assert "data:image/png;base64,iVBORw0KGgo=" in text


# --- N7: one door per endpoint --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "upstream_path", "body"),
    [
        ("/v1//chat/completions", "/chat/completions", "chat"),
        ("/v1/chat/completions/", "/chat/completions", "chat"),
        ("/v1/CHAT/completions", "/chat/completions", "chat"),
        ("/v1/chat/%63ompletions", "/chat/completions", "chat"),
        ("//v1/chat/completions", "/chat/completions", "chat"),
        ("/v1//messages", "/messages", "messages"),
        ("/v1/messages/", "/messages", "messages"),
        ("/v1//responses", "/responses", "responses"),
    ],
)
def test_every_spelling_of_a_shaped_route_is_shaped(
    proxy: Server,
    recorder: tuple[Recorder, str],  # noqa: F811
    path: str,
    upstream_path: str,
    body: str,
) -> None:
    rec = recorder[0]
    bodies = {
        "chat": {"model": "gpt-4o", "messages": [{"role": "user", "content": f"key {SECRET}"}]},
        "messages": {
            "model": "claude-x",
            "max_tokens": 8,
            "messages": [{"role": "user", "content": f"key {SECRET}"}],
        },
        "responses": {"model": "gpt-4o", "input": f"key {SECRET}"},
    }
    before = len(rec.seen)
    connection = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
    payload = json.dumps(bodies[body])
    connection.request("POST", path, payload, {**headers(), "Content-Type": "application/json"})
    response = connection.getresponse()
    response.read()
    connection.close()
    reached = rec.seen[before:]
    assert SECRET not in json.dumps([r["body"] for r in reached])
    if response.status == 200:
        assert [r["path"].removeprefix("/v1") for r in reached] == [upstream_path]
    else:
        assert reached == [] and 400 <= response.status < 500


# --- N8/N9: tenants sealed ------------------------------------------------------------------------


def test_a_summary_written_for_one_tenant_is_never_served_to_another(
    proxy: Server,
    recorder: tuple[Recorder, str],  # noqa: F811
) -> None:
    rec = recorder[0]
    body = {"model": "gpt-4o", "messages": turns(4, "n8")}
    before = len(summary_calls(rec))
    assert post(proxy, "/v1/chat/completions", body, KEY_A, "summary").status_code == 200
    assert post(proxy, "/v1/chat/completions", body, KEY_A, "summary").status_code == 200
    assert len(summary_calls(rec)) - before == 1  # cached for team-a
    assert post(proxy, "/v1/chat/completions", body, KEY_B, "summary").status_code == 200
    assert len(summary_calls(rec)) - before == 2  # team-b's guess does not hit team-a's entry


def test_metrics_require_an_admin_key_when_configured(proxy: Server) -> None:
    assert httpx.get(f"{proxy.url}/metrics", timeout=10).status_code == 401
    assert httpx.get(f"{proxy.url}/metrics", headers=headers(KEY_A), timeout=10).status_code == 403
    assert httpx.get(f"{proxy.url}/metrics", headers=headers(KEY_OPS), timeout=10).status_code == 200


def test_one_tenants_view_memo_never_writes_into_another_tenants_request(
    proxy: Server,
    recorder: tuple[Recorder, str],  # noqa: F811
) -> None:
    def conversation(flag: Any) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = [{"role": "user", "content": "n9 list the files"}]
        for i in range(3):
            out += [
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": f"t{i}", "name": "ls", "input": {}}],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": f"t{i}",
                            "content": f"file{i}\n" * 5,
                            "is_error": flag,
                        }
                    ],
                },
            ]
        return out

    body_a = {"model": "claude-x", "max_tokens": 8, "messages": conversation(0)}
    body_b = {"model": "claude-x", "max_tokens": 8, "messages": conversation(False)}
    for _ in range(2):
        assert post(proxy, "/v1/messages", body_a, KEY_A, "elide").status_code == 200
    assert post(proxy, "/v1/messages", body_b, KEY_B, "elide").status_code == 200
    sent = recorder[0].last("/v1/messages")["body"]["messages"]
    flags = [
        b["is_error"] for m in sent if isinstance(m["content"], list) for b in m["content"] if "is_error" in b
    ]
    assert flags and all(flag is False for flag in flags)


# --- N10: deep nesting is a clear 400 in the surface's shape --------------------------------------


def nested(depth: int) -> str:
    """JSON text of ``depth`` nested objects (written by hand: the stdlib cannot encode it)."""
    return '{"a":' * depth + '"x"' + "}" * depth


def tool_input_body(depth: int) -> str:
    """A Messages body whose one tool_use input nests ``depth`` objects."""
    return (
        '{"model":"claude-x","max_tokens":8,"messages":[{"role":"user","content":"go"},'
        '{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":'
        + nested(depth)
        + '}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}]}'
    )


def post_raw(server: Server, path: str, text: str) -> httpx.Response:
    return httpx.post(
        f"{server.url}{path}",
        content=text.encode(),
        headers={**headers(), "Content-Type": "application/json"},
        timeout=30,
    )


@pytest.mark.parametrize("depth", [990, 2000])
def test_deep_nesting_in_a_tool_input_is_a_400_in_anthropics_shape(proxy: Server, depth: int) -> None:
    answer = post_raw(proxy, "/v1/messages", tool_input_body(depth))
    assert answer.status_code == 400, answer.text
    assert answer.json()["type"] == "error"
    assert answer.json()["error"]["type"] == "invalid_request_error"
    assert "nest" in answer.json()["error"]["message"]


def test_deep_nesting_in_a_responses_output_is_a_400_in_openais_shape(proxy: Server) -> None:
    text = (
        '{"model":"gpt-4o","input":[{"role":"user","content":"go"},'
        '{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},'
        '{"type":"function_call_output","call_id":"c1","output":[' + nested(990) + "]}]}"
    )
    answer = post_raw(proxy, "/v1/responses", text)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["type"] == "invalid_request_error"
    assert "nest" in answer.json()["error"]["message"]


def test_moderate_nesting_is_forwarded(proxy: Server) -> None:
    assert post_raw(proxy, "/v1/messages", tool_input_body(300)).status_code == 200


# --- N11: a cap on client connections -------------------------------------------------------------


def test_connections_past_the_cap_are_refused_and_served_again_once_others_close(proxy: Server) -> None:
    idle = [socket.create_connection(("127.0.0.1", proxy.port), timeout=10) for _ in range(MAX_CONNECTIONS)]
    try:
        time.sleep(0.2)
        refused = httpx.get(f"{proxy.url}/healthz", timeout=10)
        assert refused.status_code == 503
        assert "limits.max_connections" in refused.json()["error"]["message"]
    finally:
        for sock in idle:
            sock.close()
    time.sleep(0.2)
    assert httpx.get(f"{proxy.url}/healthz", timeout=10).status_code == 200


# --- N12: provider-held history still passes the filters that need no history -------------------


def test_new_input_items_with_previous_response_id_pass_the_secret_filter(
    proxy: Server,
    recorder: tuple[Recorder, str],  # noqa: F811
) -> None:
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=KEY_A, max_retries=0)
    client.responses.create(
        model="gpt-4o",
        previous_response_id="resp_123",
        input=[{"role": "user", "content": f"my key is {SECRET}"}],
    )
    sent = recorder[0].last("/v1/responses")["body"]
    assert sent["previous_response_id"] == "resp_123"
    assert SECRET not in json.dumps(sent)
    assert "my key is" in json.dumps(sent)
