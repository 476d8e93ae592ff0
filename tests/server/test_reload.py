"""Config reload: ``POST /admin/reload`` and ``SIGHUP`` re-read the file the proxy started with and
swap in the new config whole; a bad file is refused with located errors while the old config keeps
serving; a request in flight finishes on the config it started with.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import respx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from history_proxy.config.loading import ConfigError, load_config, parse_config
from history_proxy.server.app import create_app
from tests.factories import action, result, system, user
from tests.support.serve_process import serving
from tests.upstream_respx import UPSTREAM_MOCKER

pytestmark = pytest.mark.anyio

MAIN = "https://upstream.test/v1"
NEXT = "https://next-upstream.test/v1"
TEAM_KEY = "hp-team-key-0123456789"
ADMIN_KEY = "hp-admin-key-9876543210"
TEAM, ADMIN = {"authorization": f"Bearer {TEAM_KEY}"}, {"authorization": f"Bearer {ADMIN_KEY}"}
COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-4o",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}],
}


@pytest.fixture
def mocked() -> Iterator[respx.MockRouter]:
    with respx.mock(assert_all_called=False, using=UPSTREAM_MOCKER) as router:
        router.post(f"{MAIN}/chat/completions").mock(return_value=httpx.Response(200, json=COMPLETION))
        router.post(f"{NEXT}/chat/completions").mock(return_value=httpx.Response(200, json=COMPLETION))
        yield router


def config_doc(
    *, base_url: str = MAIN, worker: list[dict[str, Any]] | None = None, **extra: Any
) -> dict[str, Any]:
    return {
        "upstreams": {"main": {"base_url": base_url, "retries": 1}},
        "auth": {"keys": [{"key": TEAM_KEY, "tenant": "team-a"}, {"key": ADMIN_KEY, "tenant": "ops"}]},
        "admin": {"tenants": ["ops"]},
        "policies": {"roles": {"worker": worker if worker is not None else [{"type": "passthrough"}]}},
        **extra,
    }


def write(path: Path, doc: dict[str, Any]) -> None:
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")


@asynccontextmanager
async def serve(path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    """The app started from the config file at ``path``, and its internals for the assertions."""
    app = create_app(load_config(path), config_path=str(path))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client,
    ):
        yield client, app.state.proxy


def chat() -> dict[str, Any]:
    first = action()
    return {"model": "gpt-4o", "messages": [system(), user("go"), first, result(first, "x" * 200)]}


async def filters_now(client: httpx.AsyncClient) -> str:
    answer = await client.post(
        "/v1/chat/completions", json=chat(), headers={**TEAM, "x-agent-role": "worker"}
    )
    assert answer.status_code == 200
    return answer.headers["x-history-filters"]


TRUNCATING = [{"type": "tool_result_truncation", "keep_recent": 0, "max_chars": 20}]


# --- POST /admin/reload ------------------------------------------------------------------------------


async def test_admin_reload_swaps_in_the_edited_file(mocked: respx.MockRouter, tmp_path: Path) -> None:
    path = tmp_path / "proxy.yaml"
    write(path, config_doc())
    async with serve(path) as (client, proxy):
        assert await filters_now(client) == "passthrough"
        tokens, pool = proxy.states.latest.pipeline.tokens, proxy.states.latest.upstreams._pool
        write(path, config_doc(worker=TRUNCATING))
        answer = await client.post("/admin/reload", headers=ADMIN)

        assert answer.status_code == 200
        assert answer.json()["status"] == "reloaded" and answer.json()["generation"] == 1
        assert "1 upstream(s)" in answer.json()["config"]
        assert await filters_now(client) == "tool_result_truncation"
        assert (
            proxy.states.latest.pipeline.tokens is tokens and proxy.states.latest.upstreams._pool is pool
        )  # shared, not rebuilt


async def test_an_invalid_file_is_refused_with_located_errors_and_the_old_config_keeps_serving(
    mocked: respx.MockRouter, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "proxy.yaml"
    write(path, config_doc(worker=TRUNCATING))
    async with serve(path) as (client, _):
        write(
            path, config_doc(worker=[{"type": "last_n_observations", "n": 0}], limits={"max_concurrent": -1})
        )
        answer = await client.post("/admin/reload", headers=ADMIN)
        path.write_text("upstreams: {main: [unclosed", encoding="utf-8")
        not_yaml = await client.post("/admin/reload", headers=ADMIN)
        path.unlink()
        missing = await client.post("/admin/reload", headers=ADMIN)

        assert [answer.status_code, not_yaml.status_code, missing.status_code] == [400, 400, 400]
        message = answer.json()["error"]["message"]
        assert answer.json()["error"]["code"] == "invalid_config"
        assert "policies.roles.worker[0].n: must be >= 1" in message
        assert "limits.max_concurrent: must be > 0" in message
        assert "line 1" in not_yaml.json()["error"]["message"]
        assert "cannot read" in missing.json()["error"]["message"]
        assert await filters_now(client) == "tool_result_truncation"
    refusals = [r.getMessage() for r in caplog.records if "reload refused" in r.getMessage()]
    assert len(refusals) == 3 and "limits.max_concurrent: must be > 0" in refusals[0]


@pytest.mark.parametrize(
    ("headers", "status"),
    [({}, 401), ({"authorization": "Bearer nope"}, 401), (TEAM, 403), (ADMIN, 200)],
    ids=["no-key", "unknown-key", "tenant-not-admin", "admin"],
)
async def test_admin_reload_needs_the_key_of_an_admin_tenant(
    mocked: respx.MockRouter, tmp_path: Path, headers: dict[str, str], status: int
) -> None:
    path = tmp_path / "proxy.yaml"
    write(path, config_doc())
    async with serve(path) as (client, proxy):
        answer = await client.post("/admin/reload", headers=headers)
    assert answer.status_code == status
    assert proxy.states.latest.generation == (1 if status == 200 else 0)


async def test_admin_endpoints_are_off_without_proxy_keys(mocked: respx.MockRouter, tmp_path: Path) -> None:
    path = tmp_path / "proxy.yaml"
    write(path, {"upstreams": {"main": {"base_url": MAIN}}})
    async with serve(path) as (client, _):
        answer = await client.post("/admin/reload", headers=ADMIN)
    assert answer.status_code == 403
    assert "auth.keys and admin.tenants" in answer.json()["error"]["message"]


def test_admin_tenants_must_hold_a_proxy_key() -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config({**config_doc(), "admin": {"tenants": ["ops", "root"]}}, env={})
    assert refused.value.errors == ["admin: tenants[1]: 'root' has no proxy key in auth.keys"]


async def test_an_app_given_its_config_in_code_has_no_file_to_reload(mocked: respx.MockRouter) -> None:
    app = create_app(parse_config(config_doc(), env={}))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client,
    ):
        answer = await client.post("/admin/reload", headers=ADMIN)
    assert answer.status_code == 400 and "not read from a file" in answer.json()["error"]["message"]


# --- SIGHUP --------------------------------------------------------------------------------------------


async def test_sighup_reloads_the_file_and_refuses_a_bad_one(
    mocked: respx.MockRouter, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "proxy.yaml"
    write(path, config_doc())
    async with serve(path) as (client, proxy):
        write(path, config_doc(worker=TRUNCATING))
        os.kill(os.getpid(), signal.SIGHUP)
        with anyio.fail_after(5):
            while proxy.states.latest.generation != 1:
                await asyncio.sleep(0.01)
        assert await filters_now(client) == "tool_result_truncation"

        write(path, config_doc(worker=[{"type": "no_such_filter"}]))
        os.kill(os.getpid(), signal.SIGHUP)
        with anyio.fail_after(5):
            while not any("reload refused" in r.getMessage() for r in caplog.records):
                await asyncio.sleep(0.01)
        assert proxy.states.latest.generation == 1
        assert await filters_now(client) == "tool_result_truncation"
    assert "policies.roles.worker[0]: unknown filter type 'no_such_filter'" in caplog.text
    assert signal.getsignal(signal.SIGHUP) == signal.SIG_DFL  # handed back when the app stopped


# --- requests in flight ------------------------------------------------------------------------------


async def test_a_request_in_flight_finishes_on_the_config_it_started_with(tmp_path: Path) -> None:
    """A request whose body is still arriving when the config is reloaded runs the old chain and
    goes to the old upstream URL; the next request gets the new ones."""
    path = tmp_path / "proxy.yaml"
    write(path, config_doc())
    started, reloaded = asyncio.Event(), asyncio.Event()

    async def body_in_two_parts() -> AsyncIterator[bytes]:
        raw = json.dumps(chat()).encode()
        yield raw[:10]
        started.set()  # the proxy has the first part and asks for more
        await reloaded.wait()
        yield raw[10:]

    with respx.mock(assert_all_called=False, using=UPSTREAM_MOCKER) as router:
        old = router.post(f"{MAIN}/chat/completions").mock(return_value=httpx.Response(200, json=COMPLETION))
        new = router.post(f"{NEXT}/chat/completions").mock(return_value=httpx.Response(200, json=COMPLETION))
        async with serve(path) as (client, _):
            in_flight = asyncio.create_task(
                client.post(
                    "/v1/chat/completions",
                    content=body_in_two_parts(),
                    headers={**TEAM, "x-agent-role": "worker", "content-type": "application/json"},
                )
            )
            await asyncio.wait_for(started.wait(), 5)
            write(path, config_doc(base_url=NEXT, worker=TRUNCATING))
            assert (await client.post("/admin/reload", headers=ADMIN)).status_code == 200
            reloaded.set()
            answer = await asyncio.wait_for(in_flight, 5)
            after = await filters_now(client)

    assert answer.status_code == 200
    assert answer.headers["x-history-filters"] == "passthrough" and old.call_count == 1
    assert after == "tool_result_truncation" and new.call_count == 1


async def test_roles_added_by_a_reload_become_metric_labels(mocked: respx.MockRouter, tmp_path: Path) -> None:
    path = tmp_path / "proxy.yaml"
    write(path, config_doc())
    async with serve(path) as (client, _):
        headers = {**TEAM, "x-agent-role": "reviewer"}
        await client.post("/v1/chat/completions", json=chat(), headers=headers)
        write(path, {**config_doc(), "policies": {"roles": {"reviewer": [{"type": "passthrough"}]}}})
        assert (await client.post("/admin/reload", headers=ADMIN)).status_code == 200
        await client.post("/v1/chat/completions", json=chat(), headers=headers)
        metrics = (await client.get("/metrics")).text
    roles = [
        sample.labels["role"]
        for family in text_string_to_metric_families(metrics)
        for sample in family.samples
        if sample.name == "history_proxy_requests_total" and sample.labels["upstream"] == "main"
    ]
    assert sorted(roles) == ["default", "reviewer"]  # before the reload, reviewer was an unknown role


async def test_a_reload_to_the_built_in_mock_starts_it(mocked: respx.MockRouter, tmp_path: Path) -> None:
    mocked.route(host="127.0.0.1").pass_through()  # the built-in mock listens on loopback
    path = tmp_path / "proxy.yaml"
    write(path, config_doc())
    async with serve(path) as (client, _):
        write(path, config_doc(base_url="mock://"))
        assert (await client.post("/admin/reload", headers=ADMIN)).status_code == 200
        answer = await client.post("/v1/chat/completions", json=chat(), headers=TEAM)
    assert answer.status_code == 200
    assert answer.json()["choices"][0]["message"]["content"].startswith("mock: received 4 messages")
    assert {call.request.url.host for call in mocked.calls} == {"127.0.0.1"}


def test_the_reload_log_never_shows_secrets(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    path = tmp_path / "proxy.yaml"
    write(
        path,
        {**config_doc(), "upstreams": {"main": {"base_url": MAIN, "api_key": "sk-PLANTEDsecret0123456789"}}},
    )

    async def reload_twice() -> None:
        app = create_app(load_config(path), config_path=str(path))
        async with app.router.lifespan_context(app):
            await app.state.proxy.reloader.reload()
            write(
                path,
                {
                    **config_doc(),
                    "upstreams": {"main": {"base_url": 7, "api_key": "sk-PLANTEDsecret0123456789"}},
                },
            )
            with pytest.raises(ConfigError):
                await app.state.proxy.reloader.reload()

    anyio.run(reload_twice)
    assert "config reloaded" in caplog.text and "reload refused" in caplog.text
    assert "sk-PLANTEDsecret" not in caplog.text
    assert TEAM_KEY not in caplog.text and ADMIN_KEY not in caplog.text


def filters_at(url: str, headers: dict[str, str] | None = None) -> str:
    """The filters a worker request ran, on a fresh connection (the kernel spreads them over workers)."""
    answer = httpx.post(
        f"{url}/v1/chat/completions",
        json=chat(),
        headers={**(headers or {}), "x-agent-role": "worker"},
        timeout=10,
    )
    assert answer.status_code == 200
    return answer.headers["x-history-filters"]


def test_sighup_reloads_a_running_serve_process(tmp_path: Path) -> None:
    """The real command: ``history-proxy serve`` picks up the edited file on SIGHUP."""
    path = tmp_path / "proxy.yaml"
    write(path, {"upstreams": {"mock": {"base_url": "mock://"}}, "policies": {"roles": {"worker": []}}})
    with serving(path, tmp_path) as (url, server):
        assert filters_at(url) == ""
        write(
            path,
            {"upstreams": {"mock": {"base_url": "mock://"}}, "policies": {"roles": {"worker": TRUNCATING}}},
        )
        server.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while filters_at(url) != "tool_result_truncation":
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            time.sleep(0.05)


def test_admin_reload_reaches_every_worker_of_serve_with_several_workers(tmp_path: Path) -> None:
    """Under ``--workers 2`` the worker answering the admin call has the supervisor replace them all."""
    path = tmp_path / "proxy.yaml"
    write(path, config_doc(base_url="mock://", worker=[]))
    with serving(path, tmp_path, "--workers", "2") as (url, server):
        assert {filters_at(url, TEAM) for _ in range(8)} == {""}
        write(path, config_doc(base_url="mock://", worker=TRUNCATING))
        answer = httpx.post(f"{url}/admin/reload", headers=ADMIN, timeout=10)
        assert answer.status_code == 200 and answer.json()["workers"] == "restarting"
        deadline = time.monotonic() + 60
        while True:  # the supervisor replaces both workers, one after the other
            text = (tmp_path / "serve.log").read_text()
            if text.count("Started server process") == 4 and text.count("Finished server process") == 2:
                break
            assert time.monotonic() < deadline and server.poll() is None, text
            time.sleep(0.05)
        # whichever worker answers
        assert {filters_at(url, TEAM) for _ in range(20)} == {"tool_result_truncation"}
