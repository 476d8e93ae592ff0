"""The built-in mock's Gemini routes: ``POST /models/{model}:generateContent``, ``:streamGenerateContent``
(``?alt=sse``: ``data:`` events; otherwise a JSON array of the same chunks) and ``:countTokens``.

The answer says what the mock received, counted over the chain's view of the request (as on every
surface); a ``functionCall`` part instead when the newest message is a user message mentioning a tool
and ``tools`` declare functions. ``usageMetadata`` reports the shared prompt cache of
:mod:`history_proxy.mock.cache` as ``cachedContentTokenCount``. Errors are written in Google's shape,
``{"error": {"code", "message", "status"}}``; ``x-mock-delay-ms`` and ``x-mock-status`` work as on
the other routes.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from history_proxy.core.messages import Message
from history_proxy.core.summary_input import VIEW_REF
from history_proxy.errors import InvalidRequestError, ProxyError, google_error
from history_proxy.mock.common import (
    MockRoutes,
    approximate_tokens,
    cache_report,
    describe_received,
    digest_of,
    split,
    wants_tool_call,
)
from history_proxy.surfaces import gemini


def google_failure(
    status: int, message: str, *, param: str | None = None, code: str | None = None
) -> JSONResponse:
    """An error answer in Google's shape."""
    error = ProxyError(message)
    error.status_code = status
    return JSONResponse(google_error(error), status_code=status)


def _function_tools(tools: Any) -> list[dict[str, Any]]:
    """Gemini's ``tools`` (``functionDeclarations`` lists) as chat tools, for the mock's tool choice."""
    out: list[dict[str, Any]] = []
    for tool in tools if isinstance(tools, list) else []:
        declared = tool.get("functionDeclarations") if isinstance(tool, dict) else None
        for function in declared if isinstance(declared, list) else []:
            if isinstance(function, dict) and isinstance(function.get("name"), str):
                out.append({"type": "function", "function": {"name": function["name"]}})
    return out


class MockGemini(MockRoutes):
    """Request handlers for the Gemini surface of the mock."""

    async def models(self, request: Request) -> Response:
        """``POST /models/{model}:{action}``: the three actions the proxy shapes."""
        target: str = request.path_params["target"]
        model, _, action = target.rpartition(":")
        if action not in ("generateContent", "streamGenerateContent", "countTokens") or not model:
            return google_failure(404, f"mock: no Gemini method {target!r}")
        delay_s = await self.controlled(request.headers, google_failure)
        if isinstance(delay_s, Response):
            return delay_s
        try:
            body = json.loads(await request.body())
            view = [{k: v for k, v in m.items() if k != VIEW_REF} for m in gemini.to_view(body).messages]
        except (ValueError, UnicodeDecodeError, AttributeError) as exc:
            return google_failure(400, f"Invalid JSON payload received. {exc}")
        except InvalidRequestError as exc:
            return google_failure(400, exc.message)
        if action == "countTokens":
            return JSONResponse({"totalTokens": approximate_tokens(view)})
        answer = self._answer(body, view, model)
        if action == "generateContent":
            await asyncio.sleep(delay_s)
            return JSONResponse(answer)
        chunks = self._chunks(answer)
        if request.query_params.get("alt") == "sse":
            return StreamingResponse(
                self._events(chunks, delay_s),
                media_type="text/event-stream",
                headers={"cache-control": "no-cache"},
            )
        await asyncio.sleep(delay_s)
        return JSONResponse(chunks)

    def _answer(self, body: dict[str, Any], view: list[Message], model: str) -> dict[str, Any]:
        tool = wants_tool_call(view, _function_tools(body.get("tools")))
        digest = digest_of({"messages": view})
        if tool is not None:
            part: dict[str, Any] = {"functionCall": {"name": tool, "args": {}}}
        else:
            part = {"text": describe_received(view)}
        report = cache_report(self.cache, model, view)
        output = max(1, math.ceil(len(json.dumps(part)) / 4))
        return {
            "candidates": [
                {"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}
            ],
            "usageMetadata": {
                "promptTokenCount": report.prompt_tokens,
                "cachedContentTokenCount": report.cached_tokens,
                "candidatesTokenCount": output,
                "totalTokenCount": report.prompt_tokens + output,
            },
            "modelVersion": model,
            "responseId": f"mock-{digest[:16]}",
        }

    def _chunks(self, answer: dict[str, Any]) -> list[dict[str, Any]]:
        """The answer as stream chunks: its text in pieces, the last chunk with the finish reason and usage."""
        candidate = answer["candidates"][0]
        part = candidate["content"]["parts"][0]
        texts = split(part["text"], self.chunks) if "text" in part else [None]
        chunks: list[dict[str, Any]] = []
        for i, text in enumerate(texts):
            piece = {"text": text} if text is not None else part
            chunk: dict[str, Any] = {
                "candidates": [{"content": {"role": "model", "parts": [piece]}, "index": 0}],
                "modelVersion": answer["modelVersion"],
                "responseId": answer["responseId"],
            }
            if i == len(texts) - 1:
                chunk["candidates"][0]["finishReason"] = candidate["finishReason"]
                chunk["usageMetadata"] = answer["usageMetadata"]
            chunks.append(chunk)
        return chunks

    async def _events(self, chunks: list[dict[str, Any]], delay_s: float) -> AsyncIterator[bytes]:
        await asyncio.sleep(delay_s)
        for i, chunk in enumerate(chunks):
            if i:
                await asyncio.sleep(self.chunk_delay_s)
            yield b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\r\n\r\n"
