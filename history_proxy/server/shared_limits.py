"""Per-tenant slots and rates counted in Redis, shared by every replica and worker (``limits.redis_url``).

A concurrency slot is a member of a sorted set scored by its expiry on Redis's clock (``TIME``, so
replicas' clocks never matter); the process that holds it renews it every third of ``limits.lease_s``
and removes it when the request ends. A replica that dies stops renewing, and its slots expire: nothing
leaks. Rates are per-minute counters (``<key>:<minute>``, kept two minutes) read as a sliding window.
Admission is one Lua script, so two replicas never both take the last slot. A Redis that restarted empty
or was out longer than the lease gets this process's slots back (the admission script and the renewer
put back every slot the process holds). While Redis is unreachable each process counts alone: its own
slots in flight (also those Redis admitted) and its rates (:class:`history_proxy.server.quotas.LocalCounters`);
it logs once and retries after a growing back-off.

Needs a single Redis (or a primary behind Sentinel): the script names keys it builds, which Redis
Cluster refuses.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis.asyncio import Redis
from redis.exceptions import RedisError

from history_proxy.config.summaries import redacted_url
from history_proxy.server.quotas import Admitted, LocalCounters, Rate, Refusal, Slot, Window, refusal_for
from history_proxy.summaries.store import redis_client

log = logging.getLogger("history_proxy.limits")
T = TypeVar("T")

NOW_MS = "local t = redis.call('TIME') local now = t[1] * 1000 + math.floor(t[2] / 1000) "
# KEYS: the slot's set ('-' for none), then one base key per rate. ARGV: lease ms, member, slot limit
# (0: none), n, then the n slots this process already holds in that set (put back if Redis lost them),
# then limit, cost and kind (1: tokens) per rate. Returns {0, minute} admitted, {1} no slot, or
# {2, i, previous, current, elapsed ms} when rate i is spent.
ADMIT = (
    NOW_MS
    + """
local lease, member, slots, mine = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local first = 5 + mine
if slots > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  for j = 5, 4 + mine do redis.call('ZADD', KEYS[1], now + lease, ARGV[j]) end
  if mine > 0 then redis.call('PEXPIRE', KEYS[1], lease * 2) end
  if redis.call('ZCARD', KEYS[1]) >= slots then return {1} end
end
local minute, elapsed = math.floor(now / 60000), now % 60000
for i = 2, #KEYS do
  local at = first + 3 * (i - 2)
  local limit, cost = tonumber(ARGV[at]), tonumber(ARGV[at + 1])
  local current = tonumber(redis.call('GET', KEYS[i] .. ':' .. minute) or '0')
  local previous = tonumber(redis.call('GET', KEYS[i] .. ':' .. (minute - 1)) or '0')
  local used = previous * (1 - elapsed / 60000) + current
  local spent = used + cost > limit
  if ARGV[at + 2] == '1' then spent = used >= limit end
  if spent then return {2, i - 1, previous, current, elapsed} end
end
for i = 2, #KEYS do
  local cost = tonumber(ARGV[first + 3 * (i - 2) + 1])
  if cost > 0 then
    redis.call('INCRBY', KEYS[i] .. ':' .. minute, cost)
    redis.call('PEXPIRE', KEYS[i] .. ':' .. minute, 120000)
  end
end
if slots > 0 then
  redis.call('ZADD', KEYS[1], now + lease, member)
  redis.call('PEXPIRE', KEYS[1], lease * 2)
end
return {0, minute}
"""
)
# KEYS: slot sets; ARGV: lease ms, then one member per key. Pushes each held slot's expiry on, and puts
# back a slot Redis lost (restarted empty, or out longer than the lease).
RENEW = (
    NOW_MS
    + """
for i = 1, #KEYS do
  redis.call('ZADD', KEYS[i], now + tonumber(ARGV[1]), ARGV[i + 1])
  redis.call('PEXPIRE', KEYS[i], tonumber(ARGV[1]) * 2)
end
return #KEYS
"""
)
# KEYS: token rate base keys; ARGV: the minute of the reservation, tokens sent minus reserved. A minute
# already out of the window is left alone; a count never goes below 0.
SETTLE = (
    NOW_MS
    + """
local minute, delta = tonumber(ARGV[1]), tonumber(ARGV[2])
if minute < math.floor(now / 60000) - 1 then return 0 end
for i = 1, #KEYS do
  local key = KEYS[i] .. ':' .. minute
  if redis.call('INCRBY', key, delta) < 0 then redis.call('SET', key, 0) end
  redis.call('PEXPIRE', key, 120000)
