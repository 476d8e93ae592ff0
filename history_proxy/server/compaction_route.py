"""Responses compaction in the one handler: a body prepared for its upstream, compactions emulated.

:mod:`history_proxy.server.handler` calls :func:`prepare` on every request of a surface whose body may
carry ``compaction`` items (``/v1/responses``, ``/compact``, ``/input_tokens``) once its upstreams are
known, and :func:`emulate` once it is shaped: for an upstream whose ``responses_compaction`` is
``emulate``, ``/v1/responses/compact`` is answered here, and a ``context_management`` compaction whose
threshold the shaped history passes is applied before forwarding (:mod:`history_proxy.surfaces.compaction`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from history_proxy.core.identity import Identity
from history_proxy.pipeline.scope import caller_summarizer
from history_proxy.server.body import encode_json
from history_proxy.server.edge import Call, Whole
from history_proxy.summaries.compactions import CompactionStore
from history_proxy.surfaces import compaction
from history_proxy.surfaces.compaction import Shaped
from history_proxy.surfaces.table import Surface


@dataclass
class Compacting:
    """What the handler carries from :func:`prepare` to :func:`emulate` and the answer."""

    mode: compaction.Mode
    threshold: int | None = None
    notes: list[str] = field(default_factory=list)
    triggered: bool = False
    """A ``compaction_trigger`` request for an emulating upstream: answered by the proxy."""
    item: dict[str, Any] | None = None
    """The proxy's ``compaction`` item to put first in the answer, whole or streamed (an inline
    compaction; :mod:`history_proxy.surfaces.compaction_answer`)."""
    local: Whole | None = None
    """The proxy's own answer (``/v1/responses/compact`` emulated): nothing is forwarded."""


async def prepare(
    call: Call,
    store: CompactionStore,
    surface: Surface,
    body: dict[str, Any],
    names: list[str],
    identity: Identity,
) -> tuple[dict[str, Any], list[str], Compacting | None]:
    """``body`` for its first upstream's compaction mode, and the upstreams that share that mode (None:
    the body carries nothing of compaction, the common case, and goes as it came)."""
    upstreams = call.state.config.upstreams
    mode = upstreams[names[0]].compaction
    if not (surface.compacts and mode == "emulate") and not compaction.concerned(body, mode):
        return body, names, None
    if len(names) > 1:  # a fallback of another mode would get items meant for this one
        names = [name for name in names if upstreams[name].compaction == mode]
    prepared = await compaction.prepare(body, mode, identity.tenant, store)
    return prepared.body, names, Compacting(mode, prepared.threshold, prepared.notes, prepared.triggered)


async def emulate(
    call: Call,
    store: CompactionStore,
    surface: Surface,
    shaped: Shaped,
    identity: Identity,
    upstream: str,
    compacting: Compacting,
) -> None:
    """``compacting.local`` set to the proxy's own ``/v1/responses/compact`` answer (emulate mode), or
    ``shaped`` compacted inline when an emulated ``context_management`` threshold is passed."""
    report = shaped.result.report
    if compacting.notes:
        report["notes"] = [*report.get("notes", []), *compacting.notes]
    inline = compacting.threshold is not None and shaped.result.tokens_after > compacting.threshold
    if compacting.mode != "emulate" or not (surface.compacts or inline or compacting.triggered):
        return
    summarizer = caller_summarizer(call.state.pipeline.summarizer, identity)
    if summarizer is None:  # a pipeline without summaries (tests): nothing to emulate with
        return
    model = shaped.body.get("model")
    model = model if isinstance(model, str) else ""
    made = await compaction.compact(
        shaped.body, summarizer, model=model, upstream=upstream, tenant=identity.tenant, store=store
    )
    if surface.compacts or compacting.triggered:
        compacting.local = _answer(made, shaped.body, model, shaped.result.tokens_after, surface.compacts)
        return
    shaped.body = {**shaped.body, "input": made.forwarded}
    shaped.result.body = shaped.body
    compacting.item = made.item
    report["notes"] = [*report.get("notes", []), "responses_compaction:compacted_inline"]


def _answer(
    made: compaction.Compaction, body: dict[str, Any], model: str, tokens: int, compacts: bool
) -> Whole:
    """The proxy's answer to a compaction: ``response.compaction`` (``/compact``), or a ``response`` with
    the one ``compaction`` item (a trigger), as SSE events when the request streams."""
    if compacts:
        answer, kind = (
            encode_json(compaction.compaction_answer(made, model=model, input_tokens=tokens)),
            "json",
        )
    elif body.get("stream") is True:
        answer = compaction.response_events(
            compaction.triggered_answer(made, model=model, input_tokens=tokens)
        )
        kind = "sse"
    else:
        answer, kind = (
            encode_json(compaction.triggered_answer(made, model=model, input_tokens=tokens)),
            "json",
        )
    whole = Whole(200, answer)
    media = b"text/event-stream" if kind == "sse" else b"application/json"
    whole.headers.append((b"content-type", media))
    return whole
