"""Responses compaction on every upstream: forwarded where the upstream has it, emulated where it lacks it.

Codex compacts remotely: ``POST /v1/responses/compact`` sends the whole history and takes back the
``output`` items as the new history (the user's messages and one ``compaction`` item whose
``encrypted_content`` only OpenAI can read), and Responses ``context_management: [{"type":
"compaction", "compact_threshold": N}]`` asks the server to compact inline once the input passes N
tokens. Both exist only on OpenAI's API. By the upstream's ``responses_compaction``
(:mod:`history_proxy.config.openai_standards`):

- ``native``: forwarded (after the policies and the caller's chain, like any Responses request);
- ``emulate``: the proxy compacts itself (:func:`compact`): the shaped history is summarized through
  the summaries machinery (cached per tenant, single-flight, Redis when configured) and the answer is
  the user's ``message`` items plus a ``compaction`` item of the proxy's own, whose
  ``encrypted_content`` is a handle (:data:`HANDLE_PREFIX`) to the summary, kept per tenant in a
  byte-bounded store. ``context_management`` is removed before forwarding and, past its threshold,
  the request goes upstream compacted the same way;
- ``strip``: ``context_management`` removed, nothing emulated.

On every later request (:func:`prepare`), the newest proxy-issued ``compaction`` item is expanded into
a ``developer`` message holding the summary, and what it summarized (the items before it other than
user, system and developer messages) is left out. A ``compaction`` item the proxy did not issue (OpenAI's
encrypted content) goes only to a ``native`` upstream; any other upstream never receives it.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, Literal, Protocol

from history_proxy.filters.base import Summarizer
from history_proxy.surfaces import responses
from history_proxy.surfaces._view import Shaped as Shaped  # what the handler emulates on

Mode = Literal["native", "emulate", "strip"]
TRIGGER = "compaction_trigger"
"""The input item Codex ends a compaction request with (remote compaction v2: a streamed ``/v1/responses``
that must answer exactly one ``compaction`` output item)."""
HANDLE_PREFIX = "hpx-compaction-1."
"""How the ``encrypted_content`` of a proxy-issued ``compaction`` item starts."""
COMPACTION_PROMPT = (
    "Summarize the conversation above for the agent that continues it: the task, what was done and "
    "found (paths, names, numbers, errors verbatim), decisions taken and what remains to do. Write "
    "only the summary."
)
SUMMARY_HEAD = "Summary of the earlier conversation (compacted by history-proxy):\n"
UNAVAILABLE = (
    "(an earlier part of this conversation was compacted by history-proxy; its summary is no longer "
    "held, so it is left out)"
)
SUMMARY_TIMEOUT_S = 60.0
EXPANDED = "responses_compaction:expanded"
FOREIGN_DROPPED = "responses_compaction:foreign_item_dropped"
EMULATED = "responses_compaction:emulated"
STRIPPED = "responses_compaction:stripped"
KEPT_ROLES = ("user", "system", "developer")


class Compactions(Protocol):
    """Where the summaries behind handles live (:class:`history_proxy.summaries.compactions.CompactionStore`)."""

    async def keep(self, tenant: str | None, handle: str, summary: str) -> None: ...

    async def find(self, tenant: str | None, handle: str) -> str | None: ...


@dataclass
class Prepared:
    """A Responses body ready for the upstream's compaction mode."""

    body: dict[str, Any]
    threshold: int | None = None
    """``compact_threshold`` of an emulated ``context_management`` compaction (None: none asked)."""
    notes: list[str] = field(default_factory=list)
    triggered: bool = False
    """The input ended with a ``compaction_trigger`` item (removed unless the upstream is native)."""


def _is_compaction(item: Any) -> bool:
    return item.__class__ is dict and item.get("type") == "compaction"


def is_ours(item: Any) -> bool:
    """A ``compaction`` item the proxy issued (its ``encrypted_content`` a handle)."""
    content = item.get("encrypted_content") if _is_compaction(item) else None
    return isinstance(content, str) and content.startswith(HANDLE_PREFIX)


