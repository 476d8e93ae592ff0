"""Another method than POST on a shaped route (issue 35, L5): never read as a body that is not JSON.

The preview is the proxy's own route: 405 with ``Allow: POST``. The API routes are the upstream's:
another method is forwarded as any other path (OpenAI lists stored chat completions on ``GET
/v1/chat/completions``), and the built-in mock answers 405 as the providers do.
"""

from __future__ import annotations

import httpx
import pytest

from history_proxy.config.loading import load_config
from history_proxy.config.models import DEFAULT_CONFIG_PATH
from history_proxy.server.app import create_app

pytestmark = pytest.mark.anyio


async def get(path: str) -> httpx.Response:
    app = create_app(load_config(DEFAULT_CONFIG_PATH, env={"HISTORY_PROXY_MOCK": "1"}))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client,
    ):
        return await client.get(path)


async def test_get_on_the_preview_is_405_with_allow_post() -> None:
    answer = await get("/v1/history/preview")
    assert answer.status_code == 405 and answer.headers["allow"] == "POST"
    assert answer.json()["error"]["code"] == "method_not_allowed"


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses", "/v1/messages"])
async def test_get_on_an_api_route_is_the_upstreams_to_answer(path: str) -> None:
    answer = await get(path)
    assert answer.status_code == 405 and answer.headers["allow"] == "POST"
    assert answer.headers["x-history-mock"] == "1", "forwarded: the (mock) upstream answered"
    assert "not valid JSON" not in answer.text
