"""Recover from an upstream that refuses a request as too long for the model's window (issue 18).

Recognised refusals (a 4xx JSON error, before any byte reached the client): OpenAI's
``context_length_exceeded`` ("This model's maximum context length is 8192 tokens. However, your
messages resulted in 9000 tokens ..."), Anthropic's ``prompt is too long: 208000 tokens > 200000
maximum``, and the same words from OpenAI-compatible servers. The budget that fits is the window the
error states (else the window table's, else none: no retry) less the request's output room, scaled by
our count over the provider's when the error gives its count (tokenizers differ), less 5 % margin.
The sent request is then cut to that budget by ``token_limiter``'s rule (whole groups, oldest first;
leading system, newest user message and newest group kept), validated, and sent once more.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from history_proxy.core.invariants import invariants_hold
from history_proxy.core.tokens import TokenCounters
from history_proxy.core.windows import output_reserve
from history_proxy.filters.base import FilterContext
from history_proxy.filters.token_limiter import TokenLimiter

MARGIN = 0.95
"""The share of the computed room the fitted request may fill (our count is an estimate)."""
_WINDOW = re.compile(r"maximum context length is (\d+)|(\d+)\s*(?:tokens\s*)?>\s*(\d+)\s*maximum", re.I)
_THEIRS = re.compile(r"(?:resulted in|requested)\s+(\d+)\s+tokens|too long:\s*(\d+)\s*tokens", re.I)
_TOO_LONG = ("context_length_exceeded", "prompt is too long", "maximum context length", "context window")


@dataclass(frozen=True)
class Overflow:
    """A refusal for length: the window it states and the tokens it counted, when it says them."""

    window: int | None
    counted: int | None


def overflow_of(status: int, body: bytes) -> Overflow | None:
    """The overflow a 4xx error answer reports, or ``None`` for any other answer."""
    if not 400 <= status < 500 or not body:
        return None
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return None
    if not isinstance(error, dict):
        return None
    message = str(error.get("message") or "")
    code = str(error.get("code") or "")
    if code != "context_length_exceeded" and not any(words in message.lower() for words in _TOO_LONG):
        return None
    window = _WINDOW.search(message)
    theirs = _THEIRS.search(message)
    return Overflow(
        window=int(window.group(1) or window.group(3)) if window else None,
        counted=int(theirs.group(1) or theirs.group(2)) if theirs else None,
    )


def fitted_budget(
    overflow: Overflow, body: dict[str, Any], ours: int, table_window: int | None
) -> int | None:
    """The token budget a retry of ``body`` (``ours`` tokens by our count) must fit, or ``None``."""
    window = overflow.window or table_window
    if window is None:
        return None
    room = window - output_reserve(body)
    if overflow.counted:  # the provider's tokenizer counts differently: scale our budget to it
        room = room * ours // overflow.counted
    budget = int(room * MARGIN)
    return budget if 0 < budget < ours else None


def fit(body: dict[str, Any], budget: int, tokens: TokenCounters) -> dict[str, Any] | None:
    """``body`` with its messages cut to ``budget`` tokens, or ``None`` when nothing valid fits better."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    model = str(body.get("model") or "")
    limiter = TokenLimiter(type="token_limiter", limit=budget)
    fitted = limiter.apply(messages, FilterContext(model=model, tokens=tokens.for_request()))
    if len(fitted) == len(messages) or not invariants_hold(fitted):
        return None
    return {**body, "messages": fitted}
