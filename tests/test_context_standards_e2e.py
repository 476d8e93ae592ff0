"""The providers' context standards end to end: ``history-proxy serve`` against the mock upstream run as
a strict Anthropic-compatible server (refuses unknown top-level fields) or as one that honours
``context_management``, and the calibrated token count against a mock that bills 1.6x the proxy's count.

What a user sees: a Claude Code-shaped request (``context_management`` with ``clear_thinking`` and
``clear_tool_uses``, beta ``context-management-2025-06-27``) succeeds whatever the upstream speaks, its
edits are applied (by the upstream, or by the proxy) and ``applied_edits`` comes back, on whole and
streamed answers; ``count_tokens`` answers ``original_input_tokens``; a token budget fires where the
provider's count says it should, and ``/metrics`` shows the learned ratio.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support.serve_process import Server, start

BETA = "context-management-2025-06-27"
HEADERS = {"anthropic-version": "2023-06-01", "anthropic-beta": f"claude-code-20250219,{BETA}"}


@contextlib.contextmanager
def _mock(tmp_path: Path, name: str, *options: str) -> Iterator[Server]:
    yield from start("mock-upstream", *options, log=tmp_path / f"{name}.log", ready_path="/healthz")


@contextlib.contextmanager
def _proxy(
    tmp_path: Path, upstream: str, mode: str | None, roles: dict[str, Any] | None = None
) -> Iterator[Server]:
    config: dict[str, Any] = {
        "upstreams": {
            "claude": {
                "base_url": f"{upstream}/v1",
                "api": "anthropic",
                **({"context_management": mode} if mode else {}),
            }
        },
        "policies": {"global": [], "roles": roles or {}},
    }
    path = tmp_path / f"proxy-{mode}.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    yield from start(
        "serve", "--config", str(path), log=tmp_path / f"proxy-{mode}.log", ready_path="/healthz"
    )


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with _mock(tmp_path_factory.mktemp("strict"), "strict", "--messages-profile", "strict") as mock:
        yield mock


@pytest.fixture(scope="module")
def honouring(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with _mock(tmp_path_factory.mktemp("honour"), "honour", "--messages-profile", "honour") as mock:
        yield mock


def _call(n: int) -> list[dict[str, Any]]:
    """An assistant message thinking and calling ``Read``, and the user message with its result."""
    thinking = {"type": "thinking", "thinking": f"I read note {n} next.", "signature": f"sig{n}"}
    use = {"type": "tool_use", "id": f"toolu_{n}", "name": "Read", "input": {"file_path": f"/n{n}"}}
    result = f"note {n}: " + "lorem ipsum dolor sit amet " * 40
    return [
        {"role": "assistant", "content": [thinking, use]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": result}],
        },
    ]


def claude_code_body(stream: bool = False) -> dict[str, Any]:
    """A Claude Code-shaped conversation, thinking on: a finished turn of three tool calls and an
    answer, then the current turn, one call in flight (its thinking is signed and checked)."""
    answer = [
        {"type": "thinking", "thinking": "All read.", "signature": "sig-a"},
        {"type": "text", "text": "Done."},
    ]
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Read the three notes, then summarise."},
        *_call(0),
        *_call(1),
        *_call(2),
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "Now read note 3."},
        *_call(3),
    ]
    return {
        "model": "claude-sonnet-4-6",
        "max_tokens": 1024,
        "stream": stream,
        "thinking": {"type": "adaptive"},
        "messages": messages,
        "tools": [{"name": "Read", "description": "read a file", "input_schema": {"type": "object"}}],
        "context_management": {
            "edits": [
                {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}},
                {
                    "type": "clear_tool_uses_20250919",
                    "trigger": {"type": "tool_uses", "value": 2},
                    "keep": {"type": "tool_uses", "value": 1},
                },
            ]
        },
    }


def _final_delta(text: str) -> dict[str, Any]:
    deltas = [
        json.loads(line[5:])
        for line in text.splitlines()
        if line.startswith("data:") and "message_delta" in line
    ]
    assert len(deltas) == 1, text[-2000:]
    found: dict[str, Any] = deltas[0]
    return found


def _managed(answer: httpx.Response, stream: bool) -> dict[str, Any]:
    """The answer's ``context_management``: the body's, or the final ``message_delta``'s."""
    found: dict[str, Any] = (_final_delta(answer.text) if stream else answer.json())["context_management"]
    return found


