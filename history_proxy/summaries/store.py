"""Where summaries live: a memory LRU per process, optionally Redis shared by every replica.

Both backends answer the same small interface (:class:`SummaryBackend`): a synchronous look-up in
this process's memory, and asynchronous fetch/store/lock operations on the shared store. The Redis
backend keeps a memory LRU in front and never raises: on an error it logs once per outage
(WARNING, password redacted), counts every failed operation, answers from memory and tries Redis
again after a growing back-off (1 s doubling up to 30 s).
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import sys
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from history_proxy.config.summaries import SummaryCacheConfig, redacted_url

log = logging.getLogger("history_proxy.summary_cache")

T = TypeVar("T")
LOCAL_LOCK = "local"
"""The lock token of a backend that has no shared lock (memory, or Redis while it is down)."""
# Deletes the lock only while it still holds our token (it may have expired and been taken since).
RELEASE_SCRIPT = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
)


def redis_client(url: str, timeout_s: float) -> Redis:
    """A Redis client that fails fast: no retries inside it, so an unreachable Redis costs one short
    timeout, not several."""
    return Redis.from_url(
        url,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), 0),
        decode_responses=True,
    )


class SummaryRecorder(Protocol):
    """Where cache outcomes and summary calls are counted.

    ``history_proxy.observability.metrics.Metrics`` implements it."""

    def summary_cache_hit(self, source: str) -> None: ...

    def summary_cache_miss(self) -> None: ...

    def summary_cache_error(self, backend: str) -> None: ...

    def summary_call(
        self, *, upstream: str | None, model: str, outcome: str, status: int, seconds: float
    ) -> None: ...


class Unrecorded:
    """A recorder that records nothing (tests, tools)."""

    def summary_cache_hit(self, source: str) -> None:
        pass

    def summary_cache_miss(self) -> None:
        pass

    def summary_cache_error(self, backend: str) -> None:
        pass

    def summary_call(
        self, *, upstream: str | None, model: str, outcome: str, status: int, seconds: float
    ) -> None:
        pass


class SummaryBackend(Protocol):
    """A summary store: this process's memory in front, optionally a store shared between processes."""

    name: str

    def cached(self, key: str) -> str | None:
        """The summary in this process's memory, if any (no I/O)."""

    async def fetch(self, key: str) -> str | None:
        """The summary in the shared store, if any (None without one or when it is unreachable)."""

    async def store(self, key: str, summary: str) -> None:
        """Keep a summary in memory and in the shared store."""

    async def acquire(self, key: str, ttl_s: float) -> str | None:
        """A lock token for writing ``key``, or None while another process holds the lock."""

    async def release(self, key: str, token: str) -> None:
        """Give a lock back."""

    async def aclose(self) -> None:
        """Close connections."""


