"""Token limits a filter may write as a number or as a share of the request model's window (``80%``)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, WithJsonSchema

from history_proxy.core.windows import calibrated_limit, limit_from_share, share_of
from history_proxy.filters.base import FilterContext

WINDOW_UNKNOWN_NOTE = "window:unknown-model"


def _checked(value: object) -> object:
    if isinstance(value, str) and not value.strip().isdigit():
        share_of(value)  # raises the ValueError that names the accepted form
        return value.strip()
    if isinstance(value, str):
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value < 1:
        raise ValueError("must be >= 1 (tokens) or a share such as 80%")
    return value


_LIMIT_SCHEMA = {
    "anyOf": [
        {"type": "integer", "minimum": 1},
        {"type": "string", "pattern": r"^\s*(\d+(\.\d+)?\s*%|\d+)\s*$"},
    ]
}
TokenLimit = Annotated[int | str, BeforeValidator(_checked), WithJsonSchema(_LIMIT_SCHEMA)]
"""Tokens (``16000``) or a share of the request model's context window less its output room (``80%``)."""


def resolve_limit(limit: int | str, ctx: FilterContext | None) -> int | None:
    """The limit in the proxy's own tokens for this request (``None``: a share, asked without a request):
    divided by the upstream's calibrated token ratio (:mod:`history_proxy.core.calibration`)."""
    if isinstance(limit, int):
        return limit if ctx is None else calibrated_limit(limit, ctx.token_ratio)
    if ctx is None:
        return None
    if ctx.window is None and WINDOW_UNKNOWN_NOTE not in ctx.notes:
        ctx.notes.append(WINDOW_UNKNOWN_NOTE)
    return calibrated_limit(limit_from_share(share_of(limit), ctx.window, ctx.reserve), ctx.token_ratio)
