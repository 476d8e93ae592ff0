"""The providers' context standards on a shaped request: what the routed upstream's mode makes of them.

:func:`standards` runs after the caller's chain: a Messages request carrying ``context_management`` is
handed to :func:`history_proxy.surfaces.context_management.manage` with the upstream's mode
(``upstreams.<name>.context_management``); the edits count tokens on the upstream's scale (the
proxy's count times the calibrated ratio, :mod:`history_proxy.core.calibration`). :func:`answer_rewrite`
is what the answer of an emulated request gets: ``applied_edits`` (``/v1/messages``) or
``original_input_tokens`` (``count_tokens``, asked of the upstream for the body before the edits when
they changed it: a count is the provider's, never the proxy's). A request without the standards
returns at the first test.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from history_proxy.config.models import Config
from history_proxy.core.identity import Identity
from history_proxy.errors import ProxyError
from history_proxy.observability.calibration_metrics import UNCOUNTED_NOTE
from history_proxy.pipeline.run import Pipeline, PipelineResult
from history_proxy.pipeline.scope import caller_summarizer
from history_proxy.server.body import encode_json
from history_proxy.surfaces import edit_compact
from history_proxy.surfaces.context_answer import AppliedEdits, Compacted, OriginalTokens, paused
from history_proxy.surfaces.context_management import FIELD, Managed, manage, thinking_enabled
from history_proxy.surfaces.edit_common import EditInput
from history_proxy.surfaces.shape import as_chat
from history_proxy.surfaces.table import Surface
from history_proxy.upstream.reply import AnswerRewrite, UpstreamReply

log = logging.getLogger("history_proxy.standards")
SUMMARY_TIMEOUT_S = 60.0
"""The longest a compaction's summary may take before the request goes on uncompacted."""


@dataclass
class Standards:
    """A request's standards as the upstream takes them, and the body before the edits."""

    managed: Managed
    before: dict[str, Any]
    compaction: dict[str, Any] | None = None
    """The ``compaction`` block the answer opens with (a compaction was applied)."""
    pause: bool = False
    """``pause_after_compaction``: the proxy answers with the block alone, nothing is forwarded."""


def same_mode_fallbacks(config: Config, surface: Surface, body: Any, names: list[str]) -> list[str]:
    """``names`` less the fallbacks whose ``context_management`` mode differs from the first upstream's,
    for a Messages request carrying the field (its body and beta header are made for that mode)."""
    if surface.name != "messages" or len(names) < 2 or not isinstance(body, dict) or FIELD not in body:
        return names
    mode = config.upstreams[names[0]].context_management_mode
    return [names[0], *(n for n in names[1:] if config.upstreams[n].context_management_mode == mode)]


async def standards(
    pipeline: Pipeline,
    surface: Surface,
    upstream: str,
    body: dict[str, Any],
    result: PipelineResult,
    identity: Identity,
) -> Standards | None:
    """What ``upstream``'s mode makes of the standards of ``body`` (shaped, ``result`` what the chain
    did; ``None``: it carries none); a due compaction is summarised here."""
    if surface.name != "messages" or FIELD not in body:
        return None
    target = pipeline.config.upstreams.get(upstream)
    if target is None:
        return None
    model = str(body.get("model") or "")
    ratio = pipeline.calibration.ratio(upstream, model)
    tokens = result.tokens_after

    def env(request: dict[str, Any]) -> EditInput:
        counter = pipeline.tokens.get(model=model)
        return EditInput(
            input_tokens=round(tokens * ratio),
            tokens=lambda text: round(counter.text(text) * ratio),
            thinking=thinking_enabled(request),
        )

    managed = manage(body, target.context_management_mode, env)
    found = Standards(managed, body)
    if managed.applied is not None:
        notes = result.report.setdefault("notes", [])
        notes.append(UNCOUNTED_NOTE)
        notes += [f"context_edit:{edit['type']}" for edit in managed.applied]
        if managed.compact is not None and not surface.upstream_path.endswith("/count_tokens"):
            await _compact(found, pipeline, identity, upstream, notes)
    return found


async def _compact(
    found: Standards, pipeline: Pipeline, identity: Identity, upstream: str, notes: list[str]
) -> None:
    """A due ``compact_20260112``: the summary written by the summaries machinery (the caller's tenant,
    cached), the request replaced by it; if it cannot be had the request goes on uncompacted."""
    managed, edit = found.managed, found.managed.compact or {}
    summarizer = caller_summarizer(pipeline.summarizer, identity)
    model = str(managed.body.get("model") or "")
    summary = ""
    if summarizer is not None:
        view = as_chat("messages", managed.body)["messages"]
        try:
            async with asyncio.timeout(SUMMARY_TIMEOUT_S):
                summary = await summarizer.summarize(
                    view,
                    model=model,
                    upstream=upstream,
                    prompt=edit_compact.prompt_of(edit),
                    timeout_s=SUMMARY_TIMEOUT_S,
                )
        except (ProxyError, TimeoutError) as exc:
            log.warning(
                "compact_20260112: no summary (%s); the request goes on uncompacted", type(exc).__name__
            )
    if not summary:
        notes.append("context_edit:compact:no_summary")
        return
    managed.body = {**managed.body, "messages": edit_compact.compacted(summary)}
    managed.applied = [
        *(managed.applied or []),
        {"type": edit_compact.TYPE, "cleared_input_tokens": managed.input_tokens},
    ]
    found.compaction = edit_compact.block(summary)
    found.pause = edit.get("pause_after_compaction") is True
    notes.append(f"context_edit:{edit_compact.TYPE}")


async def answer_rewrite(
    found: Standards, surface: Surface, open_: Callable[[bytes], Awaitable[UpstreamReply]]
) -> AnswerRewrite | None:
    """The change an emulated request's answer gets (``None``: relayed raw)."""
    applied = found.managed.applied
    if applied is None:
        return None
    if not surface.upstream_path.endswith("/count_tokens"):
        if found.compaction is not None:
            return Compacted({"applied_edits": applied}, found.compaction)
        return AppliedEdits({"applied_edits": applied})
    if found.managed.body.get("messages") is found.before.get("messages"):
        return OriginalTokens(None)  # the edits changed nothing: the count is the original's
    reply = await open_(encode_json({key: value for key, value in found.before.items() if key != FIELD}))
    original: int | None = None
    answer = await reply.read()
    if reply.ok:
        try:
            counted = json.loads(answer).get("input_tokens")
        except (ValueError, AttributeError):
            counted = None
        original = counted if isinstance(counted, int) else None
    return OriginalTokens(original)


def pause_answer(found: Standards) -> tuple[bytes, str] | None:
    """The proxy's own answer to a request compacted with ``pause_after_compaction`` (body and content
    type), or ``None`` when the request is to be forwarded."""
    if not found.pause or found.compaction is None:
        return None
    return paused(found.before, found.compaction, {"applied_edits": found.managed.applied or []})
