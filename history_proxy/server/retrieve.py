"""``GET /v1/retrieve/{hash}``: a message ``POST /v1/compress`` left out, for the tenant that left it out.

Answers ``{"hash", "original_content"}`` (LiteLLM's guardrail reads ``original_content``), or 404
``hash_not_found`` when the hash is unknown, expired, evicted or another tenant's. The originals live
in a :class:`history_proxy.core.recall.Recall` store (the app's memory store by default); the caller is
identified as on every route (401 without a proxy key when ``auth.keys`` is configured).
"""

from __future__ import annotations

from history_proxy.core.recall import Recall
from history_proxy.errors import NotFoundError
from history_proxy.server.body import encode_json
from history_proxy.server.edge import Call, Outgoing, Whole
from history_proxy.server.forwarding import Forwarder


async def retrieve(fwd: Forwarder, call: Call, handle: str, recall: Recall | None) -> Outgoing:
    """``GET /v1/retrieve/{hash}``: the original the caller's tenant left out under ``handle``."""
    exchange = fwd.begin(call)
    identity = fwd.identify(call, exchange)
    original = recall.get(identity.tenant, handle) if recall is not None else None
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
