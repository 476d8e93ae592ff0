"""Per-tenant admission: concurrency slots and rates (requests and tokens a minute, per tenant and role).

:class:`Quotas` turns a request's tenant (its proxy key's) and role (``X-Agent-Role``) into the checks
``limits`` asks for, and asks the counters: :class:`LocalCounters` in this process, or, with
``limits.redis_url``, :class:`history_proxy.server.shared_limits.SharedCounters` in Redis, shared by every
replica and worker. Rates are sliding windows of 60 s (the previous minute's count weighted by the
part of it still inside the window, plus this minute's). A token rate refuses once spent; an admitted
request reserves an estimate of its input tokens at once (its ``Content-Length`` over
``BYTES_PER_TOKEN``), so a concurrent burst cannot all pass a budget none of it has counted yet, and
its reservation is settled to the input tokens it really sent when it ends.
"""

from __future__ import annotations

import math
import time
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from history_proxy.config.models import Config, LimitsConfig
from history_proxy.config.quotas import RateLimits
from history_proxy.core.identity import match_role
from history_proxy.observability.access import Exchange

Scope = MutableMapping[str, Any]
WINDOW_S = 60.0
BYTES_PER_TOKEN = 4
"""A request body's bytes per input token, for the reservation made at admission (JSON's quotes and
keys make a body's bytes per token more than text's ~4, so this over-reserves; the end settles it)."""
ANONYMOUS = "-"
"""The tenant that requests without a proxy key count under."""


@dataclass(frozen=True)
class Rate:
    """One counter a request must fit: a request rate counts ``cost`` (1) and refuses what would pass
    ``limit``; a token rate (``tokens``) refuses once ``limit`` is spent and reserves ``cost``."""

    key: str
    limit: int
    cost: int
    setting: str
    who: str
    tokens: bool = False


@dataclass(frozen=True)
class Slot:
    """A concurrency slot: ``limit`` requests of ``key`` in flight at once."""

    key: str
    limit: int
    who: str


@dataclass(frozen=True)
class Refusal:
    """Why a request was not admitted, and when to retry."""

    message: str
    retry_after_s: int


@dataclass(frozen=True)
class Admitted:
    """An admitted request: the minute (on the counters' clock) its token reservations were counted in."""

    minute: int
    here: bool = False
    """Counted in this process's counters (Redis was unreachable), so settled there too."""


@dataclass(frozen=True)
class Window:
    """A rate counter's two minutes, as read when a request was refused."""

    previous: float
    current: float
    elapsed_s: float


def refuses(rate: Rate, window: Window) -> bool:
    """Whether ``rate`` is spent in ``window``: a request would pass the limit; a token budget is used up."""
    used = window.previous * (1 - window.elapsed_s / WINDOW_S) + window.current
    return used >= rate.limit if rate.tokens else used + rate.cost > rate.limit


def retry_after(rate: Rate, window: Window) -> int:
    """Seconds until the sliding window has room (at most the rest of the minute)."""
    rest = max(WINDOW_S - window.elapsed_s, 1.0)
    cost = 0 if rate.tokens else rate.cost
    over = window.previous * (1 - window.elapsed_s / WINDOW_S) + window.current + cost - rate.limit
    if window.previous > 0 and window.current + cost <= rate.limit:
        rest = min(rest, over * WINDOW_S / window.previous)
    return max(1, math.ceil(rest))


def refusal_for(check: Slot | Rate, window: Window | None) -> Refusal:
    if isinstance(check, Slot):
        return Refusal(
            f"{check.who} already has {check.limit} requests in flight "
            "(limits.max_concurrent_per_tenant); retry shortly",
            1,
        )
    unit = "input tokens" if check.tokens else "requests"
    wait = retry_after(check, window) if window is not None else 1
    return Refusal(
        f"{check.who} has used its {check.limit} {unit} a minute ({check.setting}); retry in {wait}s", wait
    )


class Counters(Protocol):
    """Where slots and rates are counted (this process, or Redis)."""

    async def admit(self, slot: Slot | None, member: str, rates: list[Rate]) -> Admitted | Refusal:
        """Take the slot and count the request in every rate, or change nothing and say why not."""

    async def release(self, slot: Slot, member: str) -> None:
        """Give a slot back."""

    async def settle_tokens(self, keys: list[str], admitted: Admitted, delta: int) -> None:
        """Correct the token rates ``keys`` by ``delta`` (tokens sent minus reserved) where ``admitted``
        counted the reservation."""

    async def aclose(self) -> None:
        """Close connections and stop background work."""


@dataclass
class _Minute:
    index: int
    previous: float = 0.0
    current: float = 0.0

    def roll(self, index: int) -> None:
        if index != self.index:
            self.previous = self.current if index == self.index + 1 else 0.0
            self.current, self.index = 0.0, index