def _applied_types(context_management: dict[str, Any]) -> list[str]:
    return [edit["type"] for edit in context_management["applied_edits"]]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_strict_upstream_gets_no_context_management_and_the_edits_are_applied_by_the_proxy(
    strict: Server, tmp_path: Path, stream: bool
) -> None:
    with _proxy(tmp_path, strict.url, None) as proxy:  # default for a non-Anthropic URL: emulate
        answer = httpx.post(
            f"{proxy.url}/v1/messages", json=claude_code_body(stream), headers=HEADERS, timeout=30
        )
        assert answer.status_code == 200, answer.text
        managed = _managed(answer, stream)
        assert _applied_types(managed) == ["clear_thinking_20251015", "clear_tool_uses_20250919"]
        thinking, tools = managed["applied_edits"]
        assert thinking["cleared_thinking_turns"] == 4  # all but the newest (the current turn's)
        assert tools["cleared_tool_uses"] == 3 and tools["cleared_input_tokens"] > 300
        # what the upstream answered says what it received: the same count of messages, fewer tokens
        assert "context_management:emulated" in answer.headers["x-history-notes"]


def test_native_mode_on_a_strict_upstream_shows_what_the_proxy_saves_clients_from(
    strict: Server, tmp_path: Path
) -> None:
    with _proxy(tmp_path, strict.url, "native") as proxy:
        answer = httpx.post(f"{proxy.url}/v1/messages", json=claude_code_body(), headers=HEADERS, timeout=30)
        assert answer.status_code == 400
        assert answer.json()["error"]["message"] == "context_management: Extra inputs are not permitted"


def test_strip_mode_removes_the_field_and_applies_nothing(strict: Server, tmp_path: Path) -> None:
    with _proxy(tmp_path, strict.url, "strip") as proxy:
        answer = httpx.post(f"{proxy.url}/v1/messages", json=claude_code_body(), headers=HEADERS, timeout=30)
        assert answer.status_code == 200, answer.text
        assert "context_management" not in answer.json()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_an_upstream_that_honours_the_field_gets_it_and_reports_its_own_edits(
    honouring: Server, tmp_path: Path, stream: bool
) -> None:
    with _proxy(tmp_path, honouring.url, "native") as proxy:
        headers = {"anthropic-version": "2023-06-01"}  # no beta: native mode merges it
        answer = httpx.post(
            f"{proxy.url}/v1/messages", json=claude_code_body(stream), headers=headers, timeout=30
        )
        assert answer.status_code == 200, answer.text
        managed = _managed(answer, stream)
        assert _applied_types(managed) == ["clear_thinking_20251015", "clear_tool_uses_20250919"]
        assert "context_management:emulated" not in answer.headers.get("x-history-notes", "")


def test_clear_thinking_without_thinking_never_fails_a_request_on_a_native_upstream(
    honouring: Server, tmp_path: Path
) -> None:
    with _proxy(tmp_path, honouring.url, "native") as proxy:
        body = {**claude_code_body(), "context_management": {"edits": [{"type": "clear_thinking_20251015"}]}}
        del body["thinking"]
        answer = httpx.post(f"{proxy.url}/v1/messages", json=body, headers=HEADERS, timeout=30)
        assert answer.status_code == 200, answer.text
        assert "context_management" not in answer.json()  # the edit Anthropic would refuse was left out


def test_count_tokens_answers_the_original_count_beside_the_edited_one(
    strict: Server, tmp_path: Path
) -> None:
    with _proxy(tmp_path, strict.url, "emulate") as proxy:
        body = claude_code_body()
        del body["stream"], body["max_tokens"]
        answer = httpx.post(f"{proxy.url}/v1/messages/count_tokens", json=body, headers=HEADERS, timeout=30)
        assert answer.status_code == 200, answer.text
        counted = answer.json()
        assert counted["context_management"]["original_input_tokens"] > counted["input_tokens"] > 0


