"""``GET /v1/retrieve/{hash}``: an original the proxy left out, for the tenant that left it out.

Two kinds of originals are served: a message ``POST /v1/compress`` left out (its placeholder names the
hash), and a tool output ``last_n_observations`` with ``recall: true`` elided (its notice names the
handle, ``#`` excluded). Answers ``{"hash", "original_content"}`` (LiteLLM's guardrail reads
``original_content``), or 404 ``hash_not_found`` when the hash is unknown, expired, evicted or another
tenant's. The stores are asked in order (the engine's :class:`history_proxy.core.recall.Recall`, then
the filters' recall store); the caller is identified as on every route (401 without a proxy key when
``auth.keys`` is configured).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from history_proxy.errors import NotFoundError
from history_proxy.server.body import encode_json
from history_proxy.server.edge import Call, Outgoing, Whole
from history_proxy.server.forwarding import Forwarder


class Originals(Protocol):
    """A store the route reads: the original ``tenant`` left out under ``handle``, or None."""

    def get(self, tenant: str | None, handle: str) -> str | None: ...


async def retrieve(fwd: Forwarder, call: Call, handle: str, stores: Sequence[Originals]) -> Outgoing:
    """``GET /v1/retrieve/{hash}``: the original the caller's tenant left out under ``handle`` (the
    first store that holds it)."""
    exchange = fwd.begin(call)
    identity = fwd.identify(call, exchange)
    original = next(
        (found for store in stores if (found := store.get(identity.tenant, handle)) is not None), None
    )
    if original is None:
        raise NotFoundError(
            f"no message left out under hash {handle[:64]!r} for this caller: unknown, expired "
            "(limits.recall_ttl_s) or evicted (limits.recall_bytes)",
            code="hash_not_found",
        )
    out = Whole(200, encode_json({"hash": handle, "original_content": original}))
    out.headers += [(b"content-type", b"application/json"), (b"x-request-id", exchange.request_id.encode())]
    fwd.finish(exchange, 200)
    return out
