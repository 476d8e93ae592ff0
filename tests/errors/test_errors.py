"""One renderer for the proxy's own errors, one shape per API surface."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from history_proxy.errors import (
    ERROR_SHAPES,
    OPENAI,
    ForbiddenError,
    InvalidRequestError,
    OverloadedError,
    ProxyError,
    render_error,
)
from history_proxy.server.app import create_app
from history_proxy.server.edge import error_answer
from tests.support.asgi_app import make_config


def test_the_openai_shape_carries_message_type_param_and_code() -> None:
    error = InvalidRequestError("bad 'messages'", param="messages", code="invalid_json")
    assert orjson.loads(render_error(error)) == {
        "error": {
            "message": "bad 'messages'",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "invalid_json",
        }
    }


def test_a_surface_plugs_in_its_own_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    def anthropic(exc: ProxyError) -> dict[str, Any]:
        return {"type": "error", "error": {"type": exc.error_type, "message": exc.message}}

    monkeypatch.setitem(ERROR_SHAPES, "anthropic", anthropic)
    error = ForbiddenError("not yours")
    answer = error_answer(error, "r-1", "anthropic")
    assert orjson.loads(answer.body) == {
        "type": "error",
        "error": {"type": "permission_error", "message": "not yours"},
    }
    assert orjson.loads(error_answer(error, "r-1", OPENAI).body)["error"]["code"] == "forbidden"


def test_an_error_answer_has_its_length_type_request_id_and_own_headers() -> None:
    answer = error_answer(OverloadedError("busy", retry_after_s=3), "r-2")
    headers = dict(answer.headers)
    assert answer.status == 429 and headers[b"content-length"] == str(len(answer.body)).encode()
    assert headers[b"content-type"] == b"application/json" and headers[b"x-request-id"] == b"r-2"
    assert headers[b"retry-after"] == b"3"


def test_a_message_outside_ascii_is_utf8_json() -> None:
    body = render_error(InvalidRequestError("'modèle' ✓"))
    assert orjson.loads(body)["error"]["message"] == "'modèle' ✓"


def test_the_app_answers_errors_in_the_shape_of_the_surface_the_path_belongs_to() -> None:
    proxy = create_app(make_config()).state.proxy

    def scope(path: str, root_path: str = "") -> dict[str, Any]:
        return {"type": "http", "path": root_path + path, "root_path": root_path, "headers": [], "state": {}}

    for messages in (scope("/v1/messages"), scope("/v1/messages/count_tokens", "/proxy")):
        body = orjson.loads(proxy.error_answer(messages, ForbiddenError("no")).body)
        assert body == {"type": "error", "error": {"type": "permission_error", "message": "no"}}
    for openai in (scope("/v1/responses"), scope("/v1/chat/completions", "/proxy"), scope("/v1/models")):
        assert (
            orjson.loads(proxy.error_answer(openai, ForbiddenError("no")).body)["error"]["code"]
            == "forbidden"
        )
