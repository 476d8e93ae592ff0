"""Anthropic's ``context_management`` on a Messages request, for an upstream of each mode.

:func:`manage` takes the shaped body (after the caller's chain) and the upstream's mode
(:mod:`history_proxy.config.standards`):

- ``native``: the field is kept byte for byte and its beta merged into ``anthropic-beta``; only a
  ``clear_thinking_20251015`` edit on a request without thinking enabled is left out (Anthropic
  answers 400 to it, and what the client sent must never fail a request that would succeed without);
- ``emulate``: the client's edits are applied here, in the order the client listed them, each to
  the output of the one before (:mod:`~history_proxy.surfaces.edit_clear_tool_uses`,
  :mod:`~history_proxy.surfaces.edit_clear_thinking`; a due :mod:`~history_proxy.surfaces.edit_compact`
  is handed back for the server to summarise); the field and its betas are removed, and the answer
  gets ``context_management.applied_edits`` (:mod:`history_proxy.surfaces.context_answer`);
- ``strip``: the field and its betas are removed, nothing is applied.

In both ``emulate`` and ``strip``, everything before the newest ``compaction`` block the client sends
back is replaced by its summary first (the upstream does not know the block).

The order with the caller's chain: the chain runs first (its view of the request as the client sent
it), then the client's edits, on what the chain kept, as Anthropic's API applies them to what it
receives; so the same request gets the same edits whether the upstream applies them or the proxy does.
An edit of a type the proxy does not know is left out (emulate) and reported nowhere.
A request without the field takes none of these paths (one dict lookup).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from history_proxy.config.standards import CONTEXT_MANAGEMENT_BETA, ContextManagementMode
from history_proxy.surfaces import edit_clear_thinking, edit_clear_tool_uses, edit_compact
from history_proxy.surfaces.edit_common import EditInput, text_tokens

FIELD = "context_management"
Edit = Callable[[dict[str, Any], list[Any], EditInput], tuple[list[Any], dict[str, Any] | None]]
EDITS: dict[str, Edit] = {
    edit_clear_tool_uses.TYPE: edit_clear_tool_uses.apply,
    edit_clear_thinking.TYPE: edit_clear_thinking.apply,
}
"""The edits the proxy emulates, by ``type``."""


@dataclass
class Managed:
    """The body to send, what to do with the beta header, and the edits to report in the answer."""

    body: dict[str, Any]
    beta: str | None = None
    """``merge``: add ``context-management-2025-06-27`` to ``anthropic-beta``; ``remove``: take it out."""
    applied: list[dict[str, Any]] | None = None
    """Emulated: the ``applied_edits`` for the answer (empty when none applied)."""
    cleared_tokens: int = 0
    compact: dict[str, Any] | None = None
    """Emulated: the ``compact_20260112`` edit that is due (the summary is the caller's to write)."""
    input_tokens: int = 0
    """Emulated: the request's input tokens (calibrated) after the edits."""


def edits_of(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's edits (objects only, in order)."""
    field = body.get(FIELD)
    edits = field.get("edits") if isinstance(field, dict) else None
    return [edit for edit in edits if isinstance(edit, dict)] if isinstance(edits, list) else []


def thinking_enabled(body: dict[str, Any]) -> bool:
    """Extended thinking is on for this request."""
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")


def manage(
    body: dict[str, Any], mode: ContextManagementMode, env: Callable[[dict[str, Any]], EditInput]
) -> Managed:
    """``body`` as the upstream of ``mode`` takes it (``env``: the edits' view, built only when emulating)."""
    if FIELD not in body:
        return Managed(body)
    if mode == "native":
        return Managed(_native(body), beta="merge")
    stripped = {key: value for key, value in body.items() if key != FIELD}
    natives = body.get("messages")
    if not isinstance(natives, list):
        return Managed(stripped, beta="remove", applied=None if mode == "strip" else [])
    messages = edit_compact.expanded(natives)  # the upstream cannot read a compaction block
    if mode == "strip":
        return Managed(_with(stripped, natives, messages), beta="remove")
    seen = env(body)
    if messages is not natives:  # counted again: the dropped history no longer counts
        seen = replace(seen, input_tokens=sum(text_tokens(m.get("content"), seen.tokens) for m in messages))
    managed = Managed(stripped, beta="remove", applied=[])
    for edit in edits_of(body):
        kind = edit.get("type")
        if kind == edit_compact.TYPE:
            if edit_compact.due(edit, seen):
                managed.compact = edit
            continue
        apply = EDITS.get(str(kind))
        if apply is None:
            continue
        messages, entry = apply(edit, messages, seen)
        if entry is not None:
            managed.applied = [*(managed.applied or []), entry]
            freed = int(entry.get("cleared_input_tokens", 0))
            managed.cleared_tokens += freed
            seen = replace(seen, input_tokens=max(0, seen.input_tokens - freed))
    managed.body = _with(stripped, natives, messages)
    managed.input_tokens = seen.input_tokens
    return managed


def _with(body: dict[str, Any], natives: list[Any], messages: list[Any]) -> dict[str, Any]:
    return body if messages is natives else {**body, "messages": messages}


def _native(body: dict[str, Any]) -> dict[str, Any]:
    """The body as sent, but for a ``clear_thinking`` edit Anthropic would refuse (thinking off)."""
    if thinking_enabled(body):
        return body
    edits = edits_of(body)
    kept = [edit for edit in edits if edit.get("type") != edit_clear_thinking.TYPE]
    if len(kept) == len(edits):
        return body
    if not kept:
        return {key: value for key, value in body.items() if key != FIELD}
    return {**body, FIELD: {**body[FIELD], "edits": kept}}


def with_beta(headers: list[tuple[str, str]], action: str | None) -> list[tuple[str, str]]:
    """``headers`` with ``context-management-2025-06-27`` merged into ``anthropic-beta``, or it and
    ``compact-2026-01-12`` removed from it."""
    if action is None:
        return headers
    out: list[tuple[str, str]] = []
    first: int | None = None  # the first anthropic-beta header kept
    found = False
    for name, value in headers:
        if name.lower() != "anthropic-beta":
            out.append((name, value))
            continue
        betas = [b.strip() for b in value.split(",") if b.strip()]
        if action == "remove":
            betas = [b for b in betas if b not in (CONTEXT_MANAGEMENT_BETA, edit_compact.BETA)]
        found = found or CONTEXT_MANAGEMENT_BETA in betas
        if betas:
            first = len(out) if first is None else first
            out.append((name, ",".join(betas)))
    if action == "merge" and not found:
        if first is None:
            out.append(("anthropic-beta", CONTEXT_MANAGEMENT_BETA))
        else:
            out[first] = (out[first][0], f"{out[first][1]},{CONTEXT_MANAGEMENT_BETA}")
    return out
