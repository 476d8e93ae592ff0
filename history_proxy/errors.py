"""Errors the proxy itself answers with, and :func:`render_error`: the one place they get a shape.

    ProxyError                      500 server_error
    ├── InvalidRequestError         400 invalid_request_error
    ├── AuthError                   401 authentication_error
    ├── ForbiddenError              403 permission_error
    ├── NotFoundError               404 not_found_error
    ├── MethodNotAllowedError       405 invalid_request_error (carries Allow)
    ├── RequestTimeoutError         408 invalid_request_error (closes the connection)
    ├── PayloadTooLargeError        413 invalid_request_error
    ├── HeadersTooLargeError        431 invalid_request_error (closes the connection)
    ├── OverloadedError             429 rate_limit_error (carries Retry-After)
    ├── BusyError                   503 server_error, 529 overloaded_error to Anthropic clients (Retry-After)
    ├── FilterError                 500 filter_failed (names the filter and its place in the chain)
    ├── UpstreamUnavailableError    502 upstream_unavailable
    └── UpstreamTimeoutError        504 upstream_timeout

Upstream errors are never wrapped: their status and body pass through verbatim.

Each API answers errors in its own shape: :data:`ERROR_SHAPES` maps a shape name (``openai``,
``anthropic``) to its renderer, and a stream that breaks off ends with that API's in-band event
(:func:`chat_stream_error`, :func:`responses_stream_error`, :func:`messages_stream_error`). Which
surface uses which is said once, in the surface table (:mod:`history_proxy.surfaces.table`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson

OPENAI = "openai"
"""The OpenAI API surface (``/v1/chat/completions``, ``/v1/responses``, everything forwarded under ``/v1/``)."""
ANTHROPIC = "anthropic"
"""The Anthropic Messages surface (``/v1/messages``)."""
GOOGLE = "google"
"""The Gemini API surface (``/v1beta/models/{model}:generateContent`` and its siblings)."""


class ProxyError(Exception):
    """Base of every error the proxy answers itself."""

    status_code = 500
    error_type = "server_error"
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code

    def body(self, surface: str = OPENAI) -> dict[str, Any]:
        """The error body in ``surface``'s shape (see :func:`render_error`)."""
        return ERROR_SHAPES[surface](self)

    def headers(self) -> dict[str, str]:
        """Extra response headers (none by default)."""
        return {}


class InvalidRequestError(ProxyError):
    status_code = 400
    error_type = "invalid_request_error"


class AuthError(ProxyError):
    status_code = 401
    error_type = "authentication_error"
    code = "invalid_api_key"


class ForbiddenError(ProxyError):
    status_code = 403
    error_type = "permission_error"
    code = "forbidden"


class NotFoundError(ProxyError):
    status_code = 404
    error_type = "not_found_error"
    code = "unknown_url"


class MethodNotAllowedError(ProxyError):
    status_code = 405
    error_type = "invalid_request_error"
    code = "method_not_allowed"

    def __init__(self, message: str, *, allow: str | None = None) -> None:
        super().__init__(message)
        self.allow = allow

    def headers(self) -> dict[str, str]:
        return {"allow": self.allow} if self.allow else {}


class RequestTimeoutError(ProxyError):
    status_code = 408
    error_type = "invalid_request_error"
    code = "request_timeout"

    def headers(self) -> dict[str, str]:
        return {"connection": "close"}


class HeadersTooLargeError(ProxyError):
    status_code = 431
    error_type = "invalid_request_error"
    code = "request_headers_too_large"

    def headers(self) -> dict[str, str]:
        return {"connection": "close"}


class PayloadTooLargeError(ProxyError):
    status_code = 413
    error_type = "invalid_request_error"
    code = "payload_too_large"


