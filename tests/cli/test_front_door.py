"""A newcomer's first commands: a config found anywhere, `init`, and errors that say what to do."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from history_proxy.cli import main
from history_proxy.config.loading import load_config
from history_proxy.config.locate import CONFIG_ENV, config_path, packaged_config
from tests.support.serve_process import free_port, offline_env

REPO = Path(__file__).resolve().parents[2]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_the_packaged_default_config_is_the_repositorys(monkeypatch: pytest.MonkeyPatch) -> None:
    assert packaged_config().read_text(encoding="utf-8") == (REPO / "config" / "default.yaml").read_text(
        encoding="utf-8"
    )
    load_config(packaged_config(), env={})


def test_without_any_config_outside_a_clone_the_packaged_default_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    assert config_path(None) == (packaged_config(), "packaged default")
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "default.yaml").write_text("upstreams: {m: {base_url: 'mock://'}}\n")
    assert config_path(None)[0] == Path("config/default.yaml")
    monkeypatch.setenv(CONFIG_ENV, "/elsewhere.yaml")
    assert config_path(None)[0] == Path("/elsewhere.yaml")
    assert config_path("mine.yaml")[0] == Path("mine.yaml")


def test_a_missing_config_names_config_and_init(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(capsys, "serve", "--config", str(tmp_path / "absent.yaml"))
    assert status == 1
    assert "absent.yaml: cannot read: no such file" in err
    assert "--config PATH" in err and "history-proxy init" in err


def test_init_writes_a_commented_starter_that_check_accepts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "starter.yaml"
    status, out, _ = run(capsys, "init", str(target))
    assert status == 0 and f"serve --config {target}" in out
    text = target.read_text(encoding="utf-8")
    assert text.startswith("#") and "policies:" in text
    assert run(capsys, "check", str(target))[0] == 0
    status, _, err = run(capsys, "init", str(target))
    assert status == 1 and "--force" in err, "an existing file is never overwritten silently"
    assert run(capsys, "init", "--force", str(target))[0] == 0


def test_preview_on_a_terminal_with_no_file_prints_usage_instead_of_waiting() -> None:
    if not hasattr(os, "openpty"):
        pytest.skip("no pseudo-terminals on this platform")
    primary, secondary = os.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "history_proxy", "preview"],
            stdin=secondary,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
            env=offline_env(),
        )
    finally:
        os.close(primary)
        os.close(secondary)
    assert done.returncode == 1
    assert "give a request body FILE" in done.stderr and "usage: history-proxy preview" in done.stderr


def test_serve_on_a_busy_port_says_so_before_anything_says_serving(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "history_proxy", "serve", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            env={k: v for k, v in offline_env().items() if k != "MAKELEVEL"},  # not under make: --port
        )
    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr and "--port" in done.stderr
    assert "serving on" not in done.stdout and "history-proxy ready" not in done.stderr


def test_preview_and_replay_print_the_note_of_a_mistyped_role(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = tmp_path / "body.json"
    body.write_text(
        '{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"},'
        ' {"role": "assistant", "content": "hello"}, {"role": "user", "content": "more"}]}'
    )
    status, out, _ = run(capsys, "preview", "--role", "Reviewer", str(body))
    assert status == 0 and "identity:role_unknown:Reviewer" in out
    status, out, _ = run(capsys, "replay", "--role", "WORKER", str(body))
    assert status == 0 and out.startswith("note: identity:role_matched:WORKER\n")
    assert "role worker" in out


def test_make_test_names_the_optional_parts_it_builds_or_skips(
    pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.conftest import pytest_report_header

    monkeypatch.setattr("shutil.which", lambda name: None)
    text = "\n".join(pytest_report_header(pytestconfig))
    assert "optional parts: frameworks tests:" in text
    assert "optional parts: chromium: not installed: the replay page's screenshot test skips" in text
    assert "optional parts: redis-server: not installed: the shared-summaries tests skip" in text


@pytest.mark.anyio
async def test_a_responses_body_sent_to_chat_completions_is_told_where_it_belongs() -> None:
    import httpx

    from history_proxy.server.app import create_app

    app = create_app(load_config(packaged_config(), env={}))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client,
    ):
        answer = await client.post("/v1/chat/completions", json={"model": "gpt-4o-mini", "input": "Hello"})
    assert answer.status_code == 400
    assert answer.json()["error"]["message"] == (
        "'messages' is required; a body with 'input' is a Responses API request (POST /v1/responses)"
    )


def test_check_without_a_path_checks_the_config_serve_would_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    status, out, _ = run(capsys, "check")
    assert status == 0 and out.startswith(f"config {packaged_config()} (the default config packaged with")
    assert ": ok: " in out


def test_the_file_init_wrote_is_the_one_check_preview_and_serve_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """M1: ``init`` writes ./history-proxy.yaml; the commands without --config look there first, and say so."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    assert run(capsys, "init")[0] == 0
    mine = tmp_path / "history-proxy.yaml"
    mine.write_text(mine.read_text().replace("roles:\n", "roles:\n    mine: [{type: passthrough}]\n", 1))
    assert config_path(None) == (Path("history-proxy.yaml"), "./history-proxy.yaml")
    status, out, _ = run(capsys, "check")
    assert status == 0 and out.startswith("config history-proxy.yaml (found in the working directory): ok:")
    assert "mine(1)" in out
    body = tmp_path / "body.json"
    body.write_text('{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}')
    status, out, err = run(capsys, "preview", "--role", "mine", str(body))
    assert status == 0 and "config history-proxy.yaml (found in the working directory)" in err
    assert '"role": "mine"' in out
    (tmp_path / "config").mkdir()  # a clone's config/default.yaml comes after it
    (tmp_path / "config" / "default.yaml").write_text("upstreams: {m: {base_url: 'mock://'}}\n")
    assert config_path(None)[0] == Path("history-proxy.yaml")


