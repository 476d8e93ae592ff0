"""One door per endpoint: every spelling of a shaped route names that route."""

from __future__ import annotations

import pytest
from starlette.types import Scope

from history_proxy.server.doors import canonical, normalise


@pytest.mark.parametrize(
    ("path", "route"),
    [
        ("/v1/chat/completions", "/v1/chat/completions"),
        ("/v1//chat/completions", "/v1/chat/completions"),
        ("//v1/chat//completions//", "/v1/chat/completions"),
        ("/V1/Chat/Completions", "/v1/chat/completions"),
        ("/v1/messages/", "/v1/messages"),
        ("/v1/messages//count_tokens", "/v1/messages/count_tokens"),
        ("/v1//responses ", "/v1/responses"),
        ("/v1/history//preview", "/v1/history/preview"),
        ("/v1/models", None),
        ("/v1/responses/resp_1", None),
    ],
)
def test_spellings_name_their_shaped_route(path: str, route: str | None) -> None:
    assert canonical(path) == route


def test_only_posts_are_rewritten_and_under_their_root_path() -> None:
    scope: Scope = {"method": "POST", "path": "/proxy/v1//messages/", "root_path": "/proxy"}
    assert normalise(scope, "/v1//messages/") == "/v1/messages"
    assert scope["path"] == "/proxy/v1/messages" and scope["raw_path"] == b"/proxy/v1/messages"
    get = {"method": "GET", "path": "/v1//messages/"}
    assert normalise(get, "/v1//messages/") == "/v1//messages/"
    assert get["path"] == "/v1//messages/"
