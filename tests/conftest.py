"""Fixtures shared by the test modules; a module that needs something else defines its own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import respx

from tests.upstream_respx import PROXY_VARIABLES, UPSTREAM_MOCKER


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def mocked(monkeypatch: pytest.MonkeyPatch) -> Iterator[respx.MockRouter]:
    """Upstream hosts answered by respx; the proxy itself is called through ASGI, never intercepted.

    Proxy variables are cleared: with one set, the upstream client would use httpx's own
    transports, which this mocker does not patch.
    """
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    with respx.mock(assert_all_called=False, using=UPSTREAM_MOCKER) as router:
        yield router
