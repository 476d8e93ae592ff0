"""The built-in mock's Responses and Messages routes: the same answers as its chat completions, in each API's format.

- ``POST /v1/responses``: a ``response`` object (or, with ``stream: true``, the Responses API's typed
  SSE events, ``response.created`` to ``response.completed``) whose output text says what the mock
  received, counted over the chain's view of the request; a ``function_call`` item instead when the
  newest message mentions a tool and ``tools`` were given.
- ``POST /v1/messages``: an Anthropic ``message`` (or its ``event:`` SSE stream, ``message_start`` to
  ``message_stop``), with a ``tool_use`` block in the same case; ``POST /v1/messages/count_tokens``:
  ``{"input_tokens": N}``. Errors are written in Anthropic's shape; ``/v1/messages`` refuses what
  Anthropic refuses, in its words (:mod:`history_proxy.mock.strict`: a missing ``model``, an orphan
  ``tool_result``, an empty text block, ...) and takes mid-conversation ``system`` messages.

Responses requests are refused where OpenAI refuses them (:mod:`history_proxy.mock.strict`: no
``model``, an orphan output item), and ``additional_tools`` items declare tools as ``tools`` does.
``x-mock-delay-ms`` and ``x-mock-status`` work as on chat completions; usage reports the shared prompt
cache of :mod:`history_proxy.mock.cache` in each API's fields.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from history_proxy.core.messages import Message, text_of
from history_proxy.core.summary_input import VIEW_REF
from history_proxy.errors import InvalidRequestError
from history_proxy.mock.cache import CacheReport
from history_proxy.mock.common import (
    Fail,
    MockRoutes,
    approximate_tokens,
    cache_report,
    digest_of,
    error_answer,
    split,
    wants_tool_call,
)
from history_proxy.mock.compaction import compact, compaction_refusal
from history_proxy.mock.profiles import extra_field, honoured, scaled
from history_proxy.mock.strict import declared_tools, messages_refusal, responses_refusal
from history_proxy.surfaces import messages as anthropic
from history_proxy.surfaces import responses as openai_responses
from history_proxy.surfaces.messages_pinned import is_pinned


def _event(kind: str, payload: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(payload, separators=(',', ':'))}\n\n".encode()


def _anthropic_error(
    status: int, message: str, *, param: str | None = None, code: str | None = None
) -> JSONResponse:
    """An error answer in Anthropic's shape (which has no ``param`` or ``code``)."""
    kinds = {
        400: "invalid_request_error",
        401: "authentication_error",
        404: "not_found_error",
        429: "rate_limit_error",
    }
    body = {"type": "error", "error": {"type": kinds.get(status, "api_error"), "message": message}}
    return JSONResponse(
        body, status_code=status, headers={"retry-after": "1"} if status in (429, 503) else None
    )


