"""The built-in fake OpenAI upstream: answers say what they received, so demos and tests run offline.

Routes (also served without the ``/v1`` prefix, for ``mock://`` upstreams); ``/v1/responses`` and
``/v1/messages`` (+ ``count_tokens``) are in :mod:`history_proxy.mock.surfaces`:

- ``POST /v1/chat/completions``: a ``chat.completion`` (or, with ``stream: true``, SSE
  ``chat.completion.chunk`` events ending with ``data: [DONE]``) whose content reads
  ``mock: received 12 messages (system=1, user=3, assistant=5, tool=3), ~2345 tokens; last user: "..."``.
  With ``x-history-purpose: summary`` the answer is a deterministic bullet summary of the messages
  (a trailing user message, the summarizer's instruction, is not summarized);
  when the newest message is a user message mentioning a tool and ``tools`` were given, the answer
  calls the first tool with arguments ``{}``.
  A body OpenAI would refuse (no ``model``, an orphan ``tool`` message) gets OpenAI's 400
  (:mod:`history_proxy.mock.strict`).
- ``GET /v1/models``: a few model ids.
- ``GET /healthz``: 200.

Every answer carries ``x-history-mock: 1`` (:class:`MarkedAsMock`), so nobody mistakes it for a provider's.

Request headers for failure tests: ``x-mock-delay-ms`` (wait before the first byte) and
``x-mock-status`` (answer with that error status and an OpenAI error body; 429 and 503 carry
``Retry-After: 1``). The answer's content depends only on the request, never on the clock; its
``usage`` reports cached tokens from :mod:`history_proxy.mock.cache`, which depend only on the
sequence of requests.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.types import Message as AsgiMessage

from history_proxy.core.messages import Message, call_name, text_of
from history_proxy.core.summary_input import SUMMARY_PURPOSE
from history_proxy.mock.cache import CacheReport, PromptCache
from history_proxy.mock.common import (
    MockRoutes,
    cache_report,
    calls_of,
    digest_of,
    error_answer,
    message_chars,
    one_line,
    split,
    wants_tool_call,
)
from history_proxy.mock.profiles import scaled
from history_proxy.mock.strict import chat_refusal

MOCK_MODELS = ("gpt-4o-mini", "gpt-4o", "gpt-4.1-mini", "claude-sonnet-4-5")
MAX_SUMMARY_BULLETS = 5
POST_ONLY = frozenset({"/chat/completions", "/responses", "/messages", "/messages/count_tokens"})
"""The mock's routes (below ``/v1``) that answer POST only: another method gets a 405."""


def summarize_messages(messages: list[Message]) -> str:
    """A deterministic bullet summary of the non-system messages, at most five bullets."""
    bullets: list[str] = []
    for message in messages:
        role = message.get("role")
        text = one_line(text_of(message.get("content")), 60)
        if role == "user" and text:
            bullets.append(f"- user asked: {text}")
        elif role == "assistant":
            names = [call_name(call) or "?" for call in calls_of(message)]
            if names:
                bullets.append(f"- assistant called: {', '.join(names)}")
            elif text:
                bullets.append(f"- assistant said: {text}")
        elif role in ("tool", "function"):
            bullets.append(f"- tool returned {len(text_of(message.get('content')))} chars")
    if not bullets:
        return "- nothing to summarize"
    if len(bullets) > MAX_SUMMARY_BULLETS:
        rest = len(bullets) - (MAX_SUMMARY_BULLETS - 1)
        bullets = [*bullets[: MAX_SUMMARY_BULLETS - 1], f"- ... and {rest} more"]
    return "\n".join(bullets)