def test_serve_names_the_file_it_uses(tmp_path: Path) -> None:
    (tmp_path / "history-proxy.yaml").write_text(
        "upstreams: {m: {base_url: 'mock://'}}\npolicies: {roles: {default: []}}\n"
    )
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "history_proxy", "serve", "--port", str(port)],
        cwd=tmp_path,
        env=offline_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    with process:  # closes its stdout too
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
        finally:
            process.terminate()
            process.wait(timeout=20)
    assert "config history-proxy.yaml (found in the working directory)" in line, line
    assert "m = built-in mock (key: none)" in line


DEFAULT_ROLE_NAMING_NOTHING = """\
upstreams: {m: {base_url: 'mock://'}}
identity: {default_role: reviewer}
policies: {roles: {worker: [{type: worker_view}]}}
"""


def test_a_default_role_naming_no_role_is_refused_by_check_and_serve(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """M2: requests without a role would run only the global chain; check and serve say so instead."""
    path = tmp_path / "c.yaml"
    path.write_text(DEFAULT_ROLE_NAMING_NOTHING)
    expected = "identity.default_role: 'reviewer' names no role in policies.roles (roles: worker)"
    status, _, err = run(capsys, "check", str(path))
    assert status == 1 and expected in err
    status, _, err = run(capsys, "serve", "--config", str(path), "--port", "1")
    assert status == 1 and expected in err
    path.write_text(DEFAULT_ROLE_NAMING_NOTHING.replace("default_role: reviewer", "default_role: worker"))
    assert run(capsys, "check", str(path))[0] == 0


def test_the_port_hint_under_make_names_port(tmp_path: Path) -> None:
    """L6: under ``make run`` the port is chosen with PORT=, not --port."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "history_proxy", "serve", "--mock", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            env=offline_env(MAKELEVEL="1"),
        )
    assert done.returncode == 1 and "pick another with make run PORT=9000" in done.stderr


def test_closing_the_terminal_stops_serve_so_the_port_is_free_again(tmp_path: Path) -> None:
    """L4: `make run` in a terminal that closes gets SIGHUP; from a terminal that stops the server
    (without a terminal, SIGHUP still reloads the config: tests/server/test_reload.py)."""
    if not hasattr(os, "openpty"):
        pytest.skip("no pseudo-terminals on this platform")
    import signal
    import time

    import httpx

    port = free_port()
    primary, secondary = os.openpty()
    log = tmp_path / "serve.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "history_proxy", "serve", "--mock", "--port", str(port)],
            stdin=secondary,
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=offline_env(),
        )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        process.send_signal(signal.SIGHUP)
        assert process.wait(timeout=30) in (0, -signal.SIGTERM), log.read_text()  # uvicorn re-raises it
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        os.close(primary)
        os.close(secondary)
    assert "SIGHUP: the terminal closed; stopping" in log.read_text()
    with socket.socket() as again:
        again.bind(("127.0.0.1", port))


def test_replay_tool_loops_names_the_files_it_skips(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """L8: `replay --tool-loops N` says which files it left out, on stderr (stdout stays the table)."""
    loop = REPO / "tests" / "corpus" / "tau-bench-airline-task9-trial2.json"
    short = tmp_path / "short.json"
    short.write_text('{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}')
    status, out, err = run(capsys, "replay", "--tool-loops", "12", "--role", "worker", str(loop), str(short))
    assert status == 0 and "tau-bench-airline-task9-trial2.json" in out
    assert (
        "replay: skipped 1 of 2 files, not tool loops of 12 messages or more with a tool call: short.json"
        in err
    )
