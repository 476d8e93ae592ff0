"""Summaries written once per span and shared: a caching, single-flight ``Summarizer``.

:class:`CachingSummarizer` wraps the real summarizer (``Upstreams.summarize``). A summary is stored
under the sha256 of exactly what it summarizes (annotations stripped) plus the tenant, the model and
the prompt (tenants never share a summary: a hit would tell one tenant what another sent),
so a growing conversation finds the same text again until its summarized span advances. Looking one
up goes, in order, through:

    this process's memory LRU        hit: no call
    a call already running here      join it (one call per key and process)
    Redis (backend ``redis``)        hit: copied into memory
    a Redis lock (SET NX PX)         won: call the model, store the summary, release the lock;
                                     lost: poll Redis until the summary appears or the lock is
                                     free, and call the model after ``timeout_s`` at the latest

Redis never fails a request: on an error the backend logs once per outage (WARNING), counts every
failed operation, serves from memory and tries Redis again after a growing back-off.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import time

from history_proxy.core.messages import Message, strip_annotations
from history_proxy.core.summary_input import summary_messages
from history_proxy.errors import ProxyError, UpstreamTimeoutError
from history_proxy.filters.base import Summarizer
from history_proxy.summaries.store import MemoryBackend, SummaryBackend, SummaryRecorder, Unrecorded

KEY_VERSION = 2
"""Part of every cache key: bump it when what a key stands for changes."""
LOCK_MARGIN_S = 1.0


def summary_key(messages: list[Message], *, model: str, prompt: str, tenant: str | None = None) -> str:
    """The cache key of a summary: sha256 of canonical JSON of the tenant, messages, model and prompt."""
    canonical = json.dumps(
        {
            "v": KEY_VERSION,
            "tenant": tenant,
            "model": model,
            "prompt": prompt,
            "messages": strip_annotations(messages),
        },
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        default=str,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class CachingSummarizer:
    """A ``Summarizer`` that calls the wrapped one at most once per summary key, across replicas with Redis."""

    def __init__(
        self,
        summarizer: Summarizer,
        backend: SummaryBackend | None = None,
        *,
        recorder: SummaryRecorder | None = None,
        poll_s: float = 0.05,
    ) -> None:
        self.summarizer = summarizer
        self.backend: SummaryBackend = backend if backend is not None else MemoryBackend()
        self.recorder: SummaryRecorder = recorder if recorder is not None else Unrecorded()
        self.poll_s = poll_s
        self._inflight: dict[str, asyncio.Task[str]] = {}

    async def summarize(
        self, messages: list[Message], *, model: str, upstream: str | None, prompt: str, timeout_s: float
    ) -> str:
        """The cached summary of ``messages`` (no tenant), or the one being written, or a new one."""
        return await self.summarize_for(
            None, messages, model=model, upstream=upstream, prompt=prompt, timeout_s=timeout_s
        )

    async def summarize_for(
        self,
        tenant: str | None,
        messages: list[Message],
        *,
        model: str,
        upstream: str | None,
        prompt: str,
        timeout_s: float,
    ) -> str:
        """The cached summary of ``tenant``'s ``messages`` (as :func:`summary_messages` writes them):
        tenants never share an entry, in memory or in Redis."""
        messages = summary_messages(messages)
        key = summary_key(messages, model=model, prompt=prompt, tenant=tenant)
        cached = self.backend.cached(key)
        if cached is not None:
            self.recorder.summary_cache_hit("memory")
            return cached
        task = self._inflight.get(key)
        if task is None:
            call = self._fill(
                key, list(messages), model=model, upstream=upstream, prompt=prompt, timeout_s=timeout_s
            )
            task = asyncio.create_task(call, name=f"history-proxy summary {key[:12]}")
            self._inflight[key] = task
            task.add_done_callback(functools.partial(self._done, key))
        else:
            self.recorder.summary_cache_hit("inflight")
        # Shielded: a caller that stops waiting (its timeout) leaves the call running for the others
        # and for the cache.
        return await asyncio.shield(task)

    def _done(self, key: str, task: asyncio.Task[str]) -> None:
        if self._inflight.get(key) is task:
            del self._inflight[key]
        if not task.cancelled():
            task.exception()  # retrieved here: every caller may have given up waiting

    async def _fill(
        self,
        key: str,
        messages: list[Message],
        *,
        model: str,
        upstream: str | None,
        prompt: str,
        timeout_s: float,
    ) -> str:
        shared = await self.backend.fetch(key)
        if shared is not None:
            self.recorder.summary_cache_hit(self.backend.name)
            return shared
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        token = await self.backend.acquire(key, timeout_s + LOCK_MARGIN_S)
        while token is None and loop.time() < deadline:
            await asyncio.sleep(self.poll_s)
            shared = await self.backend.fetch(key)
            if shared is not None:
                self.recorder.summary_cache_hit(self.backend.name)
                return shared
            token = await self.backend.acquire(key, timeout_s + LOCK_MARGIN_S)
        try:
            summary = await self._call(
                messages, model=model, upstream=upstream, prompt=prompt, timeout_s=timeout_s
            )
            await self.backend.store(key, summary)
            return summary
        finally:
            if token is not None:
                await self.backend.release(key, token)

    async def _call(
        self, messages: list[Message], *, model: str, upstream: str | None, prompt: str, timeout_s: float
    ) -> str:
        self.recorder.summary_cache_miss()
        started = time.perf_counter()
        outcome, status = "error", 500
        try:
            async with asyncio.timeout(timeout_s):
                summary = await self.summarizer.summarize(
                    messages, model=model, upstream=upstream, prompt=prompt, timeout_s=timeout_s
                )
            if not isinstance(summary, str) or not summary.strip():
                raise ValueError("the summarizer returned no text")
            outcome, status = "ok", 200
            return summary
        except TimeoutError:
            outcome, status = "timeout", 504
            raise
        except ProxyError as exc:
            outcome = "timeout" if isinstance(exc, UpstreamTimeoutError) else "error"
            status = exc.status_code
            raise
        except asyncio.CancelledError:
            outcome, status = "cancelled", 499
            raise
        finally:
            self.recorder.summary_call(
                upstream=upstream,
                model=model,
                outcome=outcome,
                status=status,
                seconds=time.perf_counter() - started,
            )

    async def aclose(self) -> None:
        """Cancel the calls still running and close the backend."""
        running = list(self._inflight.values())
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        await self.backend.aclose()
