"""No open proxy by accident (issue 34, item 6): ``serve`` on a non-loopback address with a server-side
upstream key and no ``auth.keys`` refuses to start, unless told it is meant."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.serve_process import REPO, Server, free_port, offline_env

DEPLOYED = REPO / "deploy" / "kubernetes" / "base" / "config.yaml"


def environment(**extra: str) -> dict[str, str]:
    return {**offline_env(), "OPENAI_API_KEY": "sk-server-side-key-0123456789", **extra}


def serve(tmp_path: Path, *args: str, env: dict[str, str]) -> Server:
    port = free_port()
    log = tmp_path / f"serve-{port}.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "history_proxy", "serve", *args, "--port", str(port)],
            cwd=REPO,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    return Server(process, port, log)


def refused(tmp_path: Path, *args: str, env: dict[str, str]) -> str:
    server = serve(tmp_path, *args, env=env)
    try:
        assert server.process.wait(timeout=60) == 1, server.output()
    finally:
        server.stop()
    return server.output()


def answers(tmp_path: Path, *args: str, env: dict[str, str]) -> None:
    server = serve(tmp_path, *args, env=env)
    try:
        server.wait_ready("/healthz")
        assert httpx.get(server.url + "/healthz", timeout=5).status_code == 200
    finally:
        server.stop()


def test_an_open_proxy_spending_a_server_side_key_on_every_interface_refuses_to_start(tmp_path: Path) -> None:
    output = refused(tmp_path, "--host", "0.0.0.0", env=environment())
    assert "refusing to serve an open proxy on 0.0.0.0" in output
    assert (
        "auth.keys" in output and "--allow-anonymous" in output and "HISTORY_PROXY_ALLOW_ANONYMOUS" in output
    )
    assert "sk-server-side-key" not in output  # the key itself is never printed
    assert "Traceback" not in output


@pytest.mark.parametrize(
    ("args", "extra"),
    [
        (("--host", "0.0.0.0", "--allow-anonymous"), {}),
        (("--host", "0.0.0.0"), {"HISTORY_PROXY_ALLOW_ANONYMOUS": "1"}),
        (("--host", "0.0.0.0", "--config", str(DEPLOYED)), {}),  # auth.allow_anonymous: true
        (("--host", "127.0.0.1"), {}),  # loopback: only this machine reaches it
    ],
    ids=["flag", "env", "config", "loopback"],
)
def test_it_starts_when_the_exposure_is_meant_or_local(
    tmp_path: Path, args: tuple[str, ...], extra: dict[str, str]
) -> None:
    answers(tmp_path, *args, env=environment(**extra))


def test_proxy_keys_or_no_server_side_key_start_on_every_interface(tmp_path: Path) -> None:
    config = tmp_path / "keys.yaml"
    config.write_text(
        'upstreams: {openai: {base_url: "https://api.openai.com/v1", api_key: "${OPENAI_API_KEY}"}}\n'
        'auth: {keys: [{key: "proxy-key-of-team-a", tenant: a}]}\n',
        encoding="utf-8",
    )
    answers(tmp_path, "--host", "0.0.0.0", "--config", str(config), env=environment())
    without_key = {k: v for k, v in offline_env().items() if k != "OPENAI_API_KEY"}
    assert "OPENAI_API_KEY" not in without_key and os.environ.get("HISTORY_PROXY_ALLOW_ANONYMOUS") is None
    answers(tmp_path, "--host", "0.0.0.0", env=without_key)  # the built-in mock spends no key