class MockSurfaces(MockRoutes):
    """Request handlers for the Responses and Messages surfaces of the mock."""

    compaction: bool = True
    """Responses compaction is served (:mod:`history_proxy.mock.compaction`: a profile of the mock)."""

    async def responses_compact(self, request: Request) -> Response:
        return await compact(request, self.compaction)

    async def _read(
        self, request: Request, anthropic_errors: bool
    ) -> tuple[dict[str, Any], float] | Response:
        fail: Fail = _anthropic_error if anthropic_errors else error_answer
        delay_s = await self.controlled(request.headers, fail)
        if isinstance(delay_s, Response):
            return delay_s
        try:
            body = json.loads(await request.body())
        except (ValueError, UnicodeDecodeError) as exc:
            return fail(400, f"mock: the request body is not valid JSON ({exc})")
        if not isinstance(body, dict):
            return fail(400, "mock: the request body must be a JSON object")
        return body, delay_s

    # --- Responses -----------------------------------------------------------------------------

    async def responses(self, request: Request) -> Response:
        read = await self._read(request, anthropic_errors=False)
        if isinstance(read, Response):
            return read
        body, delay_s = read
        try:
            view = _plain(openai_responses.to_view(body).messages)
        except InvalidRequestError as exc:
            return error_answer(400, exc.message, param=exc.param, code=exc.code)
        refused = responses_refusal(body)
        if refused is not None:
            return error_answer(400, refused.message, param=refused.param, code=refused.code)
        refusal = compaction_refusal(body, self.compaction)
        if refusal is not None:
            return refusal
        tool = wants_tool_call(view, declared_tools(body))
        digest = digest_of({"messages": view})
        if tool is not None:
            item: dict[str, Any] = {
                "type": "function_call",
                "id": f"fc_mock_{digest[:16]}",
                "call_id": f"call_mock_{digest[:16]}",
                "name": tool,
                "arguments": "{}",
                "status": "completed",
            }
        else:
            text = self.describe(view, _model(body, "gpt-4o-mini"))
            part = {"type": "output_text", "text": text, "annotations": []}
            item = {
                "type": "message",
                "id": f"msg_mock_{digest[:16]}",
                "status": "completed",
                "role": "assistant",
                "content": [part],
            }
        model = _model(body, "gpt-4o-mini")
        report = scaled(cache_report(self.cache, model, view), self.input_token_factor, model, view)
        response = _response(body, digest, [item], report)
        if body.get("stream") is True:
            return _streaming(self._response_events(response, item, delay_s))
        await asyncio.sleep(delay_s)
        return JSONResponse(response)

    async def _response_events(
        self, response: dict[str, Any], item: dict[str, Any], delay_s: float
    ) -> AsyncIterator[bytes]:
        sequence = 0

        def event(kind: str, **fields: Any) -> bytes:
            nonlocal sequence
            sequence += 1
            return _event(kind, {"type": kind, "sequence_number": sequence - 1, **fields})

        await asyncio.sleep(delay_s)
        started = {**response, "status": "in_progress", "output": [], "usage": None}
        yield event("response.created", response=started)
        yield event("response.in_progress", response=started)
        ids = {"item_id": item["id"], "output_index": 0}
        if item["type"] == "function_call":
            yield event(
                "response.output_item.added",
                output_index=0,
                item={**item, "arguments": "", "status": "in_progress"},
            )
            yield event("response.function_call_arguments.delta", **ids, delta=item["arguments"])
            yield event("response.function_call_arguments.done", **ids, arguments=item["arguments"])
        else:
            text = item["content"][0]["text"]
            yield event(
                "response.output_item.added",
                output_index=0,
                item={**item, "content": [], "status": "in_progress"},
            )
            empty = {"type": "output_text", "text": "", "annotations": []}
            yield event("response.content_part.added", **ids, content_index=0, part=empty)
            for i, piece in enumerate(split(text, self.chunks)):
                if i:
                    await asyncio.sleep(self.chunk_delay_s)
                yield event("response.output_text.delta", **ids, content_index=0, delta=piece, logprobs=[])
            yield event("response.output_text.done", **ids, content_index=0, text=text, logprobs=[])
            yield event("response.content_part.done", **ids, content_index=0, part=item["content"][0])
        yield event("response.output_item.done", output_index=0, item=item)
        yield event("response.completed", response=response)

    # --- Messages ------------------------------------------------------------------------------

    async def messages(self, request: Request) -> Response:
        read = await self._read(request, anthropic_errors=True)
        if isinstance(read, Response):
            return read
        body, delay_s = read
        refusal = extra_field(body) if self.messages_profile == "strict" else None
        if refusal is not None:
            return _anthropic_error(400, refusal)
        managed: Any = None
        try:
            if self.messages_profile == "honour":
                counted = math.ceil(approximate_tokens(_received(body)) * self.input_token_factor)
                body, managed = honoured(body, counted, self.input_token_factor)
            view = _received(body)
        except InvalidRequestError as exc:
            return _anthropic_error(400, exc.message)
        refusal = messages_refusal(body)
        if refusal is not None:
            return _anthropic_error(400, refusal)
        tool = wants_tool_call(view, body.get("tools"))
        digest = digest_of({"messages": view})
        if tool is not None:
            block: dict[str, Any] = {
                "type": "tool_use",
                "id": f"toolu_mock_{digest[:16]}",
                "name": tool,
                "input": {},
            }
            stop = "tool_use"
        else:
            block, stop = (
                {"type": "text", "text": self.describe(view, _model(body, "claude-mock"))},
                "end_turn",
            )
        model = _model(body, "claude-mock")
        report = scaled(cache_report(self.cache, model, view), self.input_token_factor, model, view)
        usage = {  # Anthropic's input_tokens leave out what the cache read and wrote
            "input_tokens": report.prompt_tokens - report.cached_tokens - report.written_tokens,
            "cache_read_input_tokens": report.cached_tokens,
            "cache_creation_input_tokens": report.written_tokens,
            "output_tokens": max(1, math.ceil(len(json.dumps(block)) / 4)),
        }
        message = {
            "id": f"msg_mock_{digest[:24]}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [block],
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage,
        }
        if managed is not None:
            message["context_management"] = managed.context_management
            if managed.block is not None:  # compacted: the block first, or alone when pausing
                paused = managed.pause
                message["content"] = [managed.block] if paused else [managed.block, block]
                message["stop_reason"] = "compaction" if paused else message["stop_reason"]
        if body.get("stream") is True:
            return _streaming(self._message_events(message, delay_s))
        await asyncio.sleep(delay_s)
        return JSONResponse(message)

    async def count_tokens(self, request: Request) -> Response:
        read = await self._read(request, anthropic_errors=True)
        if isinstance(read, Response):
            return read
        body = read[0]
        refusal = extra_field(body) if self.messages_profile == "strict" else None
        if refusal is not None:
            return _anthropic_error(400, refusal)
        factor = self.input_token_factor
        try:
            original = math.ceil(approximate_tokens(_received(body)) * factor)
            managed = None
            if self.messages_profile == "honour":
                body, managed = honoured(body, original, factor)
            counted = math.ceil(approximate_tokens(_received(body)) * factor)
        except InvalidRequestError as exc:
            return _anthropic_error(400, f"mock: {exc.message}")
        answer: dict[str, Any] = {"input_tokens": counted}
        if managed is not None:
            answer["context_management"] = {"original_input_tokens": original}
        return JSONResponse(answer)

    async def _message_events(self, message: dict[str, Any], delay_s: float) -> AsyncIterator[bytes]:
        await asyncio.sleep(delay_s)
        usage = message["usage"]
        start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
        start.pop("context_management", None)
        yield _event("message_start", {"type": "message_start", "message": start})
        for index, block in enumerate(message["content"]):
            async for event in self._block_events(block, index):
                yield event
        end = {"stop_reason": message["stop_reason"], "stop_sequence": None}
        final: dict[str, Any] = {
            "type": "message_delta",
            "delta": end,
            "usage": {"output_tokens": usage["output_tokens"]},
        }
        if "context_management" in message:
            final["context_management"] = message["context_management"]
        yield _event("message_delta", final)
        yield _event("message_stop", {"type": "message_stop"})

    async def _block_events(self, block: dict[str, Any], index: int) -> AsyncIterator[bytes]:
        """One content block's events: a ``tool_use`` with its input in one delta, a text in
        ``chunks`` deltas, any other block (a ``compaction``) whole in its start event."""
        kind = block["type"]
        first = {**block, "input": {}} if kind == "tool_use" else {"type": "text", "text": ""}
        if kind not in ("tool_use", "text"):
            first = block
        yield _event(
            "content_block_start", {"type": "content_block_start", "index": index, "content_block": first}
        )
        if kind == "tool_use":
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            yield _event(
                "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
            )
        elif kind == "text":
            for i, piece in enumerate(split(block["text"], self.chunks)):
                if i:
                    await asyncio.sleep(self.chunk_delay_s)
                delta = {"type": "text_delta", "text": piece}
                yield _event(
                    "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
                )
        yield _event("content_block_stop", {"type": "content_block_stop", "index": index})


