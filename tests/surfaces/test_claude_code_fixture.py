"""Every role's view of real Claude Code requests keeps the instructions, the tools, the task and the agent's work.

The fixture (tests/corpus/messages/claude-code-2.1.332.json, recorded by
tests/corpus/recording/record_claude_code.py with Claude Code's own text replaced by placeholders)
holds the five requests of a three-turn session: two tool loops with thinking, then a text question.
Each goes through every chain of ``config/default.yaml`` that needs no model call, in order and with
the view memo as the server runs it, and the request sent must still hold, unchanged: the ``system``
blocks and every tool, the mid-conversation ``system`` message in its place, the current task, and
everything the agent did since (thinking, tool calls, their results); and it must be a request the
API accepts (the mock's Anthropic checks).
"""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import pytest

from history_proxy.core.identity import Identity
from history_proxy.core.tokens import TokenCounters
from history_proxy.mock.strict import messages_refusal
from history_proxy.pipeline.run import Pipeline
from history_proxy.surfaces.memo import ViewMemo
from history_proxy.surfaces.shape import shape
from tests.support.shaping import NO_NETWORK_ROLES, default_config, in_place

FIXTURE = Path(__file__).resolve().parents[1] / "corpus" / "messages" / "claude-code-2.1.332.json"


def requests() -> list[dict[str, Any]]:
    return [r["body"] for r in json.loads(FIXTURE.read_text(encoding="utf-8"))["requests"]]


def task_index(messages: list[dict[str, Any]]) -> int:
    """The newest user message that states a task (text that is not a reminder, not tool results)."""
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        content = message["content"]
        texts = (
            [content]
            if isinstance(content, str)
            else [b.get("text", "") for b in content if b.get("type") == "text"]
        )
        if message["role"] == "user" and any(t and not t.startswith("<system-reminder>") for t in texts):
            return i
    raise AssertionError("no task in the request")


def task_text(message: dict[str, Any]) -> str:
    content = message["content"]
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content if b.get("type") == "text")


def blocks(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [b for m in messages if isinstance(m["content"], list) for b in m["content"]]


def test_the_fixture_is_what_claude_code_sends() -> None:
    bodies = requests()
    assert len(bodies) == 5
    for body in bodies:
        assert body["thinking"]["type"] == "adaptive" and "context_management" in body
        assert len(body["system"]) == 3 and len(body["tools"]) >= 10
        assert body["messages"][1]["role"] == "system"  # the mid-conversation system message
        assert "You are" not in json.dumps(body)  # Claude Code's own text stays out of the repository
        assert messages_refusal(body) is None


@pytest.mark.parametrize("role", NO_NETWORK_ROLES)
def test_every_roles_view_keeps_instructions_tools_task_and_the_agents_work(role: str) -> None:
    pipe = Pipeline(default_config(cache_control=True), TokenCounters())
    memo = ViewMemo(max_messages=10_000)
    for body in requests():
        original = copy.deepcopy(body)
        sent = asyncio.run(
            shape("messages", pipe, body, Identity(role=role, agent="claude"), "mock", memo)
        ).body
        assert body == original  # the client's request is never edited in place
        assert sent["system"] == original["system"] and sent["tools"] == original["tools"]
        for key in ("thinking", "context_management", "output_config", "metadata", "model", "max_tokens"):
            assert sent[key] == original[key]
        messages, before = sent["messages"], original["messages"]
        pinned = [m for m in before if m["role"] == "system"]
        assert [m for m in messages if m["role"] == "system"] == pinned
        assert in_place(messages, before)
        task = task_index(before)
        since = before[task + 1 :]
        assert task_text(before[task]) in [task_text(m) for m in messages if m["role"] == "user"]
        for message in since:  # the agent's own work since the task: thinking, calls, results
            if message["role"] == "assistant":
                assert message in messages
        calls = {
            b["id"]
            for m in since
            if m["role"] == "assistant"
            for b in m["content"]
            if b["type"] == "tool_use"
        }
        answered = {
            b["tool_use_id"]
            for m in messages
            if m["role"] == "user" and isinstance(m["content"], list)
            for b in m["content"]
            if b.get("type") == "tool_result"
        }
        assert calls <= answered
        assert messages_refusal(sent) is None
        marked = [b for b in blocks(before) if b.get("cache_control")]  # the client's own marks, as they came
        assert marked and all(block in blocks(messages) for block in marked)