end
return #KEYS
"""
)


def _zrem(key: str, members: list[str]) -> Callable[[Redis], Awaitable[Any]]:
    return lambda redis: redis.zrem(key, *members)


class SharedCounters:
    """:class:`history_proxy.server.quotas.Counters` in Redis, with this process's counters while it is down."""

    def __init__(
        self,
        url: str,
        *,
        lease_s: float,
        key_prefix: str = "history-proxy:",
        timeout_s: float = 0.5,
        max_retry_after_s: float = 30.0,
    ) -> None:
        self.local = LocalCounters()
        """Rates counted here while Redis is unreachable."""
        self.lease_ms = int(lease_s * 1000)
        self.prefix = f"{key_prefix}limits:"
        self.where = redacted_url(url)
        self.max_retry_after_s = max_retry_after_s
        self.held: dict[str, str] = {}
        """Every slot this process holds (admitted by Redis, or here while it was down): member -> set
        key. Redis gets each back when it lost it, and the fallback counts them."""
        self._ids = (f"{os.getpid()}:{secrets.token_hex(4)}:{n}" for n in itertools.count())
        self._client = redis_client(url, timeout_s)
        self._failures = 0
        self._retry_at = 0.0
        self._renewer: asyncio.Task[None] | None = None

    def member(self) -> str:
        """A slot holder's id, unique across replicas."""
        return next(self._ids)

    async def admit(self, slot: Slot | None, member: str, rates: list[Rate]) -> Admitted | Refusal:
        key = self.prefix + (slot.key if slot is not None else "-")
        mine = {m: k for m, k in self.held.items() if k == key} if slot is not None else {}
        keys = [key, *(self.prefix + r.key for r in rates)]
        checks = [str(value) for rate in rates for value in (rate.limit, rate.cost, int(rate.tokens))]
        argv = [str(self.lease_ms), member, str(slot.limit if slot is not None else 0), str(len(mine))]
        argv += [*mine, *checks]
        ok, answer = await self._run(lambda redis: redis.eval(ADMIT, len(keys), *keys, *argv))
        admitted = self._answer(answer, slot, rates) if ok and isinstance(answer, list) else None
        if admitted is None:
            admitted = self._admit_here(slot, key, rates)
        await self._forget_released(mine)
        if isinstance(admitted, Admitted) and slot is not None:
            self.held[member] = key
            self._renew_in_background()
        return admitted

    @staticmethod
    def _answer(answer: list[Any], slot: Slot | None, rates: list[Rate]) -> Admitted | Refusal | None:
        if answer[0] == 0:
            return Admitted(int(answer[1]))
        if answer[0] == 1 and slot is not None:
            return refusal_for(slot, None)
        if answer[0] == 2:
            window = Window(float(answer[2]), float(answer[3]), float(answer[4]) / 1000)
            return refusal_for(rates[int(answer[1]) - 1], window)
        return None

    def _admit_here(self, slot: Slot | None, key: str, rates: list[Rate]) -> Admitted | Refusal:
        """Redis unreachable: this process's own slots (every one it holds) and rates decide."""
        if slot is not None and sum(1 for held in self.held.values() if held == key) >= slot.limit:
            return refusal_for(slot, None)
        counted = self.local.count(None, rates)
        return Admitted(counted.minute, here=True) if isinstance(counted, Admitted) else counted

    async def release(self, slot: Slot, member: str) -> None:
        key = self.held.pop(member, None)
        if key is not None:
            await self._run(lambda redis: redis.zrem(key, member))

    async def settle_tokens(self, keys: list[str], admitted: Admitted, delta: int) -> None:
        if not keys or not delta:
            return
        if admitted.here:
            await self.local.settle_tokens(keys, admitted, delta)
            return
        names = [self.prefix + key for key in keys]
        argv = (str(admitted.minute), str(delta))
        ok, _ = await self._run(lambda redis: redis.eval(SETTLE, len(names), *names, *argv))
        if not ok and delta > 0:  # counted here until Redis is back
            await self.local.settle_tokens(keys, self.local.now(), delta)

    async def renew(self) -> None:
        """Push every slot this process holds ``lease_s`` further on (putting back any Redis lost)."""
        held = dict(self.held)
        if held:
            keys, members = list(held.values()), list(held)
            await self._run(lambda redis: redis.eval(RENEW, len(keys), *keys, str(self.lease_ms), *members))
            await self._forget_released(held)

    async def _forget_released(self, seen: dict[str, str]) -> None:
        """Remove again the slots of ``seen`` released while a script that puts slots back was running."""
        gone: dict[str, list[str]] = {}
        for member, key in seen.items():
            if member not in self.held:
                gone.setdefault(key, []).append(member)
        for key, members in gone.items():
            await self._run(_zrem(key, members))

    def _renew_in_background(self) -> None:
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.get_running_loop().create_task(self._renew_forever(), name="limits renew")

    async def _renew_forever(self) -> None:
        while self.held:
            await asyncio.sleep(self.lease_ms / 3000)
            await self.renew()

    async def aclose(self) -> None:
        renewer, self._renewer = self._renewer, None
        if renewer is not None:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
        with contextlib.suppress(RedisError, OSError):
            await self._client.aclose()

    async def _run(self, command: Callable[[Redis], Awaitable[T]]) -> tuple[bool, Any]:
        """One Redis call; ``(False, None)`` while backing off or when it fails (logged once per outage)."""
        if time.monotonic() < self._retry_at:
            return False, None
        try:
            value = await command(self._client)
        except (RedisError, OSError) as exc:
            if not self._failures:
                log.warning(
                    "limits: redis at %s is unreachable (%s); each process counts its own tenants' "
                    "requests until it is back",
                    self.where,
                    type(exc).__name__,
                )
            self._failures += 1
            self._retry_at = time.monotonic() + min(2 ** (self._failures - 1), self.max_retry_after_s)
            return False, None
        if self._failures:
            log.info("limits: redis at %s is reachable again; limits are shared", self.where)
        self._failures = 0
        return True, value
