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

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from history_proxy.observability.calibration_metrics import UNCOUNTED_NOTE
from history_proxy.pipeline.run import Pipeline, PipelineResult
from history_proxy.server.body import encode_json
from history_proxy.surfaces.context_answer import AppliedEdits, OriginalTokens
from history_proxy.surfaces.context_management import FIELD, Managed, manage, thinking_enabled
from history_proxy.surfaces.edit_common import EditInput
from history_proxy.surfaces.table import Surface
from history_proxy.upstream.reply import AnswerRewrite, UpstreamReply


@dataclass
class Standards:
    """A request's standards as the upstream takes them, and the body before the edits."""

    managed: Managed
    before: dict[str, Any]


def standards(
    pipeline: Pipeline, surface: Surface, upstream: str, body: dict[str, Any], result: PipelineResult
) -> Standards | None:
    """What ``upstream``'s mode makes of the standards of ``body`` (shaped, ``result`` what the chain
    did; ``None``: it carries none)."""
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
    if managed.applied is not None:
        notes = result.report.setdefault("notes", [])
        notes.append(UNCOUNTED_NOTE)
    return Standards(managed, body)


async def answer_rewrite(
    found: Standards, surface: Surface, open_: Callable[[bytes], Awaitable[UpstreamReply]]
) -> AnswerRewrite | None:
    """The change an emulated request's answer gets (``None``: relayed raw)."""
    applied = found.managed.applied
    if applied is None:
        return None
    if not surface.upstream_path.endswith("/count_tokens"):
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
