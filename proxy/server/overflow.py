"""The one retry of a chat completion the upstream refused as too long (``proxy.pipeline.overflow``).

Only a whole JSON error answer is looked at, and only before any byte of it reached the client; the
retry goes to the upstream that refused, once, and says so: the ``x-history-overflow-retry`` header
(the budget it was fitted to), the access line's ``overflow_retry`` and
``history_proxy_overflow_retries_total{upstream, outcome}`` (``retried``, or ``unfitted`` when no
smaller valid request could be built and the refusal went back as it came).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from proxy.config.models import Config
from proxy.core.tokens import TokenCounters
from proxy.core.windows import window_of
from proxy.observability.metrics import Exchange, Metrics
from proxy.pipeline.overflow import fit, fitted_budget, overflow_of
from proxy.upstream.client import Body
from proxy.upstream.reply import UpstreamReply

RETRY_HEADER = "x-history-overflow-retry"


async def retry_if_overflow(
    reply: UpstreamReply,
    sent: Body,
    send: Callable[[bytes], Awaitable[UpstreamReply]],
    *,
    config: Config,
    tokens: TokenCounters,
    metrics: Metrics,
    exchange: Exchange,
) -> tuple[UpstreamReply, int] | None:
    """The answer to the fitted request and its budget, when ``reply`` refused ``sent`` for length."""
    if reply.ok or not reply.is_whole_json:
        return None
    overflow = overflow_of(reply.status_code, await reply.read())
    if overflow is None:
        return None
    content = sent if isinstance(sent, bytes) else await sent(reply.upstream) if callable(sent) else None
    body = json.loads(content) if isinstance(content, bytes) else None
    fitted = budget = None
    if isinstance(body, dict) and isinstance(body.get("messages"), list):
        model = str(body.get("model") or "")
        ours = tokens.get(model=model).messages(body["messages"])
        budget = fitted_budget(overflow, body, ours, window_of(model, config.context_windows))
        fitted = fit(body, budget, tokens) if budget is not None else None
    if fitted is None or budget is None:
        metrics.observe_overflow(reply.upstream, "unfitted")
        return None
    metrics.observe_overflow(reply.upstream, "retried")
    exchange.overflow_retry = budget
    retried = await send(json.dumps(fitted, ensure_ascii=False).encode("utf-8"))
    return retried, budget
