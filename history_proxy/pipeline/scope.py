"""The summarizer as one caller may use it: its tenant's summaries, its proxy key's upstreams only.

A ``summarize`` filter calls a model on the caller's behalf, on a forwarded request and on a preview
alike. :func:`caller_summarizer` hands the filter a summarizer bound to the caller: a summary call to
an upstream outside the key's ``auth.keys[].upstreams`` is refused (the filter falls back to dropping
the old turns, note ``summarize:fallback``), and summaries are cached per tenant, so one tenant can
never find, or time, another tenant's summaries.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from history_proxy.core.identity import Identity
from history_proxy.core.messages import Message
from history_proxy.errors import ForbiddenError
from history_proxy.filters.base import Summarizer


@runtime_checkable
class TenantSummarizer(Protocol):
    """A summarizer that keeps each tenant's summaries apart (``CachingSummarizer``)."""

    async def summarize_for(
        self,
        tenant: str | None,
        messages: list[Message],
        *,
        model: str,
        upstream: str | None,
        prompt: str,
        timeout_s: float,
    ) -> str: ...


class CallerSummarizer:
    """``inner`` for one caller: ``upstreams`` (None: any) and the caller's tenant."""

    def __init__(self, inner: Summarizer, tenant: str | None, upstreams: frozenset[str] | None) -> None:
        self.inner = inner
        self.tenant = tenant
        self.upstreams = upstreams

    async def summarize(
        self, messages: list[Message], *, model: str, upstream: str | None, prompt: str, timeout_s: float
    ) -> str:
        """The summary, if the caller may reach ``upstream``; a ``ForbiddenError`` otherwise."""
        if self.upstreams is not None and upstream not in self.upstreams:
            raise ForbiddenError(
                f"the summary upstream {upstream!r} is outside this proxy key's auth.keys[].upstreams"
            )
        if isinstance(self.inner, TenantSummarizer):
            return await self.inner.summarize_for(
                self.tenant, messages, model=model, upstream=upstream, prompt=prompt, timeout_s=timeout_s
            )
        return await self.inner.summarize(
            messages, model=model, upstream=upstream, prompt=prompt, timeout_s=timeout_s
        )


def caller_summarizer(summarizer: Summarizer | None, identity: Identity) -> Summarizer | None:
    """``summarizer`` bound to ``identity``'s tenant and upstreams (None stays None)."""
    if summarizer is None:
        return None
    return CallerSummarizer(summarizer, identity.tenant, identity.upstreams)