def concerned(body: dict[str, Any], mode: Mode) -> bool:
    """Whether ``body`` carries anything of Responses compaction for an upstream in ``mode`` (the one
    check a request carrying none of it pays: a pass in C over its items' types)."""
    if mode != "native" and "context_management" in body:
        return True
    items = body.get("input")
    if not isinstance(items, list):
        return False
    kinds = _kinds(items)
    return "compaction" in kinds or (mode != "native" and TRIGGER in kinds)


async def prepare(body: dict[str, Any], mode: Mode, tenant: str | None, store: Compactions) -> Prepared:
    """``body`` for an upstream in ``mode``: the proxy's handles expanded, foreign items kept only for a
    ``native`` upstream, ``context_management`` removed unless ``native`` (the same object when nothing
    applies: the cost of a request carrying none of this is one pass over its items)."""
    items = body.get("input")
    kinds = _kinds(items) if isinstance(items, list) else _NONE
    compacted = "compaction" in kinds
    managed = mode != "native" and "context_management" in body
    triggered = mode != "native" and TRIGGER in kinds
    if not compacted and not managed and not triggered:
        return Prepared(body)
    prepared = Prepared(dict(body), triggered=triggered and mode == "emulate")
    if managed:
        asked = prepared.body.pop("context_management")
        prepared.threshold = threshold_of(asked) if mode == "emulate" else None
        prepared.notes.append(EMULATED if mode == "emulate" else STRIPPED)
    if isinstance(items, list) and (compacted or triggered):
        kept = [item for item in items if not _is_trigger(item)] if triggered else items
        if triggered:
            prepared.notes.append(EMULATED if mode == "emulate" else STRIPPED)
        prepared.body["input"] = (
            await _expanded(kept, mode, tenant, store, prepared.notes) if compacted else kept
        )
    return prepared


_NONE: frozenset[Any] = frozenset()


def _kinds(items: list[Any]) -> set[Any]:
    """The ``type`` values of ``items``, in one pass in C (every request pays it: keep it cheap)."""
    try:
        return set(map(dict.get, items, repeat("type")))
    except TypeError:  # an item that is not an object, or a type that is not hashable: the long way
        return {
            item.get("type") for item in items if isinstance(item, dict) and isinstance(item.get("type"), str)
        }


def _is_trigger(item: Any) -> bool:
    return item.__class__ is dict and item.get("type") == TRIGGER


def threshold_of(asked: Any) -> int | None:
    """The ``compact_threshold`` of a ``context_management`` list's ``compaction`` entry (None: none)."""
    entries = asked if isinstance(asked, list) else [asked]
    for entry in entries:
        if isinstance(entry, dict) and entry.get("type") == "compaction":
            value = entry.get("compact_threshold")
            return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
    return None


async def _expanded(
    items: list[Any], mode: Mode, tenant: str | None, store: Compactions, notes: list[str]
) -> list[Any]:
    """``items`` with the newest proxy handle expanded (and what it summarized left out), older proxy
    handles dropped, and foreign ``compaction`` items kept only for a ``native`` upstream."""
    newest = max((n for n, item in enumerate(items) if is_ours(item)), default=-1)
    out: list[Any] = []
    for n, item in enumerate(items):
        if n == newest:
            found = await store.find(tenant, item["encrypted_content"])
            out.append(summary_item(found))
            notes.append(EXPANDED)
        elif is_ours(item) or (n < newest and not _kept_message(item)):
            continue  # summarized by the newest handle
        elif _is_compaction(item) and mode != "native":
            notes.append(FOREIGN_DROPPED)  # OpenAI's encrypted content never goes to another provider
        else:
            out.append(item)
    return out


def _kept_message(item: Any) -> bool:
    return (
        isinstance(item, dict) and item.get("type", "message") == "message" and item.get("role") in KEPT_ROLES
    )


