"""The ``x-history-*`` response headers: what the role's filter chain did to a request's history."""

from __future__ import annotations

import re

from history_proxy.pipeline.run import PipelineResult

_HEADER_UNSAFE = re.compile(r"[^\x20-\x7e]")


def _header_value(value: object) -> str:
    text = str(value)
    if text.isascii() and text.isprintable():  # exactly \x20-\x7e: nothing to replace, no regex pass
        return text
    return _HEADER_UNSAFE.sub("?", text)


def history_headers(result: PipelineResult, role: str) -> dict[str, str]:
    """The ``x-history-*`` headers describing what the chain did."""
    notes: list[str] = result.report.get("notes", [])
    # filter type names only: every note, a filter's own (``summarize:fallback``) too, is in x-history-notes
    applied = list(result.applied)
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
