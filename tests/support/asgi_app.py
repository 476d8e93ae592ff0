"""The proxy app in process over ASGI (httpx's transport), its upstreams behind respx: the raw HTTP view."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from history_proxy.config.loading import parse_config
from history_proxy.config.models import Config
from history_proxy.core.messages import Message
from history_proxy.server.app import create_app
from tests.factories import user

MAIN = "https://upstream.test/v1"
CLAUDE = "https://claude.test/v1"
UPSTREAM_KEY = "sk-upstream-PLANTED-0123456789abcdef"
PROXY_KEY = "hp-proxy-PLANTED-fedcba9876543210"
COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-4o",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}],
}


def make_config(*, auth: bool = False, **overrides: Any) -> Config:
    raw: dict[str, Any] = {
        "upstreams": {
            "main": {"base_url": MAIN, "api_key": UPSTREAM_KEY, "retries": 0},
            "claude": {"base_url": CLAUDE, "retries": 0},
        },
        "routes": [{"model": "claude-*", "upstream": "claude"}],
        "limits": {"connect_timeout_s": 0.5, "read_timeout_s": 0.5, "max_body_bytes": 4096},
        "policies": {
            "roles": {
                "worker": [
                    {"type": "passthrough"},
                    {"type": "tool_result_truncation", "keep_recent": 1, "max_chars": 20},
                ],
            }
        },
        **overrides,
    }
    if auth:
        raw["auth"] = {"keys": [{"key": PROXY_KEY, "tenant": "team-a"}]}
    return parse_config(raw, env={})


@asynccontextmanager
async def serve(config: Config) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(config)
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://p") as client,
    ):
        yield client


def chat(*messages: Message, **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": list(messages or [user("hi")]), **extra}