def _conversation(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for n in range(turns):
        messages.append(
            {
                "role": "user",
                "content": f"Question {n}: " + "the quick brown fox jumps over the lazy dog " * 100,
            }
        )
        messages.append(
            {"role": "assistant", "content": f"Answer {n}: " + "a stitch in time saves nine " * 100}
        )
    messages.append({"role": "user", "content": "And now?"})
    return messages


def test_a_budget_fires_at_the_providers_count_after_warm_up_and_metrics_show_the_ratio(
    tmp_path: Path,
) -> None:
    roles = {"default": [{"type": "token_limiter", "limit": 100000}]}
    with (
        _mock(tmp_path, "billing", "--input-token-factor", "1.6") as mock,
        _proxy(tmp_path, mock.url, None, roles) as proxy,
    ):

        def send(turns: int) -> httpx.Response:
            body = {"model": "claude-sonnet-4-6", "max_tokens": 64, "messages": _conversation(turns)}
            answer = httpx.post(f"{proxy.url}/v1/messages", json=body, headers=HEADERS, timeout=60)
            assert answer.status_code == 200, answer.text
            return answer

        first = send(50)  # ~76k counted: under 100k before the proxy knows the ratio
        before = int(first.headers["x-history-tokens-before"])
        assert 68_000 < before < 90_000
        assert int(first.headers["x-history-tokens-after"]) == before
        for _ in range(3):
            send(4)  # warm-up: small requests teach the ratio too
        again = send(50)
        after = int(again.headers["x-history-tokens-after"])
        assert 58_000 < after <= 62_500  # 100k of the provider's tokens is 62.5k of ours
        metrics = httpx.get(f"{proxy.url}/metrics", timeout=10).text
        found = re.search(
            r'history_proxy_token_ratio\{family="claude-sonnet",upstream="claude"\} ([0-9.]+)', metrics
        )
        assert found is not None, [line for line in metrics.splitlines() if "ratio" in line]
        assert 1.5 < float(found.group(1)) < 1.7
        mock.stop()


def _compacting(stream: bool, pause: bool, turns: int = 40) -> dict[str, Any]:
    edit: dict[str, Any] = {"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 50_000}}
    if pause:
        edit["pause_after_compaction"] = True
    return {
        "model": "claude-sonnet-4-6",
        "max_tokens": 64,
        "stream": stream,
        "messages": _conversation(turns),  # ~60k tokens
        "context_management": {"edits": [edit]},
    }


def test_compaction_pauses_with_the_block_alone_and_the_next_request_starts_from_it(
    strict: Server, tmp_path: Path
) -> None:
    with _proxy(tmp_path, strict.url, None) as proxy:
        headers = {**HEADERS, "anthropic-beta": "compact-2026-01-12"}
        body = _compacting(stream=False, pause=True)
        paused = httpx.post(f"{proxy.url}/v1/messages", json=body, headers=headers, timeout=60)
        assert paused.status_code == 200, paused.text
        answer = paused.json()
        assert answer["stop_reason"] == "compaction"
        (block,) = answer["content"]
        assert block["type"] == "compaction" and "user asked: Question 0" in block["content"]
        assert _applied_types(answer["context_management"]) == ["compact_20260112"]
        # the client appends the whole answer and goes on: everything before the block is dropped
        follow = {
            **body,
            "messages": [
                *body["messages"],
                {"role": "assistant", "content": answer["content"]},
                {"role": "user", "content": "Go on."},
            ],
        }
        went_on = httpx.post(f"{proxy.url}/v1/messages", json=follow, headers=headers, timeout=60)
        assert went_on.status_code == 200, went_on.text
        said = went_on.json()["content"][0]["text"]
        assert said.startswith("mock: received 1 messages (user=1)")  # the summary and "Go on." in one
        assert went_on.json()["context_management"] == {"applied_edits": []}


def test_compaction_without_a_pause_opens_the_streamed_answer_with_the_block(
    strict: Server, tmp_path: Path
) -> None:
    with _proxy(tmp_path, strict.url, None) as proxy:
        body = _compacting(stream=True, pause=False)
        answer = httpx.post(f"{proxy.url}/v1/messages", json=body, headers=HEADERS, timeout=60)
        assert answer.status_code == 200, answer.text
        events = [json.loads(line[5:]) for line in answer.text.splitlines() if line.startswith("data:")]
        starts = [e for e in events if e["type"] == "content_block_start"]
        assert [(e["index"], e["content_block"]["type"]) for e in starts] == [(0, "compaction"), (1, "text")]
        assert {e["index"] for e in events if e["type"] == "content_block_delta"} == {1}
        text = "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta")
        assert text.startswith("mock: received 1 messages (user=1)")  # the upstream answered from the summary
        assert _applied_types(_final_delta(answer.text)["context_management"]) == ["compact_20260112"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_an_upstream_that_compacts_itself_gets_its_blocks_back_verbatim_through_native_mode(
    honouring: Server, tmp_path: Path, stream: bool
) -> None:
    with _proxy(tmp_path, honouring.url, "native") as proxy:
        body = _compacting(stream=stream, pause=False)
        answer = httpx.post(f"{proxy.url}/v1/messages", json=body, headers=HEADERS, timeout=60)
        assert answer.status_code == 200, answer.text
        if stream:
            events = [json.loads(line[5:]) for line in answer.text.splitlines() if line.startswith("data:")]
            starts = [e for e in events if e["type"] == "content_block_start"]
            assert [(e["index"], e["content_block"]["type"]) for e in starts] == [
                (0, "compaction"),
                (1, "text"),
            ]
            block = starts[0]["content_block"]
        else:
            block = answer.json()["content"][0]
        assert block["type"] == "compaction" and block["content"].startswith("mock summary: ")
        assert _applied_types(_managed(answer, stream)) == ["compact_20260112"]
        follow = {
            **body,
            "stream": False,
            "messages": [
                *body["messages"],
                {"role": "assistant", "content": [block]},
                {"role": "user", "content": "Go on."},
            ],
        }
        went_on = httpx.post(f"{proxy.url}/v1/messages", json=follow, headers=HEADERS, timeout=60)
        assert went_on.status_code == 200, went_on.text
        assert went_on.json()["content"][0]["text"].startswith("mock: received 1 messages (user=1)")
