"""The ``x-history-*`` response headers: what the role's filter chain did to a request's history."""

from __future__ import annotations

import re

from history_proxy.pipeline.run import PipelineResult

_HEADER_UNSAFE = re.compile(r"[^\x20-\x7e]")
NOT_FILTER_NOTES = ("identity:", "history_at_provider:", "refetch:", "responses_compaction:", "policy_only")
"""Notes about the request, not about a filter: in ``x-history-notes`` only."""


def _header_value(value: object) -> str:
    text = str(value)
    if text.isascii() and text.isprintable():  # exactly \x20-\x7e: nothing to replace, no regex pass
        return text
    return _HEADER_UNSAFE.sub("?", text)


def history_headers(result: PipelineResult, role: str) -> dict[str, str]:
    """The ``x-history-*`` headers describing what the chain did."""
    notes: list[str] = result.report.get("notes", [])
    # a filter's own notes (``summarize:fallback``) also follow the chain in x-history-filters, as before
    applied = [*result.applied, *(note for note in notes if not note.startswith(NOT_FILTER_NOTES))]
    if result.failed_filter:
        applied.append(f"failed:{result.failed_filter}")
    headers = {
        "x-history-role": _header_value(role),
        "x-history-mode": result.mode,
        "x-history-filters": _header_value(",".join(applied)),
        "x-history-tokens-before": str(result.tokens_before),
        "x-history-tokens-after": str(result.tokens_after),
        "x-history-messages-before": str(result.messages_before),
        "x-history-messages-after": str(result.messages_after),
    }
    if notes:
        headers["x-history-notes"] = _header_value(",".join(notes))
    if result.mode == "shadow":  # "after" is what the chain would send; these are what was sent
        headers["x-history-tokens-forwarded"] = str(result.tokens_forwarded)
        headers["x-history-messages-forwarded"] = str(result.messages_forwarded)
    return headers
