"""The one retry of a request the upstream refused as too long (``history_proxy.pipeline.overflow``).

Chat completions, Responses and Messages requests (not ``count_tokens``, and not a Responses request
whose history lives at the provider) are cut to the budget by :func:`history_proxy.surfaces.fit.fit`, each
valid for its own API. Only a whole JSON error answer is looked at, and only before any byte of it
reached the client; the retry goes to the upstream that refused, once, and says so: the
``x-history-overflow-retry`` header (the budget it was fitted to), the access line's ``overflow_retry`` and
``history_proxy_overflow_retries_total{upstream, outcome}`` (``retried``, or ``unfitted`` when no
smaller valid request could be built and the refusal went back as it came).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from history_proxy.config.models import CacheControlSlot, Config
from history_proxy.core.tokens import TokenCounters
from history_proxy.core.windows import window_of
from history_proxy.observability.metrics import Exchange, Metrics
from history_proxy.pipeline.overflow import fitted_budget, overflow_of
from history_proxy.server.body import encode_json
from history_proxy.surfaces.fit import fit, history_tokens
from history_proxy.surfaces.table import CHAT, Surface
from history_proxy.upstream.client import Body
from history_proxy.upstream.reply import UpstreamReply

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
    surface: Surface = CHAT,
) -> tuple[UpstreamReply, int] | None:
    """The answer to the fitted request and its budget, when ``reply`` refused ``sent`` (a request of
    ``surface``) for length."""
    if reply.ok or not reply.is_whole_json:
        return None
    overflow = overflow_of(reply.status_code, await reply.read())
    if overflow is None:
        return None
    content = sent if isinstance(sent, bytes) else await sent(reply.upstream) if callable(sent) else None
    body = json.loads(content) if isinstance(content, bytes) else None
    ours = history_tokens(surface, body, tokens) if isinstance(body, dict) else None
    if ours is None or not isinstance(body, dict):  # no history the proxy may cut: as it came, uncounted
        return None
    model = str(body.get("model") or "")
    budget = fitted_budget(overflow, body, ours, window_of(model, config.context_windows))
    fitted = None
    if budget is not None:
        fitted = fit(surface, body, budget, tokens, marks=_marks(config, surface, reply.upstream, exchange))
    if fitted is None or budget is None:
        metrics.observe_overflow(reply.upstream, "unfitted")
        return None
    metrics.observe_overflow(reply.upstream, "retried")
    exchange.refitted(budget)
    retried = await send(encode_json(fitted))  # a lone surrogate stays escaped, as on the first send
    return retried, budget


def _marks(config: Config, surface: Surface, upstream: str, exchange: Exchange) -> CacheControlSlot | None:
    """The ``cache_control`` slot a fitted request of a surface with native marks places them with, as
    :func:`history_proxy.surfaces.shape.shape` did for the first send (enforce mode, an upstream that takes them)."""
    target = config.upstreams.get(upstream)
    enforced = exchange.result is None or exchange.result.mode == "enforce"
    if not surface.native_marks or target is None or not target.cache_control or not enforced:
        return None
    return config.cache_control