def _completion(
    body: dict[str, Any], purpose: str | None, describe: Callable[[list[Message]], str]
) -> tuple[dict[str, Any], str]:
    """The assistant message for a request and its finish reason (``describe``: the ordinary answer)."""
    messages: list[Message] = body["messages"]
    tool = wants_tool_call(messages, body.get("tools"))
    if tool is not None:
        call = {
            "id": f"call_mock_{digest_of(body)[:16]}",
            "type": "function",
            "function": {"name": tool, "arguments": "{}"},
        }
        return {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
    if purpose == SUMMARY_PURPOSE:
        # The summarizer appends its instruction as a last user message: summarize what precedes it.
        instructed = len(messages) > 1 and messages[-1].get("role") == "user"
        content = summarize_messages(messages[:-1] if instructed else messages)
    else:
        content = describe(messages)
    return {"role": "assistant", "content": content}, "stop"


def _usage(report: CacheReport, reply: dict[str, Any]) -> dict[str, Any]:
    prompt = report.prompt_tokens
    completion = max(1, math.ceil(message_chars(reply) / 4))
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": report.cached_tokens},
    }


def _sse(payload: dict[str, Any] | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


class MockUpstream(MockRoutes):
    """Request handlers of the mock, configured once per app."""

    async def chat_completions(self, request: Request) -> Response:
        delay_s = await self.controlled(request.headers, error_answer)
        if isinstance(delay_s, Response):
            return delay_s
        try:
            body = json.loads(await request.body())
        except (ValueError, UnicodeDecodeError) as exc:
            return error_answer(400, f"mock: the request body is not valid JSON ({exc})")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return error_answer(400, "mock: 'messages' must be a list of message objects", param="messages")
        if not all(isinstance(m, dict) for m in body["messages"]):
            return error_answer(400, "mock: every message must be an object", param="messages")
        refused = chat_refusal(body)
        if refused is not None:
            return error_answer(400, refused.message, param=refused.param, code=refused.code)

        named = body.get("model")
        model = named if isinstance(named, str) else MOCK_MODELS[0]
        reply, finish = _completion(
            body, request.headers.get("x-history-purpose"), lambda messages: self.describe(messages, model)
        )
        head = {"id": f"chatcmpl-mock-{digest_of(body)}", "created": int(time.time()), "model": model}
        messages = body["messages"]
        report = scaled(cache_report(self.cache, model, messages), self.input_token_factor, model, messages)
        usage = _usage(report, reply)
        if body.get("stream") is True:
            options = body.get("stream_options")
            include_usage = isinstance(options, dict) and options.get("include_usage") is True
            events = self._stream(head, reply, finish, usage if include_usage else None, delay_s)
            return StreamingResponse(
                events, media_type="text/event-stream", headers={"cache-control": "no-cache"}
            )
        await asyncio.sleep(delay_s)
        return JSONResponse(
            {
                **head,
                "object": "chat.completion",
                "choices": [
                    {
                        "index": 0,
                        "message": {**reply, "refusal": None},
                        "logprobs": None,
                        "finish_reason": finish,
                    }
                ],
                "usage": usage,
                "system_fingerprint": "mock",
            }
        )

    async def _stream(
        self,
        head: dict[str, Any],
        reply: dict[str, Any],
        finish: str,
        usage: dict[str, Any] | None,
        delay_s: float,
    ) -> AsyncIterator[bytes]:
        include_usage = usage is not None

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            extra = {"usage": None} if include_usage else {}
            return _sse({**head, "object": "chat.completion.chunk", "choices": [choice], **extra})

        await asyncio.sleep(delay_s)
        if reply.get("tool_calls"):
            call = reply["tool_calls"][0]
            function = call["function"]
            yield chunk(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": function["name"], "arguments": ""},
                        }
                    ],
                }
            )
            await asyncio.sleep(self.chunk_delay_s)
            yield chunk({"tool_calls": [{"index": 0, "function": {"arguments": function["arguments"]}}]})
        else:
            for i, piece in enumerate(split(reply["content"], self.chunks)):
                if i:
                    await asyncio.sleep(self.chunk_delay_s)
                yield chunk({"role": "assistant", "content": piece} if i == 0 else {"content": piece})
        yield chunk({}, finish)
        if include_usage:
            yield _sse(
                {
                    **head,
                    "object": "chat.completion.chunk",
                    "choices": [],
                    "usage": usage,
                }
            )
        yield _sse("[DONE]")

    async def models(self, request: Request) -> Response:
        data = [
            {"id": m, "object": "model", "created": 0, "owned_by": "history-proxy-mock"} for m in MOCK_MODELS
        ]
        return JSONResponse({"object": "list", "data": data})

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def not_found(self, request: Request) -> Response:
        path = request.url.path.removeprefix("/v1")
        if path in POST_ONLY:  # as the providers answer another method on these
            answer = error_answer(
                405,
                f"mock: {request.method} {request.url.path} is not served: use POST",
                code="method_not_allowed",
            )
            answer.headers["allow"] = "POST"
            return answer
        return error_answer(404, f"mock: no route {request.method} {request.url.path}", code="unknown_url")