def _model(body: dict[str, Any], default: str) -> str:
    model = body.get("model")
    return model if isinstance(model, str) else default


def _plain(view: list[Message]) -> list[Message]:
    return [{k: v for k, v in m.items() if k != VIEW_REF} for m in view]


def _received(body: dict[str, Any]) -> list[Message]:
    """A Messages request as the mock reads it: the adapter's view, with the messages it leaves out
    of the view (mid-conversation ``system`` messages and other roles) back in their places."""
    view = anthropic.to_view(body)
    out = _plain(view.messages)
    natives = body["messages"]
    for i in range(len(natives) - 1, -1, -1):
        if view.spans[i] == view.spans[i + 1] and is_pinned(natives[i]):
            out.insert(
                view.spans[i],
                {"role": str(natives[i].get("role")), "content": text_of(natives[i].get("content"))},
            )
    return out


def _streaming(events: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(events, media_type="text/event-stream", headers={"cache-control": "no-cache"})


def _response(
    body: dict[str, Any], digest: str, output: list[dict[str, Any]], report: CacheReport
) -> dict[str, Any]:
    prompt = report.prompt_tokens
    completion = max(1, math.ceil(len(json.dumps(output)) / 4))
    return {
        "id": f"resp_mock_{digest}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "model": body.get("model") if isinstance(body.get("model"), str) else "gpt-4o-mini",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools", []),
        "temperature": 1.0,
        "top_p": 1.0,
        "metadata": {},
        "usage": {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": report.cached_tokens},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + completion,
        },
    }
