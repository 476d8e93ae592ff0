"""Real Codex request bodies (tests/corpus/responses/) under every role's view: nothing the agent needs is lost.

The fixture is the last request of a two-turn ``codex exec`` session (Codex 0.171.0, recorded by
``tests/corpus/recording/responses_recorder.py``): two developer messages, the environment context,
two tasks, each followed by an encrypted reasoning item, a shell call and its output. It is also
tried in the form Codex sends its tools in elsewhere: no top-level ``tools``, an ``additional_tools``
input item first. Every role of the default config, and each view filter alone, must keep the
instructions (developer messages, tools), the newest task and the agent's own work since it.
"""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from history_proxy.config.loading import load_config
from history_proxy.server.app import create_app
from tests.support.shaping import CHAINS, TEXT_REPLACED, run

REPO = Path(__file__).resolve().parents[2]
FIXTURES = sorted((REPO / "tests" / "corpus" / "responses").glob("codex-*.json"))
ROLES = ("orchestrator", "manager", "worker", "default", "planner")
EDITS_WORK = frozenset(
    {"last_n_observations", "worker_compaction", "truncate", "token_limiter", "tool_call_filter"}
)
"""Filters whose definition elides outputs, drops old groups or removes calls (the agent's work)."""


def fixture(path: Path, form: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    if form == "additional_tools":  # Codex 0.17x's other form: the tools as the first input item
        tools = body.pop("tools")
        body["input"] = [{"type": "additional_tools", "role": "developer", "tools": tools}, *body["input"]]
    return body


def instructions(body: dict[str, Any]) -> list[Any]:
    """The leading developer messages and tool declarations, as sent."""
    out = []
    for item in body["input"]:
        if item.get("role") != "developer":
            break
        out.append(item)
    return out


def newest_turn(body: dict[str, Any]) -> list[Any]:
    """The newest task and the agent's work since it."""
    users = [n for n, item in enumerate(body["input"]) if item.get("role") == "user"]
    return list(body["input"][users[-1] :])


def assert_nothing_needed_is_lost(sent: dict[str, Any], body: dict[str, Any], where: str) -> None:
    assert sent.get("tools") == body.get("tools"), where
    assert sent["input"][: len(instructions(body))] == instructions(body), where
    turn = newest_turn(body)
    assert sent["input"][-len(turn) :] == turn, where


def test_the_fixture_is_a_real_codex_tool_loop_with_reasoning() -> None:
    assert FIXTURES, "the Codex fixture ships with the repository"
    for path in FIXTURES:
        body = fixture(path, "tools")
        kinds = [item.get("type") for item in body["input"]]
        assert kinds.count("reasoning") >= 2 and kinds.count("function_call_output") >= 2
        assert len(instructions(body)) >= 2 and body.get("tools")


def preview(body: dict[str, Any], role: str) -> dict[str, Any]:
    async def go() -> httpx.Response:
        app = create_app(load_config(REPO / "config" / "default.yaml", env={"HISTORY_PROXY_MOCK": "1"}))
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
                return await client.post("/v1/history/preview", json=body, headers={"X-Agent-Role": role})

    answer = asyncio.run(go())
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()["body"]
    return result


@pytest.mark.parametrize("form", ["tools", "additional_tools"])
@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_every_role_of_the_default_config_keeps_instructions_tools_task_and_own_work(
    path: Path, role: str, form: str
) -> None:
    body = fixture(path, form)
    assert_nothing_needed_is_lost(preview(body, role), body, f"{role} on the {form} form")


@pytest.mark.parametrize("form", ["tools", "additional_tools"])
@pytest.mark.parametrize("name", [n for n in CHAINS if n not in TEXT_REPLACED])
def test_every_view_filter_keeps_instructions_tools_task_and_own_work(name: str, form: str) -> None:
    for path in FIXTURES:
        body = fixture(path, form)
        snapshot = copy.deepcopy(body)
        sent = run("responses", CHAINS[name], body)
        assert body == snapshot
        if name in EDITS_WORK:  # by definition: the instructions and the newest task stay
            assert sent["input"][: len(instructions(body))] == instructions(body), name
            assert newest_turn(body)[0] in sent["input"], name
            continue
        assert_nothing_needed_is_lost(sent, body, f"{name} on the {form} form")
