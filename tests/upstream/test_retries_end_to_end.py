"""Retries end to end (issue 34, item 7): each SDK, at ``max_retries=0`` and at its default, through the
real ``history-proxy serve`` to an upstream that answers every call 429, 500 or 503.

What is counted is the total number of upstream calls one client call costs, with the upstream's
``status_retries`` at ``auto`` (the default: the proxy leaves a 429/502/503 to a client that retries on
its own) and at ``proxy``. The SDKs send ``x-stainless-retry-count`` even at ``max_retries=0``, so
``auto`` leaves the retries to them there too: a client that asked for no retries gets none. The
measured counts must equal the table in docs/reliability.md, row for row.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
import yaml

from tests.support.serve_process import REPO, Server, start

DOCS = REPO / "docs" / "reliability.md"
TABLE_HEADING = "### Upstream calls per client call"
RETRIES = 2  # the upstream's `retries` (the default)


class Failing:
    """An upstream on a free loopback port that answers every POST with ``status`` (and
    ``retry-after-ms: 50``, so the retries are quick) and keeps the ``x-stainless-retry-count`` each
    call carried."""

    def __init__(self) -> None:
        self.status = 429
        self.calls: list[str | None] = []
        self._lock = threading.Lock()
        failing = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", "0")))
                with failing._lock:
                    failing.calls.append(self.headers.get("x-stainless-retry-count"))
                body = json.dumps({"error": {"message": "try later", "type": "rate_limit_error"}}).encode()
                self.send_response(failing.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.send_header("retry-after-ms", "50")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def reset(self, status: int) -> None:
        with self._lock:
            self.status, self.calls = status, []


@pytest.fixture(scope="module")
def upstream() -> Iterator[Failing]:
    failing = Failing()
    thread = threading.Thread(target=failing.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield failing
    finally:
        failing.server.shutdown()
        failing.server.server_close()


@contextmanager
def proxy(folder: Path, upstream: Failing, status_retries: str) -> Iterator[Server]:
    config = {
        "upstreams": {
            "openai": {"base_url": upstream.url, "status_retries": status_retries},
            "claude": {"base_url": upstream.url, "api": "anthropic", "status_retries": status_retries},
        },
        "routes": [{"model": "claude-*", "upstream": "claude"}],
        "limits": {"connect_timeout_s": 2, "read_timeout_s": 10},
    }
    path = folder / f"{status_retries}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    yield from start(
        "serve", "--config", str(path), log=folder / f"{status_retries}.log", ready_path="/healthz"
    )


@pytest.fixture(scope="module")
def proxies(upstream: Failing, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Server]]:
    folder = tmp_path_factory.mktemp("retries")
    with proxy(folder, upstream, "auto") as auto, proxy(folder, upstream, "proxy") as by_proxy:
        yield {"auto": auto, "proxy": by_proxy}


def openai_call(url: str, max_retries: int | None) -> None:
    options = {} if max_retries is None else {"max_retries": max_retries}
    with openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", **options) as client:  # type: ignore[arg-type]
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])


def anthropic_call(url: str, max_retries: int | None) -> None:
    options = {} if max_retries is None else {"max_retries": max_retries}
    with anthropic.Anthropic(base_url=url, api_key="sk-ant-test", **options) as client:  # type: ignore[arg-type]
        client.messages.create(model="claude-x", max_tokens=8, messages=[{"role": "user", "content": "hi"}])


def plain_call(url: str, max_retries: int | None) -> None:
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30).raise_for_status()


CLIENTS: dict[str, Callable[[str, int | None], None]] = {
    "openai SDK": openai_call,
    "anthropic SDK": anthropic_call,
    "httpx (no SDK)": plain_call,
}
ERRORS = (openai.APIStatusError, anthropic.APIStatusError, httpx.HTTPStatusError)


def documented_rows() -> list[tuple[str, int | None, int, int, int]]:
    """The rows of docs/reliability.md's table: client, max_retries (None: default), status, then the
    upstream calls with ``status_retries: auto`` and with ``proxy``."""
    text = DOCS.read_text(encoding="utf-8")
    section = text.split(TABLE_HEADING, 1)[1].split("\n#", 1)[0]
    table = [line for line in section.splitlines() if line.startswith("|")]
    rows = []
    for line in table[2:]:
        client, retries, status, auto, by_proxy = (cell.strip() for cell in line.strip("|").split("|"))
        number = re.match(r"\d+", retries)
        max_retries = None if "default" in retries or number is None else int(number.group())
        rows.append((client, max_retries, int(status), int(auto), int(by_proxy)))
    return rows


def test_the_table_covers_each_sdk_at_no_retries_and_at_its_default_against_429_and_5xx() -> None:
    rows = documented_rows()
    for client in ("openai SDK", "anthropic SDK"):
        for max_retries in (0, None):
            assert {s for c, m, s, *_ in rows if (c, m) == (client, max_retries)} == {429, 500, 503}


@pytest.mark.parametrize("row", documented_rows(), ids=lambda row: f"{row[0]}-{row[1]}-{row[2]}")
def test_upstream_calls_per_client_call_are_those_the_reliability_table_says(
    row: tuple[str, int | None, int, int, int], upstream: Failing, proxies: dict[str, Server]
) -> None:
    client, max_retries, status, *documented = row
    measured = []
    for setting in ("auto", "proxy"):
        upstream.reset(status)
        with pytest.raises(ERRORS) as raised:
            CLIENTS[client](proxies[setting].url, max_retries)
        error = raised.value
        assert isinstance(error, ERRORS) and error.response.status_code == status  # passed back as is
        measured.append(len(upstream.calls))
        if client != "httpx (no SDK)":  # the header that says the SDK retries, sent even at max_retries=0
            assert upstream.calls[0] == "0"
    assert measured == documented


def test_sdk_retries_at_max_retries_zero_are_left_to_the_client_so_none_are_made(
    upstream: Failing, proxies: dict[str, Server]
) -> None:
    upstream.reset(429)
    with pytest.raises(openai.RateLimitError):
        openai_call(proxies["auto"].url, 0)
    assert upstream.calls == ["0"]  # one call: the proxy did not retry for a client that asked for none
    upstream.reset(429)
    with pytest.raises(openai.RateLimitError):
        openai_call(proxies["auto"].url, 2)
    assert upstream.calls == ["0", "1", "2"]  # the SDK's own three tries, not 3 x 3
