"""Recall through the real `history-proxy serve` on chat, Responses and Messages (issue 32).

A worker reads a.py, b.py, c.py with ``last_n_observations`` n 1 and ``recall: true``: a.py and b.py
reach the upstream as notices carrying a handle. Then:

* the agent mentions a.py's handle: a.py reaches the upstream whole again, in place;
* the agent quotes an id only a.py held: a.py's line holding it is quoted in its notice;
* the client sends the history back as the upstream saw it (the notice in place of a.py) and mentions
  the handle: the proxy restores a.py from its recall store, for the tenant that elided it only;
  another tenant gets a notice saying the handle is no longer held, and no error.

The upstream is the built-in mock behind a recorder, so each test reads what it received.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
import yaml

from history_proxy.filters._recall import handle_of
from tests.support.recorder import Recorder, recorder  # noqa: F401 - the fixture
from tests.support.serve_process import Server, start

A_PY = "".join(f"def alpha_{k}():\n    return {k}\n" for k in range(30)) + "checksum = alpha_ledger_99173\n"
B_PY = "".join(f"def beta_{k}():\n    return {k}\n" for k in range(30))
C_PY = "def gamma():\n    return 3\n"
HANDLE = handle_of(A_PY)
KEYS = {"team-a": "key-team-a-0123456789", "team-b": "key-team-b-0123456789"}
SURFACES = ("chat", "responses", "messages")


@pytest.fixture(scope="module")
def proxy(recorder: tuple[Recorder, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:  # noqa: F811
    folder = tmp_path_factory.mktemp("recall")
    url = recorder[1]
    raw = {
        "upstreams": {
            "openai": {"base_url": url, "api_key": "sk-upstream"},
            "claude": {"base_url": url, "api": "anthropic", "api_key": "sk-ant-upstream"},
        },
        "routes": [{"model": "claude-*", "upstream": "claude"}],
        "auth": {"keys": [{"key": key, "tenant": tenant} for tenant, key in KEYS.items()]},
        "policies": {"roles": {"worker": [{"type": "last_n_observations", "n": 1, "recall": True}]}},
    }
    config = folder / "config.yaml"
    config.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    yield from start("serve", "--config", str(config), log=folder / "proxy.log", ready_path="/healthz")


def steps(a_output: str, mention: str | None) -> list[tuple[str, str, str]]:
    """``(path, output, text said with the call)`` for each read: a.py, b.py, c.py, then a fourth call
    whose words mention ``mention``."""
    reads = [("a.py", a_output, ""), ("b.py", B_PY, ""), ("c.py", C_PY, "")]
    if mention is not None:
        reads.append(("d.py", "def delta():\n    return 4\n", f"Looking again at {mention}."))
    return reads


def chat_messages(reads: list[tuple[str, str, str]]) -> list[Any]:
    history: list[Any] = [{"role": "user", "content": "fix alpha"}]
    for i, (path, output, said) in enumerate(reads, start=1):
        call = {
            "id": f"c{i}",
            "type": "function",
            "function": {"name": "read", "arguments": json.dumps({"path": path})},
        }
        history.append({"role": "assistant", "content": said or None, "tool_calls": [call]})
        history.append({"role": "tool", "tool_call_id": f"c{i}", "content": output})
    return history


def responses_input(reads: list[tuple[str, str, str]]) -> list[Any]:
    items: list[Any] = [{"role": "user", "content": "fix alpha"}]
    for i, (path, output, said) in enumerate(reads, start=1):
        if said:
            items.append({"role": "assistant", "content": said})
        items.append(
            {
                "type": "function_call",
                "call_id": f"c{i}",
                "name": "read",
                "arguments": json.dumps({"path": path}),
            }
        )
        items.append({"type": "function_call_output", "call_id": f"c{i}", "output": output})
    return items


def messages_history(reads: list[tuple[str, str, str]]) -> list[Any]:
    history: list[Any] = [{"role": "user", "content": "fix alpha"}]
    for i, (path, output, said) in enumerate(reads, start=1):
        blocks: list[Any] = [{"type": "text", "text": said}] if said else []
        blocks.append({"type": "tool_use", "id": f"tu{i}", "name": "read", "input": {"path": path}})
        history.append({"role": "assistant", "content": blocks})
        history.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"tu{i}", "content": output}]}
        )
    return history


def send(server: Server, surface: str, reads: list[tuple[str, str, str]], tenant: str = "team-a") -> None:
    key, headers = KEYS[tenant], {"X-Agent-Role": "worker"}
    if surface == "messages":
        with anthropic.Anthropic(
            base_url=server.url, api_key=key, max_retries=0, default_headers=headers
        ) as claude:
            claude.messages.create(model="claude-test-model", max_tokens=50, messages=messages_history(reads))
        return
    with openai.OpenAI(
        base_url=f"{server.url}/v1", api_key=key, max_retries=0, default_headers=headers
    ) as client:
        if surface == "chat":
            client.chat.completions.create(model="gpt-4o-mini", messages=chat_messages(reads))
        else:
            client.responses.create(model="gpt-4o-mini", input=responses_input(reads))


def received_outputs(upstream: Recorder, surface: str) -> list[str]:
    """The tool outputs the upstream received last on ``surface``, in order, as text."""
    if surface == "chat":
        body = upstream.last("/v1/chat/completions")["body"]
        return [m["content"] for m in body["messages"] if m["role"] == "tool"]
    if surface == "responses":
        body = upstream.last("/v1/responses")["body"]
        return [item["output"] for item in body["input"] if item.get("type") == "function_call_output"]
    body = upstream.last("/v1/messages")["body"]
    out: list[str] = []
    for message in body["messages"]:
        for block in message["content"] if isinstance(message["content"], list) else []:
            if block.get("type") == "tool_result":
                content = block["content"]
                out.append(content if isinstance(content, str) else "".join(p["text"] for p in content))
    return out


@pytest.fixture
def upstream(recorder: tuple[Recorder, str]) -> Recorder:  # noqa: F811
    return recorder[0]


@pytest.mark.parametrize("surface", SURFACES)
def test_an_old_output_reaches_the_upstream_as_a_notice_with_its_handle(
    proxy: Server, upstream: Recorder, surface: str
) -> None:
    send(proxy, surface, steps(A_PY, None))
    a, b, c = received_outputs(upstream, surface)
    assert a.startswith("Old environment output: (61 lines omitted") and f"mention #{HANDLE})" in a
    assert "alpha_ledger_99173" not in a  # a line notice: nothing quoted until asked for
    assert b.startswith("Old environment output:") and c == C_PY


@pytest.mark.parametrize("surface", SURFACES)
def test_mentioning_the_handle_brings_the_output_back_whole_in_place(
    proxy: Server, upstream: Recorder, surface: str
) -> None:
    send(proxy, surface, steps(A_PY, f"#{HANDLE}"))
    a, b, *_ = received_outputs(upstream, surface)
    assert a == A_PY
    assert b.startswith("Old environment output:")


@pytest.mark.parametrize("surface", SURFACES)
def test_quoting_an_id_only_that_output_held_brings_back_its_line(
    proxy: Server, upstream: Recorder, surface: str
) -> None:
    send(proxy, surface, steps(A_PY, "alpha_ledger_99173"))
    a, *_ = received_outputs(upstream, surface)
    assert a.startswith("Old environment output:")
    assert a.splitlines()[1:] == ["checksum = alpha_ledger_99173"]


@pytest.mark.parametrize("surface", SURFACES)
def test_a_notice_sent_back_is_restored_from_the_store_for_its_own_tenant_only(
    proxy: Server, upstream: Recorder, surface: str
) -> None:
    send(proxy, surface, steps(A_PY, None))  # team-a: the proxy elides a.py and keeps it
    notice = received_outputs(upstream, surface)[0]
    send(proxy, surface, steps(notice, f"#{HANDLE}"))  # the history as the upstream saw it
    assert received_outputs(upstream, surface)[0] == A_PY
    send(proxy, surface, steps(notice, f"#{HANDLE}"), tenant="team-b")
    other = received_outputs(upstream, surface)[0]
    assert other.startswith(notice.splitlines()[0]) and f"#{HANDLE} is no longer held" in other
    assert "def alpha_0" not in other


def test_the_store_reports_what_it_holds_and_its_bound(proxy: Server) -> None:
    send(proxy, "chat", steps(A_PY, None))
    text = httpx.get(f"{proxy.url}/metrics", timeout=10).text
    held = re.search(r"^history_proxy_recall_store_bytes ([0-9.e+]+)$", text, re.MULTILINE)
    bound = re.search(r"^history_proxy_recall_store_max_bytes ([0-9.e+]+)$", text, re.MULTILINE)
    assert held and bound
    assert len(A_PY) <= float(held.group(1)) <= float(bound.group(1)) == 64 * 1024 * 1024


def test_an_elided_output_is_served_by_retrieve_to_its_own_tenant_only(
    proxy: Server, upstream: Recorder
) -> None:
    send(proxy, "chat", steps(A_PY, None))
    notice = received_outputs(upstream, "chat")[0]
    assert f"#{HANDLE}" in notice
    url = f"{proxy.url}/v1/retrieve/{HANDLE}"
    own = httpx.get(url, headers={"Authorization": f"Bearer {KEYS['team-a']}"}, timeout=10)
    assert own.status_code == 200 and own.json() == {"hash": HANDLE, "original_content": A_PY}
    other = httpx.get(url, headers={"Authorization": f"Bearer {KEYS['team-b']}"}, timeout=10)
    assert other.status_code == 404 and other.json()["error"]["code"] == "hash_not_found"
    assert httpx.get(url, timeout=10).status_code == 401  # no proxy key: refused as on every route
