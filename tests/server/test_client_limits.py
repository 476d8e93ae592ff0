"""Hostile clients against ``history-proxy serve`` over raw sockets: heads bounded in size, count and
time, bodies in time.

Every exchange here is bounded by a byte budget and a socket timeout, so a proxy that keeps reading
fails the test instead of hanging it.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.support.serve_process import serving

SOCKET_TIMEOUT_S = 15
"""Far beyond any answer a bounded proxy gives; a proxy that never answers fails here."""


@contextlib.contextmanager
def served(tmp_path: Path, limits: dict[str, Any] | None = None, **doc: Any) -> Iterator[tuple[str, int]]:
    path = tmp_path / "proxy.yaml"
    doc = {"upstreams": {"mock": {"base_url": "mock://"}}, "limits": limits or {}, **doc}
    path.write_text(json.dumps(doc), encoding="utf-8")
    with serving(path, tmp_path) as (url, _server):
        parts = urlsplit(url)
        assert parts.hostname is not None and parts.port is not None
        yield parts.hostname, parts.port


def connect(address: tuple[str, int]) -> socket.socket:
    sock = socket.create_connection(address, timeout=SOCKET_TIMEOUT_S)
    sock.settimeout(SOCKET_TIMEOUT_S)
    return sock


def read_answer(sock: socket.socket, budget: int = 1 << 20) -> bytes:
    """Everything the proxy sends until it closes the connection (at most ``budget`` bytes)."""
    received = b""
    while len(received) < budget:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        received += chunk
    return received


def send_endlessly(sock: socket.socket, head: bytes, line: bytes, budget: int) -> int:
    """Send ``head`` then ``line`` again and again until the proxy stops reading or ``budget`` bytes."""
    sent = 0
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        sock.sendall(head)
        while sent < budget:
            sock.sendall(line)
            sent += len(line)
    return sent


def status_of(answer: bytes) -> int:
    assert answer.startswith(b"HTTP/1.1 "), answer[:200]
    return int(answer.split(b" ", 2)[1])


def error_of(answer: bytes) -> dict[str, Any]:
    body: dict[str, dict[str, Any]] = json.loads(answer.partition(b"\r\n\r\n")[2])
    return body["error"]


def test_endless_header_lines_are_431_and_the_connection_closed(tmp_path: Path) -> None:
    with served(tmp_path) as address, connect(address) as sock:
        line = b"X-Pad: " + b"a" * 1000 + b"\r\n"
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\n"
        send_endlessly(sock, head, line, budget=64 << 20)
        answer = read_answer(sock)
    assert status_of(answer) == 431
    error = error_of(answer)
    assert error["code"] == "request_headers_too_large" and "limits.max_header_bytes" in error["message"]
    assert b"connection: close" in answer.lower()


def test_an_oversized_head_is_refused_before_auth_is_asked_for(tmp_path: Path) -> None:
    keys = {"keys": [{"key": "sk-proxy-only-key", "tenant": "a"}]}
    with served(tmp_path, {"max_header_bytes": 4096}, auth=keys) as address, connect(address) as sock:
        pad = b"".join(b"X-Pad-%d: %s\r\n" % (i, b"p" * 100) for i in range(60))  # ~6.5 KB, no key
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\n" + pad + b"\r\n")
        answer = read_answer(sock)
    assert status_of(answer) == 431  # not 401: nothing past the head limit ran


def test_a_small_head_sent_with_a_large_body_in_one_write_is_served(tmp_path: Path) -> None:
    body = json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "x" * 20000}]}).encode()
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/json\r\n"
    head += b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body)
    with served(tmp_path, {"max_header_bytes": 4096}) as address, connect(address) as sock:
        sock.sendall(head + body)
        answer = read_answer(sock)
    assert status_of(answer) == 200


def test_one_endless_header_value_is_431(tmp_path: Path) -> None:
    with served(tmp_path, {"max_header_bytes": 8192}) as address, connect(address) as sock:
        send_endlessly(sock, b"GET /healthz HTTP/1.1\r\nX-Long: ", b"b" * 4096, budget=64 << 20)
        answer = read_answer(sock)
    assert status_of(answer) == 431


def test_too_many_header_lines_are_431(tmp_path: Path) -> None:
    with served(tmp_path, {"max_headers": 20}) as address, connect(address) as sock:
        lines = b"".join(b"X-H%d: v\r\n" % i for i in range(30))
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: proxy\r\n" + lines + b"\r\n")
        answer = read_answer(sock)
    assert status_of(answer) == 431 and "limits.max_headers" in error_of(answer)["message"]


def test_a_messages_request_is_refused_in_anthropics_error_shape(tmp_path: Path) -> None:
    with served(tmp_path, {"max_headers": 20}) as address, connect(address) as sock:
        lines = b"".join(b"X-H%d: v\r\n" % i for i in range(30))
        sock.sendall(b"POST /v1/messages?beta=true HTTP/1.1\r\nHost: proxy\r\n" + lines + b"\r\n")
        answer = read_answer(sock)
    assert status_of(answer) == 431
    body = json.loads(answer.partition(b"\r\n\r\n")[2])
    assert body["type"] == "error" and "limits.max_headers" in body["error"]["message"]


def test_heads_within_the_limits_are_served(tmp_path: Path) -> None:
    with served(tmp_path, {"max_headers": 20}) as address, connect(address) as sock:
        lines = b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 500) for i in range(18))
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: proxy\r\n" + lines + b"Connection: close\r\n\r\n")
        answer = read_answer(sock)
    assert status_of(answer) == 200


@pytest.mark.parametrize("partial", [b"", b"GET /healthz HTTP/1.1\r\nHost: pro"])
def test_a_head_never_finished_is_408_after_header_timeout(tmp_path: Path, partial: bytes) -> None:
    with served(tmp_path, {"header_timeout_s": 0.5}) as address, connect(address) as sock:
        sock.sendall(partial)
        answer = read_answer(sock)
    assert status_of(answer) == 408 and "limits.header_timeout_s" in error_of(answer)["message"]


def test_a_body_that_stops_arriving_is_408_and_the_connection_closed(tmp_path: Path) -> None:
    with served(tmp_path, {"body_timeout_s": 0.5}) as address, connect(address) as sock:
        body = b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}'
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/json\r\n"
        sock.sendall(head + b"Content-Length: %d\r\n\r\n" % len(body) + body[:-10])  # then nothing
        answer = read_answer(sock)
    assert status_of(answer) == 408 and "limits.body_timeout_s" in error_of(answer)["message"]


def test_a_body_that_keeps_coming_is_served(tmp_path: Path) -> None:
    with served(tmp_path, {"body_timeout_s": 1}) as address, connect(address) as sock:
        body = b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}'
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/json\r\n"
        sock.sendall(head + b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body))
        for start in range(0, len(body), 10):  # in pieces, each well within the timeout, all beyond it
            sock.sendall(body[start : start + 10])
            time.sleep(0.2)
        answer = read_answer(sock)
    assert status_of(answer) == 200
