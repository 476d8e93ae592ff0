"""``replay --client-edits``: a client's Messages context edits emulated after the chain, on every request."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from history_proxy.cli import main
from history_proxy.config.loading import load_config
from history_proxy.core.identity import Identity
from history_proxy.core.messages import Message
from history_proxy.core.tokens import TokenCounters
from history_proxy.devtools.replay import replay
from history_proxy.devtools.replay_edits import with_client_edits
from history_proxy.pipeline.run import Pipeline

EDITS = [
    {
        "type": "clear_tool_uses_20250919",
        "trigger": {"type": "tool_uses", "value": 2},
        "keep": {"type": "tool_uses", "value": 1},
    }
]


def conversation(calls: int) -> list[Message]:
    messages: list[Message] = [
        {"role": "system", "content": "You read files."},
        {"role": "user", "content": "Read."},
    ]
    for n in range(calls):
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": f"c{n}", "type": "function", "function": {"name": "read", "arguments": "{}"}}
                ],
            }
        )
        messages.append(
            {"role": "tool", "tool_call_id": f"c{n}", "content": f"file {n}: " + "lorem ipsum " * 80}
        )
    messages.append({"role": "assistant", "content": "Done."})
    return messages


def test_only_the_cleared_results_change_and_every_other_message_is_the_one_sent() -> None:
    messages = conversation(4)[:-1]
    out, applied = with_client_edits(messages, EDITS, lambda text: len(text) // 4, 0)
    assert [e["type"] for e in applied] == ["clear_tool_uses_20250919"]
    changed = [i for i, (a, b) in enumerate(zip(messages, out, strict=True)) if a is not b]
    assert changed == [3, 5, 7]  # the three older tool results
    assert all(out[i]["content"].startswith("[tool result cleared") for i in changed)
    assert out[8] is messages[8]


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    config = {"upstreams": {"m": {"base_url": "mock://"}}, "policies": {"roles": {"worker": []}}}
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def test_the_edits_lower_the_tokens_sent_from_the_request_they_trigger_on(config_file: Path) -> None:
    body: dict[str, Any] = {"model": "claude-x", "messages": conversation(5)}
    pipeline = Pipeline(load_config(config_file), TokenCounters())
    plain = asyncio.run(replay(pipeline, body, Identity(role="worker")))
    edited = asyncio.run(replay(pipeline, body, Identity(role="worker"), client_edits=EDITS))
    sent = [(a.tokens_sent, b.tokens_sent) for a, b in zip(plain.steps, edited.steps, strict=True)]
    assert sent[0][0] == sent[0][1] and sent[1][0] == sent[1][1]  # one tool use: not triggered yet
    assert all(b < a for a, b in sent[2:])


def test_the_command_takes_the_edits_as_json_or_a_file(
    config_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conversation_file = tmp_path / "conversation.json"
    conversation_file.write_text(
        json.dumps({"model": "claude-x", "messages": conversation(5)}), encoding="utf-8"
    )
    base = ["replay", str(conversation_file), "--config", str(config_file), "--role", "worker", "--json"]
    assert main(base) == 0
    plain = json.loads(capsys.readouterr().out)["totals"]
    assert main([*base, "--client-edits", json.dumps(EDITS)]) == 0
    edited = json.loads(capsys.readouterr().out)["totals"]
    (tmp_path / "edits.json").write_text(json.dumps({"edits": EDITS}), encoding="utf-8")
    assert main([*base, "--client-edits", f"@{tmp_path / 'edits.json'}"]) == 0
    assert json.loads(capsys.readouterr().out)["totals"] == edited
    assert edited["tokens_sent"] < plain["tokens_sent"]
    assert main([*base, "--client-edits", "{not json"]) == 1
