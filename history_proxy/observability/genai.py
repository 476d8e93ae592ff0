"""The attributes of a model call's span: OpenTelemetry GenAI semantic conventions and our own.

Pinned to semantic conventions **1.44.0** (the names of ``opentelemetry-semantic-conventions`` 0.66b2,
the release beside SDK 1.45.2; ``tests/test_telemetry.py`` checks every name here against it). The
GenAI conventions are still experimental; ``OTEL_SEMCONV_STABILITY_OPT_IN`` chooses:

    (unset)                      the pinned names, plus ``gen_ai.system`` (the provider under its
                                 pre-1.37 name) so viewers that predate ``gen_ai.provider.name`` group too
    gen_ai_latest_experimental   the pinned names only

The proxy's own figures are under ``history_proxy.*``. No function here reads message text; the
content of ``gen_ai.input.messages`` (only with ``telemetry.capture_content``) is
:func:`input_messages`, fed the forwarded body as parsed, bounded in characters. Pure: plain values
in, attribute dicts out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from history_proxy.core.answer import AnswerFacts
from history_proxy.core.cost import Pricing
from history_proxy.core.identity import Identity
from history_proxy.core.usage import CacheUsage
from history_proxy.pipeline.run import PipelineResult

SEMCONV_VERSION = "1.44.0"
SCHEMA_URL = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"
OPT_IN_ENV = "OTEL_SEMCONV_STABILITY_OPT_IN"
LATEST = "gen_ai_latest_experimental"

OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
SYSTEM = "gen_ai.system"
"""Deprecated since 1.37 for ``gen_ai.provider.name``; sent alongside unless opted into the latest."""
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
REQUEST_TEMPERATURE = "gen_ai.request.temperature"
REQUEST_TOP_P = "gen_ai.request.top_p"
REQUEST_STREAM = "gen_ai.request.stream"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_ID = "gen_ai.response.id"
FINISH_REASONS = "gen_ai.response.finish_reasons"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
CACHE_CREATION_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
AGENT_NAME = "gen_ai.agent.name"
CONVERSATION_ID = "gen_ai.conversation.id"
INPUT_MESSAGES = "gen_ai.input.messages"
ERROR_TYPE = "error.type"
HTTP_STATUS = "http.response.status_code"

OURS = "history_proxy"
"""The namespace of the proxy's own attributes."""
CONVERSATION_HEADER = "x-conversation-id"
"""A header a client may send the conversation id in (the Responses API's ``conversation`` field wins)."""

MODEL_CALLS: dict[str, str] = {
    "/v1/chat/completions": "chat",
    "/v1/responses": "responses",
    "/v1/messages": "messages",
}
"""The routes whose requests are model calls (a span each), by the surface they belong to."""
OPERATION_NAME = "chat"
"""``gen_ai.operation.name`` of all three: each is a chat-style generation."""


def latest_only(opt_in: str | None) -> bool:
    """Whether ``OTEL_SEMCONV_STABILITY_OPT_IN`` asks for the latest experimental GenAI names only."""
    return LATEST in {part.strip() for part in (opt_in or "").split(",")}


def surface_of(path: str) -> str | None:
    """The surface of a model call's path (below any root path), else ``None``."""
    for route, surface in MODEL_CALLS.items():
        if path.endswith(route):
            return surface
    return None


def _number(value: Any) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value


def request_attributes(body: Mapping[str, Any], headers: Mapping[str, str]) -> dict[str, Any]:
    """What the client's request says of itself: model settings and its conversation, never content."""
    found: dict[str, Any] = {}
    for name in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        if (value := _number(body.get(name))) is not None:
            found[REQUEST_MAX_TOKENS] = value
    for attribute, name in ((REQUEST_TEMPERATURE, "temperature"), (REQUEST_TOP_P, "top_p")):
        if (value := _number(body.get(name))) is not None:
            found[attribute] = value
    found[REQUEST_STREAM] = body.get("stream") is True
    conversation = body.get("conversation")
    if isinstance(conversation, dict):
        conversation = conversation.get("id")
    if not isinstance(conversation, str) or not conversation:
        conversation = headers.get(CONVERSATION_HEADER)
    if conversation:
        found[CONVERSATION_ID] = conversation[:256]
    return found


def identity_attributes(identity: Identity | None) -> dict[str, Any]:
    if identity is None:
        return {}
    found: dict[str, Any] = {f"{OURS}.role": identity.role}
    if identity.agent:
        found[AGENT_NAME] = identity.agent
    if identity.tenant:
        found[f"{OURS}.tenant"] = identity.tenant
    return found


def chain_attributes(result: PipelineResult | None) -> dict[str, Any]:
    """What the caller's chain did: the filters in order, tokens and messages before and after."""
    if result is None:
        return {}
    report = result.report
    found: dict[str, Any] = {
        f"{OURS}.chain": [f["type"] for f in report.get("filters", ())],
        f"{OURS}.mode": result.mode,
        f"{OURS}.tokens_before": result.tokens_before,
        f"{OURS}.tokens_after": result.tokens_after,
        f"{OURS}.messages_before": result.messages_before,
        f"{OURS}.messages_after": result.messages_after,
        f"{OURS}.chain_ms": round(result.chain_ms, 3),
    }
    notes = report.get("notes")
    if notes:
        found[f"{OURS}.notes"] = [str(note) for note in notes]
    if result.failed_filter:
        found[f"{OURS}.failed_filter"] = result.failed_filter
    if (limit := report.get("limit")) is not None:
        found[f"{OURS}.limit"] = limit
    return found


