"""What the built-in mock's routes share: error answers, what a request received, tokens, cache, streams.

:mod:`history_proxy.mock.upstream` (chat completions) and :mod:`history_proxy.mock.surfaces` (Responses, Messages)
both import these; neither reaches into the other's private names.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
from collections.abc import Mapping
from typing import Any, Protocol

from starlette.responses import JSONResponse, Response

from history_proxy.core.messages import Message, text_of, tool_calls
from history_proxy.core.tokens import TokenCounters
from history_proxy.errors import ProxyError
from history_proxy.mock.cache import CacheReport, PromptCache

COUNT_CACHE_BYTES = 8 * 1024 * 1024
"""The most the mock's token-count cache holds, in bytes of strings (its answer states a count)."""
ROLE_ORDER = ("system", "developer", "user", "assistant", "tool", "function")
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}
_TOOL_WORD = re.compile(r"\btools?\b", re.IGNORECASE)


def error_answer(
    status: int, message: str, *, code: str | None = None, param: str | None = None
) -> JSONResponse:
    """An OpenAI-shaped error answer with ``status`` (429 and 503 carry ``Retry-After: 1``)."""
    error_type = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    headers = {"retry-after": "1"} if status in (429, 503) else None
    error = ProxyError(message, param=param, code=code)
    error.error_type = error_type
    return JSONResponse(error.body(), status_code=status, headers=headers)


def message_chars(message: Message) -> int:
    """Characters of a message's role, text and tool calls (the mock's token estimate counts them)."""
    chars = len(str(message.get("role", ""))) + len(text_of(message.get("content")))
    for call in calls_of(message):
        function = call.get("function")
        if isinstance(function, dict):
            chars += len(str(function.get("name", ""))) + len(str(function.get("arguments", "")))
    return chars


def calls_of(message: Message) -> list[dict[str, Any]]:
    """The message's tool calls that are objects."""
    return [call for call in tool_calls(message) if isinstance(call, dict)]


def approximate_tokens(messages: list[Message]) -> int:
    """ceil(chars / 4) over roles, text and tool calls: what the mock reports as prompt tokens."""
    return math.ceil(sum(message_chars(m) for m in messages) / 4)


def one_line(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters with ``...``."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def describe_received(messages: list[Message], tokens: int | None = None) -> str:
    """The mock's ordinary answer: message count, roles, tokens and the last user text.

    ``tokens``: as the proxy counts them (its ``x-history-tokens-after``); none: ceil(chars / 4).
    """
    counts: dict[str, int] = {}
    for message in messages:
        role = str(message.get("role"))
        counts[role] = counts.get(role, 0) + 1
    ordered = [r for r in ROLE_ORDER if r in counts] + sorted(r for r in counts if r not in ROLE_ORDER)
    roles = ", ".join(f"{r}={counts[r]}" for r in ordered)
    users = [m for m in messages if m.get("role") == "user"]
    last_user = (
        json.dumps(one_line(text_of(users[-1].get("content")), 80), ensure_ascii=False) if users else "(none)"
    )
    return (
        f"mock: received {len(messages)} messages ({roles}), "
        f"~{approximate_tokens(messages) if tokens is None else tokens} tokens; "
        f"last user: {last_user}"
    )


def _first_tool_name(tools: Any) -> str | None:
    if not isinstance(tools, list) or not tools or not isinstance(tools[0], dict):
        return None
    function = tools[0].get("function")
    name = function.get("name") if isinstance(function, dict) else tools[0].get("name")
    return name if isinstance(name, str) and name else None


def wants_tool_call(messages: list[Message], tools: Any) -> str | None:
    """The tool to call when the newest message is a user message mentioning a tool, else ``None``."""
    name = _first_tool_name(tools)
    last = messages[-1] if messages else {}
    if name and last.get("role") == "user" and _TOOL_WORD.search(text_of(last.get("content"))):
        return name
    return None


def digest_of(body: dict[str, Any]) -> str:
    """A short stable digest of the request's ``messages`` (answer and call ids)."""
    return hashlib.sha256(json.dumps(body.get("messages"), sort_keys=True, default=str).encode()).hexdigest()[
        :24
    ]


def cache_report(cache: PromptCache, model: str, messages: list[Message]) -> CacheReport:
    """What the mock's prompt cache reads and writes for a request (and remember its prefixes)."""
    return cache.lookup(model, messages, [message_chars(m) for m in messages])


def split(text: str, pieces: int) -> list[str]:
    """``text`` in at most ``pieces`` pieces of near-equal length (stream chunks)."""
    if not text:
        return [""]
    pieces = max(1, min(pieces, len(text)))
    size = math.ceil(len(text) / pieces)
    return [text[i : i + size] for i in range(0, len(text), size)]


class Fail(Protocol):
    """An error answer in a route's own shape (``param`` and ``code`` where its shape has them)."""

    def __call__(
        self, status: int, message: str, *, param: str | None = None, code: str | None = None
    ) -> Response: ...


class MockRoutes:
    """The pacing and prompt cache every group of the mock's routes is configured with."""

    def __init__(
        self,
        *,
        chunks: int,
        chunk_delay_s: float,
        first_byte_delay_s: float,
        cache: PromptCache | None = None,
        input_token_factor: float = 1.0,
        messages_profile: str = "lenient",
    ) -> None:
        self.input_token_factor = input_token_factor
        """Every reported input figure is multiplied by this (:mod:`history_proxy.mock.profiles`)."""
        self.messages_profile = messages_profile
        """``lenient``, ``strict`` or ``honour`` (:mod:`history_proxy.mock.profiles`)."""
        self.chunks = max(1, chunks)
        self.chunk_delay_s = chunk_delay_s
        self.first_byte_delay_s = first_byte_delay_s
        self.cache = cache or PromptCache()
        self.counters = TokenCounters(max_bytes=COUNT_CACHE_BYTES)

    def describe(self, messages: list[Message], model: str) -> str:
        """:func:`describe_received` with the tokens counted as the proxy counts them for ``model``."""
        return describe_received(messages, self.counters.get(model=model).messages(messages))

    async def controlled(self, headers: Mapping[str, str], fail: Fail) -> float | Response:
        """The wait before the first byte, or the answer the request's failure-test headers force.

        ``x-mock-delay-ms`` sets the wait (default: the mock's own); ``x-mock-status`` answers that
        error status after it; a value that is not a number, or not a status from 400 to 599, gets a 400.
        """
        delay_s = self.first_byte_delay_s
        raw_delay = headers.get("x-mock-delay-ms")
        if raw_delay is not None:
            try:
                delay_s = max(0.0, float(raw_delay) / 1000)
            except ValueError:
                return fail(400, "x-mock-delay-ms must be a number of milliseconds", param="x-mock-delay-ms")
        forced = headers.get("x-mock-status")
        if forced is None:
            return delay_s
        if not forced.isdigit() or not 400 <= int(forced) <= 599:
            return fail(400, "x-mock-status must be an HTTP error status (400-599)", param="x-mock-status")
        await asyncio.sleep(delay_s)
        return fail(int(forced), f"mock: forced status {forced}", code="mock_forced_status")
