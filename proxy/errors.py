"""Errors the proxy itself answers with, rendered in OpenAI's error shape.

    ProxyError                      500 server_error
    ├── InvalidRequestError         400 invalid_request_error
    ├── AuthError                   401 authentication_error
    ├── ForbiddenError              403 permission_error
    ├── NotFoundError               404 not_found_error
    ├── PayloadTooLargeError        413 invalid_request_error
    ├── OverloadedError             429 rate_limit_error (carries Retry-After)
    ├── FilterError                 500 filter_failed (names the filter and its place in the chain)
    ├── UpstreamUnavailableError    502 upstream_unavailable
    └── UpstreamTimeoutError        504 upstream_timeout

Upstream errors are never wrapped: their status and body pass through verbatim.
"""

from __future__ import annotations

from typing import Any


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

    def body(self) -> dict[str, Any]:
        """The OpenAI-shaped error body."""
        return error_body(self.message, self.error_type, param=self.param, code=self.code)

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


def error_body(
    message: str, error_type: str, *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """``{"error": {"message", "type", "param", "code"}}`` as OpenAI answers errors."""
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}
