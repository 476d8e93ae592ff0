"""The summary cache: one model call per summarized span, shared by concurrent requests, bounded in memory."""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

import pytest

from history_proxy.config.loading import ConfigError, parse_config, summary
from history_proxy.core.messages import Message
from history_proxy.errors import UpstreamUnavailableError
from history_proxy.summaries.cache import CachingSummarizer, summary_key
from history_proxy.summaries.store import MemoryBackend, RedisBackend, summary_backend
from tests.factories import action, assistant, call, result, user

pytestmark = pytest.mark.anyio


class CountingSummarizer:
    """Counts calls; optionally holds every call until ``release`` is set, or fails."""

    def __init__(self, *, fails: bool = False, hold: bool = False) -> None:
        self.calls = 0
        self.fails = fails
        self.release = asyncio.Event()
        if not hold:
            self.release.set()

    async def summarize(
        self, messages: list[Message], *, model: str, upstream: str | None, prompt: str, timeout_s: float
    ) -> str:
        self.calls += 1
        await self.release.wait()
        if self.fails:
            raise UpstreamUnavailableError("summary call to upstream 'main' answered 500")
        return f"- {len(messages)} messages summarized by {model}"


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, ...]] = []

    def summary_cache_hit(self, source: str) -> None:
        self.events.append(("hit", source))

    def summary_cache_miss(self) -> None:
        self.events.append(("miss",))

    def summary_cache_error(self, backend: str) -> None:
        self.events.append(("error", backend))

    def summary_call(
        self, *, upstream: str | None, model: str, outcome: str, status: int, seconds: float
    ) -> None:
        self.events.append(("call", str(upstream), outcome, str(status)))


def span(n: int = 1) -> list[Message]:
    """The same turn every time it is built (fixed tool call id)."""
    act = action(call("search", call_id=f"call_{n}"))
    return [user(f"question {n}"), act, result(act, f"result {n}"), assistant(f"answer {n}")]


async def ask(cache: CachingSummarizer, messages: list[Message], **options: Any) -> str:
    settings: dict[str, Any] = {
        "model": "gpt-4o",
        "upstream": "main",
        "prompt": "Summarize.",
        "timeout_s": 5.0,
    }
    return await cache.summarize(messages, **{**settings, **options})


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- keys -----------------------------------------------------------------------------------


def test_the_key_is_what_is_summarized_plus_model_and_prompt_not_the_annotations() -> None:
    plain = span()
    annotated = [{**plain[0], "message_type": "task", "agent": "planner"}, *plain[1:]]
    key = summary_key(plain, model="gpt-4o", prompt="Summarize.")
    assert summary_key(annotated, model="gpt-4o", prompt="Summarize.") == key
    assert summary_key(plain, model="gpt-4o-mini", prompt="Summarize.") != key
    assert summary_key(plain, model="gpt-4o", prompt="Bullets.") != key
    assert summary_key(span(2), model="gpt-4o", prompt="Summarize.") != key
    assert len(key) == 64 and int(key, 16) >= 0


# --- memory ---------------------------------------------------------------------------------


async def test_the_same_span_is_summarized_once_and_then_served_from_the_cache() -> None:
    inner, recorder = CountingSummarizer(), Recorder()
    cache = CachingSummarizer(inner, recorder=recorder)
    first = await ask(cache, span())
    again = [await ask(cache, span()) for _ in range(5)]
    assert again == [first] * 5 and inner.calls == 1
    assert recorder.events[:2] == [("miss",), ("call", "main", "ok", "200")]
    assert recorder.events[2:] == [("hit", "memory")] * 5


async def test_twenty_concurrent_requests_for_the_same_span_make_one_call() -> None:
    inner = CountingSummarizer(hold=True)
    recorder = Recorder()
    cache = CachingSummarizer(inner, recorder=recorder)
    waiting = [asyncio.create_task(ask(cache, span())) for _ in range(20)]
    await asyncio.sleep(0.01)
    inner.release.set()
    answers = await asyncio.gather(*waiting)
    assert inner.calls == 1 and len(set(answers)) == 1
    assert recorder.events.count(("hit", "inflight")) == 19


async def test_different_spans_are_written_separately_and_concurrently() -> None:
    inner = CountingSummarizer()
    cache = CachingSummarizer(inner)
    answers = await asyncio.gather(*(ask(cache, span(n)) for n in range(5)))
    assert inner.calls == 5 and len(set(answers)) == 1  # same shape, so the same fake text
    await ask(cache, span(1), model="gpt-4o-mini")
    assert inner.calls == 6


async def test_the_memory_cache_forgets_the_least_recently_used_summary_beyond_max_entries() -> None:
    inner = CountingSummarizer()
    backend = MemoryBackend(max_entries=2)
    cache = CachingSummarizer(inner, backend)
    await ask(cache, span(1))
    await ask(cache, span(2))
    await ask(cache, span(1))  # 1 is now the most recently used
    await ask(cache, span(3))  # evicts 2
    assert len(backend) == 2 and inner.calls == 3
    await ask(cache, span(1))
    assert inner.calls == 3
    await ask(cache, span(2))
    assert inner.calls == 4