@dataclass
class LocalCounters:
    """Slots and rates counted in this process alone (no ``limits.redis_url``, or Redis down)."""

    slots: dict[str, int] = field(default_factory=dict)
    minutes: dict[str, _Minute] = field(default_factory=dict)

    def window(self, key: str, now: float) -> tuple[_Minute, Window]:
        index, elapsed = divmod(now, WINDOW_S)
        minute = self.minutes.setdefault(key, _Minute(int(index)))
        minute.roll(int(index))
        return minute, Window(minute.previous, minute.current, elapsed)

    async def admit(self, slot: Slot | None, member: str, rates: list[Rate]) -> Admitted | Refusal:
        if slot is not None and self.slots.get(slot.key, 0) >= slot.limit:
            return refusal_for(slot, None)
        return self.count(slot, rates)

    def count(self, slot: Slot | None, rates: list[Rate]) -> Admitted | Refusal:
        """Check ``rates`` and count the request in them and in ``slot`` (already checked), at once."""
        now = time.time()
        for rate in rates:
            _, seen = self.window(rate.key, now)
            if refuses(rate, seen):
                return refusal_for(rate, seen)
        for rate in rates:
            self.window(rate.key, now)[0].current += rate.cost
        if slot is not None:
            self.slots[slot.key] = self.slots.get(slot.key, 0) + 1
        return Admitted(int(now // WINDOW_S))

    async def release(self, slot: Slot, member: str) -> None:
        left = self.slots.get(slot.key, 0) - 1
        if left > 0:
            self.slots[slot.key] = left
        else:
            self.slots.pop(slot.key, None)

    def now(self) -> Admitted:
        """The current minute, as an admission would have counted in it."""
        return Admitted(int(time.time() // WINDOW_S))

    async def settle_tokens(self, keys: list[str], admitted: Admitted, delta: int) -> None:
        now, minute = time.time(), admitted.minute
        for key in keys:
            counted = self.window(key, now)[0]
            if counted.index == minute:
                counted.current = max(0.0, counted.current + delta)
            elif counted.index == minute + 1:
                counted.previous = max(0.0, counted.previous + delta)

    async def aclose(self) -> None:
        pass


def _rates(limits: RateLimits, key: str, setting: str, who: str) -> list[Rate]:
    rates = []
    if limits.requests_per_minute is not None:
        rates.append(
            Rate(f"{key}:requests", limits.requests_per_minute, 1, f"{setting}.requests_per_minute", who)
        )
    if limits.tokens_per_minute is not None:
        setting = f"{setting}.tokens_per_minute"
        rates.append(Rate(f"{key}:tokens", limits.tokens_per_minute, 0, setting, who, tokens=True))
    return rates


def checks_for(limits: LimitsConfig, tenant: str | None, role: str) -> tuple[Slot | None, list[Rate]]:
    """The slot and rates a request of ``tenant`` (None: no proxy key) and ``role`` must fit."""
    slot = None
    if tenant is not None and limits.max_concurrent_per_tenant is not None:
        slot = Slot(f"slots:{tenant}", limits.max_concurrent_per_tenant, f"tenant {tenant!r}")
    name = tenant if tenant is not None else ANONYMOUS
    rates = _rates(limits.per_tenant, f"tenant:{name}", "limits.per_tenant", f"tenant {name!r}")
    per_role = limits.per_role.get(role)
    if per_role is not None:
        where = f"limits.per_role.{role}"
        rates += _rates(per_role, f"role:{name}:{role}", where, f"role {role!r} of tenant {name!r}")
    return slot, rates


def limits_apply(limits: LimitsConfig) -> bool:
    """Whether any per-tenant check is configured (else admission costs nothing)."""
    per_tenant = limits.per_tenant
    return bool(
        limits.max_concurrent_per_tenant is not None
        or per_tenant.requests_per_minute is not None
        or per_tenant.tokens_per_minute is not None
        or limits.per_role
    )


def role_of(config: Config, scope: Scope) -> str:
    """The role a request's limits count under, matched by the chain's rule (:func:`match_role`):
    ``WORKER``, ``Worker`` and `` worker `` are ``worker``, for every limit as for the chain."""
    wanted = config.identity.role_header.lower().encode("latin-1")
    sent = None
    for name, value in scope.get("headers", ()):
        if name == wanted and value.strip():
            sent = value.decode("latin-1").strip()
            break
    roles = config.policies.roles.keys() | config.limits.per_role.keys()
    return match_role(sent, roles, config.identity.default_role)[0]


def reservation(scope: Scope) -> int:
    """The input tokens a request is expected to send: its ``Content-Length`` over ``BYTES_PER_TOKEN``
    (0 for a body without one, e.g. chunked: such a request reserves nothing and counts when it ends)."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return int(value) // BYTES_PER_TOKEN if value.strip().isdigit() else 0
    return 0


def input_tokens(exchange: object) -> int:
    """The input tokens a finished request sent upstream: the upstream's count, else the proxy's."""
    if not isinstance(exchange, Exchange):
        return 0
    if exchange.usage is not None:
        return exchange.usage.input_tokens
    return exchange.result.tokens_forwarded if exchange.result is not None else 0
