"""Context windows of common model families (a table packaged with the proxy, overridable in config),
and token limits written as a share of the request model's window (issue 18).

``limit: 80%`` means 80 % of the model's window, less the request's ``max_completion_tokens`` (or
``max_tokens``): the room the answer may take comes out of the same window.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Mapping
from functools import lru_cache
from importlib import resources
from typing import Any

DEFAULT_WINDOW = 128_000
"""The window assumed for a model the table does not know (a note says so)."""
SHARE = re.compile(r"^(?P<pct>\d{1,3}(?:\.\d+)?)\s*%$")


@lru_cache(maxsize=1)
def packaged_windows() -> tuple[tuple[str, int], ...]:
    """The packaged table: (glob, tokens), first match wins."""
    text = resources.files("history_proxy.core").joinpath("context_windows.json").read_text(encoding="utf-8")
    return tuple((str(glob), int(tokens)) for glob, tokens in json.loads(text)["windows"])


def window_of(model: str, overrides: Mapping[str, int] | None = None) -> int | None:
    """The context window of ``model``: the config's overrides first, then the packaged table."""
    name = model.lower()
    for glob, tokens in (*(overrides or {}).items(), *packaged_windows()):
        if fnmatch.fnmatchcase(name, glob.lower()):
            return tokens
    return None


def output_reserve(body: Mapping[str, Any]) -> int:
    """The answer's room the request asks for: ``max_completion_tokens``, else ``max_tokens`` (0 if neither)."""
    for key in ("max_completion_tokens", "max_tokens", "max_output_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def share_of(text: str) -> float:
    """``"80%"`` -> 0.8; a ``ValueError`` naming the accepted form otherwise."""
    match = SHARE.match(text.strip())
    if match is None or not 0 < float(match["pct"]) <= 100:
        raise ValueError(
            f"{text!r} is not a share of the model's window: write a number of tokens or 1% to 100%"
        )
    return float(match["pct"]) / 100


def limit_from_share(share: float, window: int | None, reserve: int) -> int:
    """``share`` of ``window`` (``DEFAULT_WINDOW`` when unknown) less ``reserve``, at least 1."""
    return max(1, int((window or DEFAULT_WINDOW) * share) - reserve)


def calibrated_limit(limit: int, ratio: float) -> int:
    """A token limit in the proxy's own count, for an upstream that counts ``ratio`` times as many
    (:mod:`history_proxy.core.calibration`)."""
    return max(1, int(limit / ratio)) if ratio != 1.0 else limit