async def test_a_failed_call_reaches_every_waiter_and_is_not_cached() -> None:
    inner = CountingSummarizer(fails=True, hold=True)
    recorder = Recorder()
    cache = CachingSummarizer(inner, recorder=recorder)
    waiting = [asyncio.create_task(ask(cache, span())) for _ in range(3)]
    await asyncio.sleep(0.01)
    inner.release.set()
    outcomes = await asyncio.gather(*waiting, return_exceptions=True)
    assert all(isinstance(o, UpstreamUnavailableError) for o in outcomes) and inner.calls == 1
    assert ("call", "main", "error", "502") in recorder.events
    inner.fails = False
    assert await ask(cache, span()) and inner.calls == 2


async def test_a_caller_that_stops_waiting_leaves_the_call_running_for_the_cache() -> None:
    inner = CountingSummarizer(hold=True)
    cache = CachingSummarizer(inner)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.02):
            await ask(cache, span())
    inner.release.set()
    await asyncio.sleep(0.01)
    assert await ask(cache, span()) == "- 4 messages summarized by gpt-4o"
    assert inner.calls == 1


async def test_a_summary_call_slower_than_timeout_s_is_given_up_and_counted() -> None:
    inner = CountingSummarizer(hold=True)
    recorder = Recorder()
    cache = CachingSummarizer(inner, recorder=recorder)
    with pytest.raises(TimeoutError):
        await ask(cache, span(), timeout_s=0.02)
    assert ("call", "main", "timeout", "504") in recorder.events


async def test_closing_cancels_calls_still_running() -> None:
    inner = CountingSummarizer(hold=True)
    cache = CachingSummarizer(inner)
    waiting = asyncio.create_task(ask(cache, span()))
    await asyncio.sleep(0.01)
    await cache.aclose()
    with pytest.raises(asyncio.CancelledError):
        await waiting


# --- backends from config, and Redis that is not there --------------------------------------


def test_the_config_block_selects_the_backend() -> None:
    memory = parse_config(
        {"upstreams": {"m": {"base_url": "mock://"}}, "summary_cache": {"max_entries": 7}}, env={}
    )
    backend = summary_backend(memory.summary_cache)
    assert isinstance(backend, MemoryBackend) and backend.max_entries == 7
    raw = {"backend": "redis", "url": "redis://:hunter2@127.0.0.1:1/0", "key_prefix": "hp:"}
    redis = parse_config({"upstreams": {"m": {"base_url": "mock://"}}, "summary_cache": raw}, env={})
    backend = summary_backend(redis.summary_cache)
    assert isinstance(backend, RedisBackend) and backend.key_prefix == "hp:"
    assert backend.where == "redis://:***@127.0.0.1:1/0"
    assert summary(redis).endswith("summary cache: redis at redis://:***@127.0.0.1:1/0")


@pytest.mark.parametrize(
    ("block", "error"),
    [
        ({"backend": "redis"}, "summary_cache: url is required when backend is redis"),
        ({"backend": "redis", "url": "http://:pw@h"}, "summary_cache: url must start with redis://"),
        ({"max_entries": 0}, "summary_cache.max_entries: must be >= 1"),
        ({"backend": "memcached"}, "summary_cache.backend:"),
        ({"size": 3}, "summary_cache.size: unknown key"),
    ],
)
def test_a_bad_summary_cache_block_is_a_located_config_error_that_never_shows_the_password(
    block: dict[str, Any], error: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"upstreams": {"m": {"base_url": "mock://"}}, "summary_cache": block}, env={})
    assert any(line.startswith(error) for line in caught.value.errors), caught.value.errors
    assert "pw" not in str(caught.value)


async def test_an_unreachable_redis_leaves_summaries_to_the_local_cache_and_never_fails(
    caplog: pytest.LogCaptureFixture,
) -> None:
    recorder = Recorder()
    url = f"redis://:hunter2@127.0.0.1:{free_port()}/0"
    backend = RedisBackend(url, timeout_s=0.2, retry_after_s=0.05, recorder=recorder)
    inner = CountingSummarizer()
    cache = CachingSummarizer(inner, backend, recorder=recorder)
    with caplog.at_level(logging.INFO, logger="history_proxy.summary_cache"):
        first = await ask(cache, span())
        await asyncio.sleep(0.06)  # past the back-off: Redis is tried again and still fails
        await ask(cache, span(2))
        assert await ask(cache, span()) == first
    await cache.aclose()
    assert inner.calls == 2 and not backend.available
    assert recorder.events.count(("error", "redis")) >= 2
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, "one warning per outage"
    assert "unreachable" in warnings[0].getMessage() and "hunter2" not in caplog.text