class OverloadedError(ProxyError):
    status_code = 429
    error_type = "rate_limit_error"
    code = "proxy_overloaded"

    def __init__(self, message: str, *, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s

    def headers(self) -> dict[str, str]:
        return {"retry-after": str(self.retry_after_s)}


class BusyError(ProxyError):
    """The process holds as many request bytes as ``limits.max_inflight_bytes`` allows: 503, or 529
    (Anthropic's ``overloaded_error``) to a Messages client, with ``Retry-After``."""

    error_type = "server_error"
    code = "proxy_busy"

    def __init__(self, message: str, surface: str = OPENAI, *, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.status_code = 529 if surface == ANTHROPIC else 503
        self.retry_after_s = retry_after_s

    def headers(self) -> dict[str, str]:
        return {"retry-after": str(self.retry_after_s)}


class FilterError(ProxyError):
    status_code = 500
    error_type = "server_error"
    code = "filter_failed"

    def __init__(self, message: str, *, filter_type: str, position: str) -> None:
        super().__init__(f"filter {filter_type!r} at {position} failed: {message}")
        self.filter_type = filter_type
        self.position = position


class UpstreamUnavailableError(ProxyError):
    status_code = 502
    error_type = "upstream_error"
    code = "upstream_unavailable"


class UpstreamTimeoutError(ProxyError):
    status_code = 504
    error_type = "upstream_error"
    code = "upstream_timeout"


def openai_error(exc: ProxyError) -> dict[str, Any]:
    """``{"error": {"message", "type", "param", "code"}}`` as OpenAI answers errors."""
    return {"error": {"message": exc.message, "type": exc.error_type, "param": exc.param, "code": exc.code}}


_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def anthropic_error(exc: ProxyError) -> dict[str, Any]:
    """``{"type": "error", "error": {"type", "message"}}`` as the Anthropic API answers errors."""
    error_type = _ANTHROPIC_TYPES.get(exc.status_code, "api_error")
    return {"type": "error", "error": {"type": error_type, "message": exc.message}}


_GOOGLE_STATUSES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "INVALID_ARGUMENT",
    408: "DEADLINE_EXCEEDED",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    431: "INVALID_ARGUMENT",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def google_error(exc: ProxyError) -> dict[str, Any]:
    """``{"error": {"code", "message", "status"}}`` as the Gemini API answers errors."""
    status = _GOOGLE_STATUSES.get(exc.status_code, "INTERNAL")
    return {"error": {"code": exc.status_code, "message": exc.message, "status": status}}


ErrorShape = Callable[[ProxyError], dict[str, Any]]
"""Renders one error as a surface's JSON error body."""

ERROR_SHAPES: dict[str, ErrorShape] = {OPENAI: openai_error, ANTHROPIC: anthropic_error, GOOGLE: google_error}
"""Error shape per API surface; a surface registers its own renderer here."""


def render_error(exc: ProxyError, surface: str = OPENAI) -> bytes:
    """``exc`` as the JSON error body ``surface``'s clients expect (compact UTF-8)."""
    return orjson.dumps(exc.body(surface))


StreamError = Callable[[ProxyError], bytes]
"""Renders the in-band SSE event a stream of one surface ends with when the upstream broke off."""


def _compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def chat_stream_error(error: ProxyError) -> bytes:
    """Chat completions: ``data: {"error": ...}`` then ``data: [DONE]``."""
    return b"data: " + _compact(error.body()) + b"\n\ndata: [DONE]\n\n"


def responses_stream_error(error: ProxyError) -> bytes:
    """Responses: an ``error`` event (``{"type": "error", "code", "message", "param"}``)."""
    event = {"type": "error", "code": error.code, "message": error.message, "param": error.param}
    return b"event: error\ndata: " + _compact(event) + b"\n\n"


def messages_stream_error(error: ProxyError) -> bytes:
    """Messages: Anthropic's ``event: error`` with ``{"type": "error", "error": {"type", "message"}}``."""
    return b"event: error\ndata: " + _compact(error.body(ANTHROPIC)) + b"\n\n"


def gemini_stream_error(error: ProxyError) -> bytes:
    """Gemini (``?alt=sse``): a last ``data:`` event holding the error in Google's shape."""
    return b"data: " + _compact(error.body(GOOGLE)) + b"\n\n"
