"""``POST /v1/compress``: the gateways' engine contract (Headroom's), answered by the caller's chain.

:func:`compress` serves the engine row of the surface table: the caller (proxy key, tenant) and
its role are read as on every route, the role's chain runs over the messages sent
(:mod:`history_proxy.surfaces.engine`) and the answer is the contract's shape, never forwarded:

    {"messages": [...one per message sent...], "tokens_before", "tokens_after", "tokens_saved",
     "compression_ratio", "transforms_applied", "ccr_hashes"?,
     "history_proxy": {"role", "mode", "evidence_kept", "left_out", "notes", "request_id"}}

The role is the ``X-Agent-Role`` header, else the body's ``config.role``, else the role of the
gateway's proxy key (``auth.keys[].role``), else ``identity.default_role``. ``config.mode: audit``
runs and reports the chain but answers the messages as sent. A failure is an error answer (a
filter's 500 ``filter_failed``, a 400 for a body that is not a chat conversation): every gateway
then sends the request uncompressed (LiteLLM with ``unreachable_fallback: fail_open``, Portkey
and agentgateway always) or refuses it (LiteLLM's default ``fail_closed``).

Messages left out are kept retrievable (:class:`history_proxy.core.recall.Recall`, per tenant,
bounded by ``limits.recall_bytes``) under the hash their placeholder names;
:func:`history_proxy.server.retrieve.retrieve` answers ``GET /v1/retrieve/{hash}``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from history_proxy.core.evidence import DISTINCTIVE, message_text
from history_proxy.core.identity import ROLE_DEFAULTED, Identity, match_role
from history_proxy.core.messages import Message
from history_proxy.core.recall import Recall
from history_proxy.errors import InvalidRequestError
from history_proxy.pipeline.headers import history_headers
from history_proxy.server.body import encode_json
from history_proxy.server.caller import role_of_key
from history_proxy.server.edge import Call, Outgoing, Whole
from history_proxy.server.forwarding import Forwarder
from history_proxy.server.warm import counted_off_loop, read_request
from history_proxy.surfaces.shape import shape
from history_proxy.surfaces.table import Surface

NAMESPACE = "history_proxy"
"""The answer's key for what the contract has no field for."""
MODES = ("ccr", "compress", "audit")


def _options(body: dict[str, Any]) -> dict[str, Any]:
    options = body.get("config")
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise InvalidRequestError("'config' must be an object", param="config")
    mode = options.get("mode", "ccr")
    if mode not in MODES:
        raise InvalidRequestError(f"config.mode must be one of {', '.join(MODES)}", param="config.mode")
    role = options.get("role")
    if role is not None and not isinstance(role, str):
        raise InvalidRequestError("config.role must be a string", param="config.role")
    return options


def engine_identity(call: Call, identity: Identity, options: dict[str, Any]) -> Identity:
    """The role for a compress call: the header, else ``config.role``, else the gateway key's role."""
    if ROLE_DEFAULTED not in identity.notes:
        return identity
    config = call.state.config
    role = options.get("role")
    if role is None:
        role = role_of_key(config, call.headers)
    if role is None:
        return identity
    served, notes = match_role(role, config.policies.roles, config.identity.default_role)
    return replace(identity, role=served, notes=notes, role_sent=role if notes else None)


async def compress(fwd: Forwarder, call: Call, surface: Surface, recall: Recall | None) -> Outgoing:
    """``POST /v1/compress``: the caller's chain over the messages sent, answered in the contract's shape."""
    exchange = fwd.begin(call)
    identity = fwd.identify(call, exchange)
    body = await read_request(call, surface.history)
    options = _options(body)
    identity = exchange.identified(engine_identity(call, identity, options))
    model = body.get("model")
    model = model if isinstance(model, str) else ""
    names = fwd.route(call, {"model": model}, exchange, forward=False)  # the key's scope, as if forwarded
    exchange.read(body, keep=call.state.config.log_bodies)
    pipeline = call.state.pipeline
    shaped = await counted_off_loop(
        lambda: shape(surface, pipeline, body, identity, names[0]), body, fwd.tokens
    )
    result = exchange.shaped(shaped.result)
    audit = options.get("mode") == "audit"
    sent: list[Message] = body["messages"]
    messages: list[Message] = sent if audit else shaped.body["messages"]
    elided: list[list[Any]] = [] if audit else shaped.body["elided"]
    handles = _kept(recall, identity.tenant, sent, elided)
    counter = fwd.tokens.get(model=model)
    before = result.tokens_before
    after = before if audit else counter.messages(messages)
    answer: dict[str, Any] = {
        "messages": messages,
        "tokens_before": before,
        "tokens_after": after,
        "tokens_saved": before - after,
        "compression_ratio": round(after / before, 4) if before else 1.0,
        "transforms_applied": [] if audit else result.applied,
    }
    if handles and options.get("mode", "ccr") == "ccr":
        answer["ccr_hashes"] = handles
    answer[NAMESPACE] = {
        "role": identity.role,
        "mode": "audit" if audit else result.mode,
        "chain_tokens_after": result.tokens_after,
        "evidence_kept": evidence_kept(sent, shaped.body["messages"]),
        "left_out": [{"index": index, "hash": handle} for index, handle in elided],
        "notes": result.report.get("notes", []),
        "request_id": exchange.request_id,
    }
    headers = {**history_headers(result, identity.role), "x-request-id": exchange.request_id}
    out = Whole(200, encode_json(answer))
    out.headers += [(b"content-type", b"application/json")]
    out.headers += [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]
    fwd.finish(exchange, 200)
    return out


def _kept(
    recall: Recall | None, tenant: str | None, sent: list[Message], elided: list[list[Any]]
) -> list[str]:
    """Each left-out message's original kept under its hash; the hashes kept (none without a store)."""
    if recall is None:
        return []
    handles: list[str] = []
    for index, handle in elided:
        recall.keep(tenant, handle, message_text(sent[index]))
        handles.append(handle)
    return handles


def evidence_kept(sent: list[Message], answered: list[Message]) -> float | None:
    """The share of the observations' distinctive tokens (paths, identifiers, numbers: what a next
    answer could cite, docs/cost.md) still present in the answer; None when the observations have none."""
    needed: set[str] = set()
    for message in sent:
        if message.get("role") == "tool":
            needed.update(DISTINCTIVE.findall(message_text(message)))
    if not needed:
        return None
    text = "\n".join(message_text(message) for message in answered)
    return round(sum(1 for token in needed if token in text) / len(needed), 4)
