"""The guard's per-tenant admission: which counters a config asks for, a ticket per admitted request.

Without ``limits.redis_url`` every process counts alone (N processes admit N times each limit); with
it, :class:`history_proxy.server.shared_limits.SharedCounters` counts for the whole fleet. See
:mod:`history_proxy.server.quotas` for the checks.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any

import anyio

from history_proxy.config.models import Config
from history_proxy.server.quotas import (
    Admitted,
    Counters,
    LocalCounters,
    Refusal,
    Slot,
    checks_for,
    input_tokens,
    reservation,
    role_of,
)
from history_proxy.server.shared_limits import SharedCounters

Scope = MutableMapping[str, Any]


@dataclass(frozen=True)
class Ticket:
    """An admitted request's slot and token counters, settled once when it ends."""

    counters: Counters
    slot: Slot | None
    member: str
    token_keys: list[str]
    reserved: int
    """Input tokens reserved at admission in each of ``token_keys``."""
    admitted: Admitted
    """Where and in which minute the reservation was counted."""


class Quotas:
    """Admits requests against ``limits`` per tenant and role; one per app (every config reload)."""

    def __init__(self) -> None:
        self.local = LocalCounters()
        self._shared: dict[tuple[str, float, str], SharedCounters] = {}
        self._ids = itertools.count()

    def counters(self, config: Config) -> tuple[Counters, str]:
        """The counters ``config`` asks for, and a slot holder's id for them."""
        url = config.limits.redis_url
        if url is None:
            return self.local, str(next(self._ids))
        key = (url.get_secret_value(), config.limits.lease_s, config.summary_cache.key_prefix)
        shared = self._shared.get(key)
        if shared is None:
            shared = self._shared[key] = SharedCounters(key[0], lease_s=key[1], key_prefix=key[2])
        return shared, shared.member()

    async def admit(self, config: Config, tenant: str | None, scope: Scope) -> Ticket | Refusal | None:
        """A ticket, a refusal, or None when no per-tenant limit applies to the request."""
        slot, rates = checks_for(config.limits, tenant, role_of(config, scope))
        if slot is None and not rates:
            return None
        reserved = reservation(scope) if any(rate.tokens for rate in rates) else 0
        rates = [dataclasses.replace(rate, cost=reserved) if rate.tokens else rate for rate in rates]
        counters, member = self.counters(config)
        admitted = await counters.admit(slot, member, rates)
        if isinstance(admitted, Refusal):
            return admitted
        token_keys = [rate.key for rate in rates if rate.tokens]
        return Ticket(counters, slot, member, token_keys, reserved, admitted)

    async def settle(self, ticket: Ticket, exchange: object) -> None:
        """Give the slot back and settle the token reservation to the input tokens really sent
        (shielded: runs even when cancelled)."""
        with anyio.CancelScope(shield=True):
            if ticket.slot is not None:
                await ticket.counters.release(ticket.slot, ticket.member)
            delta = input_tokens(exchange) - ticket.reserved
            if ticket.token_keys and delta:
                await ticket.counters.settle_tokens(ticket.token_keys, ticket.admitted, delta)

    async def aclose(self) -> None:
        shared, self._shared = list(self._shared.values()), {}
        for counters in shared:
            await counters.aclose()
