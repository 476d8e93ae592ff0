"""The proxy app in process behind a proxy key, its upstream behind respx, and the access lines it writes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from history_proxy.config.loading import parse_config
from history_proxy.config.models import Config
from history_proxy.core.messages import Message
from history_proxy.server.app import create_app
from tests.factories import action, result, system, user

MAIN = "https://upstream.test/v1"
UPSTREAM_KEY = "sk-upstream-PLANTED-0123456789abcdef"
PROXY_KEY = "hp-proxy-PLANTED-fedcba9876543210"
CLIENT_SECRET = "sk-clientPLANTED9876543210abcdefXYZ"
CONTENT = "the launch code is swordfish"
LONG_OUTPUT = "\n".join(f"{i}: compiling module_{i}.py ... ok" for i in range(40))
COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-4o",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}],
}


def make_config(**overrides: Any) -> Config:
    raw: dict[str, Any] = {
        "upstreams": {"main": {"base_url": MAIN, "api_key": UPSTREAM_KEY, "retries": 0}},
        "auth": {"keys": [{"key": PROXY_KEY, "tenant": "team-a"}]},
        "policies": {
            "roles": {
                "worker": [
                    {"type": "tool_result_truncation", "keep_recent": 1, "max_chars": 20},
                    {"type": "token_limiter", "limit": 5000},
                ]
            }
        },
        **overrides,
    }
    return parse_config(raw, env={})


@asynccontextmanager
async def serve(config: Config) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(config)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://p",
            headers={"authorization": f"Bearer {PROXY_KEY}"},
        ) as client,
    ):
        yield client


def conversation() -> list[Message]:
    first, second = action(), action()
    return [
        system(),
        user(f"{CONTENT}; my key is {CLIENT_SECRET}"),
        first,
        result(first, LONG_OUTPUT),
        second,
        result(second, "recent output"),
    ]


def access_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [json.loads(r.getMessage()) for r in caplog.records if r.name == "history_proxy.access"]
