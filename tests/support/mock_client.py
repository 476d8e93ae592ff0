"""One request to an ASGI app (the built-in mock) in process, from synchronous test code."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from starlette.applications import Starlette


def send(app: Starlette, method: str, path: str, **kwargs: Any) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://mock") as client:
            return await client.request(method, path, **kwargs)

    return asyncio.run(go())