def usage_attributes(
    usage: CacheUsage | None, facts: AnswerFacts | None, pricing: Pricing | None, unfiltered: int | None
) -> dict[str, Any]:
    """The upstream's usage and what the request cost, in uncached input tokens.

    ``history_proxy.cost.input`` prices the input the upstream reported with its prompt cache
    (cached tokens at ``read``, written ones at ``write``); ``history_proxy.cost.unfiltered`` is the
    client's history as sent, uncached (1.0 a token): the bill without the proxy and without a cache.
    """
    found: dict[str, Any] = {}
    if facts is not None:
        if facts.response_id:
            found[RESPONSE_ID] = facts.response_id
        if facts.response_model:
            found[RESPONSE_MODEL] = facts.response_model
        if facts.finish_reasons:
            found[FINISH_REASONS] = list(facts.finish_reasons)
        if facts.output_tokens is not None:
            found[OUTPUT_TOKENS] = facts.output_tokens
    if usage is not None:
        found[INPUT_TOKENS] = usage.input_tokens
        found[CACHE_READ_TOKENS] = usage.cached_tokens
        found[CACHE_CREATION_TOKENS] = usage.cache_write_tokens
        if pricing is not None:
            fresh = max(0, usage.input_tokens - usage.cached_tokens - usage.cache_write_tokens)
            cost = fresh + usage.cached_tokens * pricing.read + usage.cache_write_tokens * pricing.write
            found[f"{OURS}.cost.input"] = round(cost, 2)
    if unfiltered is not None:
        found[f"{OURS}.cost.unfiltered"] = float(unfiltered)
    return found


def upstream_attributes(tried: Sequence[str], attempts: int, answered: str | None) -> dict[str, Any]:
    """The upstreams tried in order (repeats are retries), the fallbacks taken, the one that answered."""
    distinct = list(dict.fromkeys(tried))
    found: dict[str, Any] = {
        f"{OURS}.upstreams_tried": distinct,
        f"{OURS}.attempts": attempts,
        f"{OURS}.fallbacks": max(0, len(distinct) - 1),
    }
    if answered:
        found[f"{OURS}.upstream"] = answered
    return found


CUT = "…[cut: {} more characters]"
"""What ends a captured text cut short (``telemetry.capture_content_chars``)."""
_TRAILING_TOKEN = re.compile(r"\S{1,256}$")


def _cut(text: str, room: int) -> str:
    """``text`` within ``room`` characters: cut, its last (maybe partial) word dropped so no secret's
    prefix is left where it was cut, and the count of what was left out."""
    if len(text) <= room:
        return text
    kept = _TRAILING_TOKEN.sub("", text[:room])
    return kept + CUT.format(len(text) - len(kept))


def _text_of(content: Any, room: int) -> str | None:
    if isinstance(content, str):
        return _cut(content, room)
    if isinstance(content, list):
        texts: list[str] = []
        for block in content:
            if not isinstance(block, dict):
                continue
            text = block.get("text")
            if not isinstance(text, str):
                text = block.get("output")
            if isinstance(text, str):
                texts.append(_cut(text, max(room - sum(map(len, texts)), 0)))
        return "\n".join(texts) or None
    return None


def chars_in(messages: list[dict[str, Any]]) -> int:
    """The characters of text in captured messages."""
    return sum(len(part["content"]) for message in messages for part in message["parts"])


def _captured(items: list[dict[str, Any]], room: int) -> list[dict[str, Any]]:
    """``items`` as captured messages, in order, until ``room`` characters of text are spent."""
    captured: list[dict[str, Any]] = []
    for item in items:
        if room <= 0:
            break
        role = item.get("role") or (
            "tool" if item.get("type") == "function_call_output" else item.get("type")
        )
        text = _text_of(item.get("content") if "content" in item else item.get("output"), room)
        room -= len(text or "")
        captured.append(
            {"role": str(role), "parts": [] if text is None else [{"type": "text", "content": text}]}
        )
    return captured


def input_messages(body: Mapping[str, Any], max_chars: int = 64 * 1024) -> list[dict[str, Any]]:
    """The forwarded messages of any surface as ``gen_ai.input.messages`` (role and text parts).

    Tool calls and non-text parts are left out: only what a reader of the trace needs to see the
    shaped history. At most ``max_chars`` characters of text: the system prompt (a quarter of them
    at most) and the newest messages that fit, each text cut where the room ends; the older ones
    are counted in a note. Walks the parsed body (no JSON parsed or written), so a 24 MB body costs
    its number of messages, not its bytes. Only called with ``telemetry.capture_content`` on.
    """
    items = body.get("messages") if "messages" in body else body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    items = [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []
    system = body.get("system") if body.get("system") is not None else body.get("instructions")
    leading = [{"role": "system", "content": system}] if system is not None else []
    first = 0
    while first < len(items) and items[first].get("role") in ("system", "developer"):
        first += 1
    messages = _captured([*leading, *items[:first]], max_chars // 4)
    items = items[first:]
    newest = _captured(items[::-1], max_chars - chars_in(messages))
    if len(newest) < len(items):
        note = f"[{len(items) - len(newest)} earlier messages not captured (telemetry.capture_content_chars)]"
        messages.append({"role": OURS, "parts": [{"type": "text", "content": note}]})
    messages.extend(reversed(newest))
    return messages