class MemoryBackend:
    """A bounded LRU of summaries in this process (the default backend), in entries and in bytes."""

    name = "memory"

    def __init__(self, max_entries: int = 1024, max_bytes: int = 16 * 1024 * 1024) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.held_bytes = 0
        """What the kept summaries and their keys hold now (string sizes)."""
        self._entries: OrderedDict[str, str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def cached(self, key: str) -> str | None:
        summary = self._entries.get(key)
        if summary is not None:
            self._entries.move_to_end(key)
        return summary

    def remember(self, key: str, summary: str) -> None:
        """Keep ``summary``, forgetting the least recently used ones beyond ``max_entries`` or ``max_bytes``."""
        old = self._entries.pop(key, None)
        if old is not None:
            self.held_bytes -= _entry_bytes(key, old)
        size = _entry_bytes(key, summary)
        if size > self.max_bytes:
            return
        self._entries[key] = summary
        self.held_bytes += size
        while len(self._entries) > self.max_entries or self.held_bytes > self.max_bytes:
            dropped, text = self._entries.popitem(last=False)
            self.held_bytes -= _entry_bytes(dropped, text)

    async def fetch(self, key: str) -> str | None:
        return None

    async def store(self, key: str, summary: str) -> None:
        self.remember(key, summary)

    async def acquire(self, key: str, ttl_s: float) -> str | None:
        return LOCAL_LOCK

    async def release(self, key: str, token: str) -> None:
        pass

    async def aclose(self) -> None:
        pass


class RedisBackend:
    """Summaries shared through Redis, with a memory LRU in front that also serves while Redis is down."""

    name = "redis"

    def __init__(
        self,
        url: str,
        *,
        max_entries: int = 1024,
        max_bytes: int = 16 * 1024 * 1024,
        key_prefix: str = "history-proxy:",
        ttl_s: int | None = None,
        timeout_s: float = 0.5,
        retry_after_s: float = 1.0,
        max_retry_after_s: float = 30.0,
        recorder: SummaryRecorder | None = None,
    ) -> None:
        self.local = MemoryBackend(max_entries, max_bytes)
        self.key_prefix = key_prefix
        self.ttl_s = ttl_s
        self.retry_after_s = retry_after_s
        self.max_retry_after_s = max_retry_after_s
        self.recorder: SummaryRecorder = recorder if recorder is not None else Unrecorded()
        self.where = redacted_url(url)
        self._client = redis_client(url, timeout_s)
        self._failures = 0
        self._retry_at = 0.0
        self._down_since: float | None = None

    @property
    def available(self) -> bool:
        """False during an outage (until the next retry succeeds)."""
        return self._down_since is None

    def _summary_key(self, key: str) -> str:
        return f"{self.key_prefix}summary:{key}"

    def _lock_key(self, key: str) -> str:
        return f"{self.key_prefix}summary-lock:{key}"

    def cached(self, key: str) -> str | None:
        return self.local.cached(key)

    async def fetch(self, key: str) -> str | None:
        ok, found = await self._run(lambda redis: redis.get(self._summary_key(key)))
        if ok and isinstance(found, str) and found:
            self.local.remember(key, found)
            return found
        return None

    async def store(self, key: str, summary: str) -> None:
        self.local.remember(key, summary)
        await self._run(lambda redis: redis.set(self._summary_key(key), summary, ex=self.ttl_s))

    async def acquire(self, key: str, ttl_s: float) -> str | None:
        token = secrets.token_hex(8)
        ttl_ms = max(1, int(ttl_s * 1000))
        ok, won = await self._run(lambda redis: redis.set(self._lock_key(key), token, nx=True, px=ttl_ms))
        if not ok:
            return LOCAL_LOCK  # Redis is down: this process goes ahead on its own
        return token if won else None

    async def release(self, key: str, token: str) -> None:
        if token != LOCAL_LOCK:
            await self._run(lambda redis: redis.eval(RELEASE_SCRIPT, 1, self._lock_key(key), token))

    async def aclose(self) -> None:
        with contextlib.suppress(RedisError, OSError):
            await self._client.aclose()

    async def _run(self, command: Callable[[Redis], Awaitable[T]]) -> tuple[bool, T | None]:
        """Run one Redis command; ``(False, None)`` while backing off or when it fails."""
        if time.monotonic() < self._retry_at:
            return False, None
        try:
            value = await command(self._client)
        except (RedisError, OSError) as exc:
            self._failed(exc)
            return False, None
        if self._down_since is not None:
            log.info(
                "summary cache: redis at %s is reachable again after %.1fs",
                self.where,
                time.monotonic() - self._down_since,
            )
        self._failures, self._down_since = 0, None
        return True, value

    def _failed(self, exc: BaseException) -> None:
        self._failures += 1
        delay = min(self.retry_after_s * 2 ** (self._failures - 1), self.max_retry_after_s)
        self._retry_at = time.monotonic() + delay
        self.recorder.summary_cache_error(self.name)
        if self._down_since is None:
            self._down_since = time.monotonic()
            log.warning(
                "summary cache: redis at %s is unreachable (%s); serving summaries from this process's "
                "memory and retrying in %.1fs",
                self.where,
                type(exc).__name__,
                delay,
            )


def summary_backend(config: SummaryCacheConfig, recorder: SummaryRecorder | None = None) -> SummaryBackend:
    """The backend a ``summary_cache`` config block asks for."""
    if config.backend == "redis" and config.url is not None:
        return RedisBackend(
            config.url.get_secret_value(),
            max_entries=config.max_entries,
            max_bytes=config.max_bytes,
            key_prefix=config.key_prefix,
            ttl_s=config.ttl_s,
            timeout_s=config.timeout_s,
            recorder=recorder,
        )
    return MemoryBackend(config.max_entries, config.max_bytes)


def _entry_bytes(key: str, summary: str) -> int:
    return sys.getsizeof(key) + sys.getsizeof(summary)


def memory_of(backend: SummaryBackend) -> MemoryBackend:
    """The memory LRU of a backend (the backend itself, or the one in front of Redis)."""
    if isinstance(backend, RedisBackend):
        return backend.local
    return backend if isinstance(backend, MemoryBackend) else MemoryBackend(0, 1024)