def create_mock_app(
    *,
    chunks: int = 5,
    chunk_delay_s: float = 0.0,
    first_byte_delay_s: float = 0.0,
    input_token_factor: float = 1.0,
    messages_profile: str = "lenient",
    compaction: bool = True,
) -> Starlette:
    """The mock upstream as an ASGI app (run it with uvicorn, or mount it behind ``httpx.ASGITransport``).

    ``compaction``: Responses compaction is served, as OpenAI serves it, or refused, as a Responses
    server without it refuses it (:mod:`history_proxy.mock.compaction`).

    ``chunks``: how many content pieces a streamed answer is split into; ``chunk_delay_s``: the
    pause between them; ``first_byte_delay_s``: the wait before any answer (``x-mock-delay-ms``
    overrides it per request); ``input_token_factor`` and ``messages_profile``: see
    :mod:`history_proxy.mock.profiles`.
    """
    from history_proxy.mock.gemini import MockGemini
    from history_proxy.mock.surfaces import MockSurfaces

    cache = PromptCache()  # one for every surface, as a provider's cache is per account
    options: dict[str, Any] = {
        "chunks": chunks,
        "chunk_delay_s": chunk_delay_s,
        "first_byte_delay_s": first_byte_delay_s,
        "cache": cache,
        "input_token_factor": input_token_factor,
        "messages_profile": messages_profile,
    }
    mock = MockUpstream(**options)
    surfaces = MockSurfaces(**options)
    surfaces.compaction = compaction
    google = MockGemini(
        chunks=chunks, chunk_delay_s=chunk_delay_s, first_byte_delay_s=first_byte_delay_s, cache=cache
    )
    routes = [Route("/healthz", mock.healthz, methods=["GET"])]
    for prefix in ("/v1", "", "/v1beta"):
        routes.append(Route(f"{prefix}/models/{{target}}", google.models, methods=["POST"]))
    for prefix in ("/v1", ""):
        routes += [
            Route(f"{prefix}/chat/completions", mock.chat_completions, methods=["POST"]),
            Route(f"{prefix}/responses", surfaces.responses, methods=["POST"]),
            Route(f"{prefix}/responses/compact", surfaces.responses_compact, methods=["POST"]),
            Route(f"{prefix}/messages", surfaces.messages, methods=["POST"]),
            Route(f"{prefix}/messages/count_tokens", surfaces.count_tokens, methods=["POST"]),
            Route(f"{prefix}/models", mock.models, methods=["GET"]),
        ]
    routes.append(Route("/{path:path}", mock.not_found, methods=["GET", "POST", "PUT", "PATCH", "DELETE"]))
    return Starlette(routes=routes, middleware=[Middleware(MarkedAsMock)])


MOCK_HEADER = (b"x-history-mock", b"1")
"""On every answer of the mock, so a client (through the proxy, which passes it on) can tell."""


class MarkedAsMock:
    """ASGI middleware: every answer, streamed or not, error or not, carries ``x-history-mock: 1``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def marked(message: AsgiMessage) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), MOCK_HEADER]}
            await send(message)

        await self.app(scope, receive, marked)