def summary_item(summary: str | None) -> dict[str, Any]:
    """The ``developer`` message a proxy handle stands for upstream."""
    text = SUMMARY_HEAD + summary if summary is not None else UNAVAILABLE
    return {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": text}]}


@dataclass
class Compaction:
    """What an emulated compaction made: the new history and the summary behind its handle."""

    output: list[Any]
    """The user's message items, then the proxy's ``compaction`` item."""
    summary: str
    item: dict[str, Any]

    @property
    def forwarded(self) -> list[Any]:
        """The compacted history as an upstream without compaction reads it (the handle expanded)."""
        return [*self.output[:-1], summary_item(self.summary)]


async def compact(
    body: dict[str, Any],
    summarizer: Summarizer,
    *,
    model: str,
    upstream: str | None,
    tenant: str | None,
    store: Compactions,
) -> Compaction:
    """Compact ``body``'s (shaped) history: its summary kept behind a new handle."""
    view = responses.strip_refs(responses.to_view(body).messages)
    summary = await summarizer.summarize(
        view, model=model, upstream=upstream, prompt=COMPACTION_PROMPT, timeout_s=SUMMARY_TIMEOUT_S
    )
    digest = hashlib.sha256(f"{tenant}\0{summary}".encode()).hexdigest()
    handle = HANDLE_PREFIX + digest[:48]
    await store.keep(tenant, handle, summary)
    item = {"type": "compaction", "id": f"cmp_hpx_{digest[:24]}", "encrypted_content": handle}
    return Compaction([*user_messages(body.get("input")), item], summary, item)


def user_messages(items: Any) -> list[Any]:
    """The user's ``message`` items of an ``input`` (a string input is one)."""
    if isinstance(items, str):
        return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": items}]}]
    if not isinstance(items, list):
        return []
    return [
        item
        for item in items
        if isinstance(item, dict) and item.get("type", "message") == "message" and item.get("role") == "user"
    ]


def compaction_answer(compaction: Compaction, *, model: str, input_tokens: int) -> dict[str, Any]:
    """The ``response.compaction`` object OpenAI's ``/v1/responses/compact`` answers."""
    output_tokens = max(1, math.ceil(len(compaction.summary) / 4))
    return {
        "id": "resp_hpx_" + compaction.item["id"].removeprefix("cmp_hpx_"),
        "object": "response.compaction",
        "created_at": int(time.time()),
        "model": model,
        "output": compaction.output,
        "usage": {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens,
        },
    }


def triggered_answer(compaction: Compaction, *, model: str, input_tokens: int) -> dict[str, Any]:
    """The ``response`` a ``compaction_trigger`` request gets: exactly one ``compaction`` output item."""
    usage = compaction_answer(compaction, model=model, input_tokens=input_tokens)["usage"]
    return {
        "id": "resp_hpx_" + compaction.item["id"].removeprefix("cmp_hpx_"),
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "error": None,
        "incomplete_details": None,
        "model": model,
        "output": [compaction.item],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage,
    }


def response_events(response: dict[str, Any]) -> bytes:
    """``response`` as the Responses API's typed SSE events, ``response.created`` to ``response.completed``."""
    started = {**response, "status": "in_progress", "output": [], "usage": None}
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": started}),
        ("response.in_progress", {"response": started}),
    ]
    for n, item in enumerate(response["output"]):
        events += [
            ("response.output_item.added", {"output_index": n, "item": item}),
            ("response.output_item.done", {"output_index": n, "item": item}),
        ]
    events.append(("response.completed", {"response": response}))
    lines = [
        f"event: {kind}\ndata: "
        + json.dumps({"type": kind, "sequence_number": n, **fields}, separators=(",", ":"))
        + "\n\n"
        for n, (kind, fields) in enumerate(events)
    ]
    return "".join(lines).encode("utf-8")


def with_item(answer: bytes, item: dict[str, Any]) -> bytes | None:
    """A JSON ``response`` answer with ``item`` first in its ``output`` (None: not such an answer)."""
    try:
        parsed = json.loads(answer)
    except ValueError:
        return None
    output = parsed.get("output") if isinstance(parsed, dict) else None
    if not isinstance(output, list):
        return None
    parsed["output"] = [item, *output]
    return json.dumps(parsed, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
