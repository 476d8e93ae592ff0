"""Identity is a hint, never a gate: every role view answers 200 without its header, and says what it did."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from history_proxy.config.loading import load_config
from history_proxy.config.models import DEFAULT_CONFIG_PATH
from history_proxy.server.app import create_app
from tests.factories import action, assistant, call, result, system, user

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def default_proxy() -> AsyncIterator[httpx.AsyncClient]:
    """The shipped default config, answered by the built-in mock (no API key in the environment)."""
    app = create_app(load_config(DEFAULT_CONFIG_PATH, env={"HISTORY_PROXY_MOCK": "1"}))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client,
    ):
        yield client


def crew_manager_request() -> list[dict[str, object]]:
    delegate = action(call("delegate_work_to_coworker", {"task": "research"}))
    return [
        system("You are Crew Manager."),
        user("Current Task: write 5 article ideas with a paragraph each."),
        delegate,
        result(delegate, "Here are five ideas ..."),
        user("Analyze the tool result. If requirements are met, provide the Final Answer."),
    ]


async def test_a_manager_without_a_phase_header_is_served_with_its_task_and_a_note() -> None:
    messages = crew_manager_request()
    async with default_proxy() as client:
        answer = await client.post(
            "/v1/history/preview",
            json={"model": "gpt-4o-mini", "messages": messages},
            headers={"x-agent-role": "manager"},
        )
    assert answer.status_code == 200
    assert answer.json()["body"]["messages"] == messages, "the task, the delegation and its answer all stay"
    assert answer.json()["report"]["notes"] == ["manager_view:phase_unknown"]


@pytest.mark.parametrize(
    ("role", "note"),
    [
        ("manager", "manager_view:phase_unknown"),
        ("worker", "worker_view:agent_unknown"),
        ("orchestrator", None),
    ],
)
async def test_each_view_answers_200_without_its_identity_header(role: str, note: str | None) -> None:
    messages = [
        system("team"),
        user("Write a slugify function.", name="user"),
        assistant("def slugify(t): ...", name="coder"),
        user("Add type hints, please.", name="reviewer"),
    ]
    async with default_proxy() as client:
        answer = await client.post(
            "/v1/chat/completions",
            json={"model": "gpt-4o-mini", "messages": messages},
            headers={"x-agent-role": role},
        )
    assert answer.status_code == 200
    assert answer.headers.get("x-history-notes") == note
    assert "received 4 messages" in answer.json()["choices"][0]["message"]["content"]


async def test_a_request_without_a_role_header_gets_the_default_role_and_says_so() -> None:
    async with default_proxy() as client:
        answer = await client.post(
            "/v1/chat/completions", json={"model": "gpt-4o-mini", "messages": [user("hi")]}
        )
    assert answer.status_code == 200
    assert answer.headers["x-history-role"] == "default"
    assert answer.headers["x-history-notes"] == "identity:role_defaulted"
    assert "identity:" not in answer.headers["x-history-filters"]


async def test_notes_reach_the_access_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="history_proxy.access")
    async with default_proxy() as client:
        await client.post(
            "/v1/chat/completions",
            json={"model": "gpt-4o-mini", "messages": crew_manager_request()},
            headers={"x-agent-role": "manager", "x-agent-name": 'Senior Researcher "EU" <x>'},
        )
    (record,) = [r for r in caplog.records if r.name == "history_proxy.access"]
    fields = vars(record)["access"]  # set through the log call's ``extra``
    assert fields["notes"] == ["manager_view:phase_unknown"]
    assert fields["agent"] == 'Senior Researcher "EU" <x>'
    assert json.loads(json.dumps(fields))["agent"] == fields["agent"]


async def ask_as(role: str, path: str) -> tuple[httpx.Response, str]:
    """One small request with ``X-Agent-Role: role`` to the default config, and /metrics after it."""
    async with default_proxy() as client:
        answer = await client.post(
            path,
            json={"model": "gpt-4o-mini", "messages": [system("s"), user("Fix the bug.")]},
            headers={"x-agent-role": role},
        )
        return answer, (await client.get("/metrics")).text


async def test_a_mistyped_role_is_served_by_the_default_chain_and_says_so() -> None:
    answer, metrics = await ask_as("Reviewer", "/v1/chat/completions")
    assert answer.status_code == 200
    assert answer.headers["x-history-notes"] == "identity:role_unknown:Reviewer"
    assert answer.headers["x-history-role"] == "default"
    assert 'history_proxy_role_hints_total{outcome="unknown"} 1.0' in metrics


async def test_a_role_in_other_case_runs_that_roles_chain_with_a_note() -> None:
    answer, _ = await ask_as("Worker", "/v1/history/preview")
    report = answer.json()["report"]
    assert report["role"] == "worker"
    assert "worker_view" in report["chain"]
    assert "identity:role_matched:Worker" in report["notes"]


def test_the_access_line_names_the_role_as_sent_beside_the_role_served() -> None:
    from history_proxy.core.identity import Identity
    from history_proxy.observability.access import Exchange

    who = Identity(role="default", notes=("identity:role_unknown:Reviewer",), role_sent="Reviewer")
    fields = Exchange(
        request_id="r", method="POST", path="/v1/chat/completions", started=0.0, identity=who
    ).fields()
    assert (fields["role"], fields["role_sent"]) == ("default", "Reviewer")
