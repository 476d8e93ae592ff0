"""The built-in mock upstream behind a recorder, served by uvicorn in a thread on a free loopback port."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from starlette.types import Message, Receive, Scope, Send

from history_proxy.mock.upstream import create_mock_app
from tests.support.serve_process import free_port

UPSTREAM_KEY = "sk-ant-upstream-key"


class Recorder:
    """An ASGI app recording every request (path, headers, JSON body) before the mock answers it."""

    def __init__(self, chunks: int = 3, *, compaction: bool = True) -> None:
        self.app = create_mock_app(chunks=chunks, compaction=compaction)
        self.seen: list[dict[str, Any]] = []

    async def intercept(self, path: str, body: Any, scope: Scope, receive: Receive, send: Send) -> bool:
        """Answer a recorded request here instead of the mock (``True``: answered); a subclass's hook."""
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        raw = b"".join(chunks)
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        body = json.loads(raw) if raw else None
        self.seen.append({"path": scope["path"], "headers": headers, "body": body})
        if await self.intercept(scope["path"], body, scope, receive, send):
            return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return await receive()  # waits for the client to go
            sent = True
            return {"type": "http.request", "body": raw, "more_body": False}

        await self.app(scope, replay, send)

    def last(self, path: str) -> dict[str, Any]:
        return next(r for r in reversed(self.seen) if r["path"] == path)


def serve_in_thread(app: Any) -> Iterator[str]:
    """``app`` served by uvicorn in a thread on a free loopback port; yields its ``/v1`` URL."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def recorder() -> Iterator[tuple[Recorder, str]]:
    app = Recorder()
    for url in serve_in_thread(app):
        yield app, url
