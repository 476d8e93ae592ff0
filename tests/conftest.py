"""Fixtures shared by the test modules; a module that needs something else defines its own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import respx

from tests.support.recorder import recorder  # noqa: F401 - the module-scoped fixture, for every module
from tests.support.redis_server import redis_server  # noqa: F401 - the fixture, for every module
from tests.support.scripted_server import certificate  # noqa: F401 - the fixture, for every module
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


def pytest_report_header(config: pytest.Config) -> list[str]:
    """What `make test` installs or skips beyond .venv, and why, printed before the first test."""
    import hashlib
    import shutil
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    venv = root / ".venv-frameworks"
    requirements = root / "tests" / "corpus" / "recording" / "requirements.txt"
    stamp = venv / ".installed"
    ready = (
        requirements.exists()
        and stamp.exists()
        and stamp.read_text().strip() == hashlib.sha256(requirements.read_bytes()).hexdigest()
    )
    wanted = "frameworks" in (config.option.markexpr or "frameworks")  # `-m "not frameworks"` opts out
    if not wanted:
        frameworks = "not selected (-m)"
    elif ready:
        frameworks = "installed in .venv-frameworks"
    else:
        frameworks = (
            ".venv-frameworks not built yet: tests/test_frameworks_e2e.py installs AutoGen and CrewAI there "
            "when it runs (about 1 GB and 90 s, once; it skips with the reason when the package index is unreachable)"
        )
    found = {name: shutil.which(name) for name in ("chromium", "redis-server")}
    missing = {
        "chromium": "the replay page's screenshot test skips",
        "redis-server": "the shared-summaries tests skip",
    }
    lines = [f"optional parts: frameworks tests: {frameworks}"]
    for name, path in found.items():
        status = f"found ({path})" if path else f"not installed: {missing[name]} (.ci/run installs it)"
        lines.append(f"optional parts: {name}: {status}")
    return lines
