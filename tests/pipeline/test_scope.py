"""The summarizer as one caller may use it: its key's upstreams only, its tenant's summaries only."""

from __future__ import annotations

import asyncio

import pytest

from history_proxy.core.identity import Identity
from history_proxy.core.messages import Message
from history_proxy.errors import ForbiddenError
from history_proxy.filters.base import Summarizer
from history_proxy.pipeline.scope import caller_summarizer
from history_proxy.summaries.cache import CachingSummarizer, summary_key

MESSAGES: list[Message] = [
    {"role": "user", "content": "the PIN is 4171"},
    {"role": "assistant", "content": "ok"},
]


class Counting:
    """A summarizer that counts its calls."""

    def __init__(self) -> None:
        self.calls: list[str | None] = []

    async def summarize(
        self, messages: list[Message], *, model: str, upstream: str | None, prompt: str, timeout_s: float
    ) -> str:
        self.calls.append(upstream)
        return "a summary"


def summarize(summarizer: Summarizer, identity: Identity, upstream: str = "openai") -> str:
    scoped = caller_summarizer(summarizer, identity)
    assert scoped is not None
    return asyncio.run(scoped.summarize(MESSAGES, model="m", upstream=upstream, prompt="p", timeout_s=5))


def test_a_summary_upstream_outside_the_keys_scope_is_refused_before_any_call() -> None:
    inner = Counting()
    with pytest.raises(ForbiddenError, match=r"auth.keys\[\].upstreams"):
        summarize(inner, Identity(role="r", tenant="a", upstreams=frozenset({"openai"})), upstream="ops")
    assert inner.calls == []
    assert summarize(inner, Identity(role="r", tenant="a", upstreams=frozenset({"openai"}))) == "a summary"
    assert summarize(inner, Identity(role="r"), upstream="ops") == "a summary"  # no scope: any upstream


def test_tenants_never_share_a_cached_summary() -> None:
    inner = Counting()
    cache = CachingSummarizer(inner)
    for tenant in ("a", "a", "b", None):
        summarize(cache, Identity(role="r", tenant=tenant))
    assert len(inner.calls) == 3
    keys = {summary_key(MESSAGES, model="m", prompt="p", tenant=t) for t in ("a", "b", None)}
    assert len(keys) == 3  # the same key in memory and in Redis: sealed in both
