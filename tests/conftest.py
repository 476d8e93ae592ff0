"""Fixtures shared by the test modules; a module that needs something else defines its own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import respx

from tests.upstream_respx import UPSTREAM_MOCKER


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def mocked() -> Iterator[respx.MockRouter]:
    """Upstream hosts answered by respx; the proxy itself is called through ASGI, never intercepted."""
    with respx.mock(assert_all_called=False, using=UPSTREAM_MOCKER) as router:
        yield router
