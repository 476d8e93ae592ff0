"""OpenAI's explicit cache breakpoints on chat completions and Responses, by the upstream's ``cache_breakpoints``.

OpenAI models from GPT-5.6 on take ``"prompt_cache_breakpoint": {"mode": "explicit"}`` on input content
parts (chat ``text`` parts; Responses ``input_text``, ``input_image``, ``input_file``) of system,
developer, user and tool messages, write at most 4 breakpoints a request (one of them the implicit
breakpoint unless ``prompt_cache_options.mode`` is ``explicit``), and route requests to a cache by
``prompt_cache_key``. By the upstream's mode (:mod:`history_proxy.config.openai_standards`):

- ``native``: the ``cache_control`` slot's rule places OpenAI breakpoints (:func:`place`): the newest
  ``last_n_messages`` messages of a ``tagged_roles`` role (after ``last_n_messages_offset``) get one
  on their ``part`` (string content becomes one part), counting the client's own toward the limit and
  never moving or removing one; only for models matching ``cache_breakpoint_models``. A request
  without ``prompt_cache_key`` gets one per conversation: a digest of the tenant, role, agent and the
  conversation's opening (the messages up to its first user message), so an agent's consecutive
  requests reach the same cache and two agents' do not collide;
- ``strip``: the client's breakpoints and ``prompt_cache_options`` are removed (:func:`strip`);
- ``forward``: nothing is touched.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
from collections.abc import Iterator
from typing import Any

from history_proxy.config.models import CacheControlSlot, UpstreamConfig
from history_proxy.core.identity import Identity

BREAKPOINT = "prompt_cache_breakpoint"
EXPLICIT: dict[str, Any] = {"mode": "explicit"}
MAX_WRITES = 4
"""Breakpoints OpenAI writes per request, the implicit one included unless the mode is explicit."""
MARKABLE_PARTS = frozenset({"text", "input_text", "input_image", "input_file", "image_url", "file"})
MARKABLE_ROLES = frozenset({"system", "developer", "user", "tool"})
KEY_PREFIX = "hpx-"


def apply(
    body: dict[str, Any],
    slot: CacheControlSlot | None,
    upstream: UpstreamConfig | None,
    identity: Identity,
    list_key: str,
) -> dict[str, Any]:
    """``body`` (chat ``messages`` or Responses ``input``: ``list_key``) after the upstream's breakpoint mode."""
    if upstream is None:
        return body
    mode = upstream.breakpoints
    if mode == "forward":
        return body
    if mode == "strip":
        return strip(body, list_key)
    model = body.get("model")
    if (
        slot is not None
        and isinstance(model, str)
        and any(fnmatch.fnmatchcase(model, glob) for glob in upstream.cache_breakpoint_models)
    ):
        body = place(body, slot, list_key)
    if "prompt_cache_key" not in body:
        body = {**body, "prompt_cache_key": conversation_key(body, identity, list_key)}
    return body


def _messages(body: dict[str, Any], list_key: str) -> list[Any]:
    items = body.get(list_key)
    return items if isinstance(items, list) else []


def _role(item: Any) -> str | None:
    if not isinstance(item, dict):
        return None
    if item.get("type") == "function_call_output":
        return "tool"
    if item.get("type", "message") != "message":
        return None
    role = item.get("role")
    return role if isinstance(role, str) else None


def _parts(item: dict[str, Any]) -> Iterator[dict[str, Any]]:
    content = item.get("content")
    if isinstance(content, list):
        yield from (part for part in content if isinstance(part, dict))


def _marked(item: Any) -> bool:
    return isinstance(item, dict) and any(BREAKPOINT in part for part in _parts(item))


def client_marks(body: dict[str, Any], list_key: str) -> int:
    """The breakpoints the client placed itself."""
    return sum(
        BREAKPOINT in part
        for item in _messages(body, list_key)
        if isinstance(item, dict)
        for part in _parts(item)
    )


def _budget(body: dict[str, Any], list_key: str) -> int:
    options = body.get("prompt_cache_options")
    explicit = isinstance(options, dict) and options.get("mode") == "explicit"
    return MAX_WRITES - (0 if explicit else 1) - client_marks(body, list_key)


def place(body: dict[str, Any], slot: CacheControlSlot, list_key: str) -> dict[str, Any]:
    """``body`` with the slot's breakpoints in OpenAI's form (the client's counted, never moved)."""
    items = _messages(body, list_key)
    budget = min(_budget(body, list_key), slot.last_n_messages)
    roles = set(slot.tagged_roles) & MARKABLE_ROLES
    out = list(items)
    wanted = slot.last_n_messages
    for n in range(len(items) - 1 - slot.last_n_messages_offset, -1, -1):
        if wanted <= 0:
            break
        item = items[n]
        if _role(item) not in roles or not _has_content(item):
            continue
        wanted -= 1
        if _marked(item):
            continue  # the client's own: counted already
        if budget <= 0:
            break
        marked = _with_mark(item, slot.part)
        if marked is not None:
            out[n] = marked
            budget -= 1
    return body if out == items else {**body, list_key: out}


def _has_content(item: dict[str, Any]) -> bool:
    content = item.get("content")
    return bool(content) and isinstance(content, (str, list))


def _with_mark(item: dict[str, Any], which: str) -> dict[str, Any] | None:
    """``item`` with a breakpoint on its first or last markable part (None: it has none)."""
    content = item.get("content")
    if isinstance(content, str):
        kind = "text" if item.get("role") == "tool" or "type" not in item else "input_text"
        return {**item, "content": [{"type": kind, "text": content, BREAKPOINT: dict(EXPLICIT)}]}
    parts = list(content) if isinstance(content, list) else []
    order = range(len(parts)) if which == "first" else range(len(parts) - 1, -1, -1)
    for n in order:
        part = parts[n]
        if isinstance(part, dict) and part.get("type") in MARKABLE_PARTS:
            parts[n] = {**part, BREAKPOINT: dict(EXPLICIT)}
            return {**item, "content": parts}
    return None


def strip(body: dict[str, Any], list_key: str) -> dict[str, Any]:
    """``body`` without the client's breakpoints and ``prompt_cache_options`` (the same object if none)."""
    items = _messages(body, list_key)
    if "prompt_cache_options" not in body and not any(map(_marked, items)):
        return body
    out = [_unmarked(item) if _marked(item) else item for item in items]
    stripped = {key: value for key, value in body.items() if key != "prompt_cache_options"}
    if isinstance(body.get(list_key), list):
        stripped[list_key] = out
    return stripped


def _unmarked(item: dict[str, Any]) -> dict[str, Any]:
    parts = [
        {k: v for k, v in part.items() if k != BREAKPOINT} if isinstance(part, dict) else part
        for part in item["content"]
    ]
    return {**item, "content": parts}


def conversation_key(body: dict[str, Any], identity: Identity, list_key: str) -> str:
    """A ``prompt_cache_key`` for the conversation: tenant, role, agent and its opening, digested."""
    items = body.get(list_key)
    opening: list[Any] = []
    for item in items if isinstance(items, list) else [items]:
        opening.append(item)
        if _role(item) == "user":
            break
    parts = [identity.tenant, identity.role, identity.agent, body.get("instructions"), opening]
    canonical = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return KEY_PREFIX + hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:40]
