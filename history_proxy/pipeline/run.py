"""From a parsed request body to the body sent upstream: chain, validation, annotations, cache marks.

``Pipeline.run`` resolves the caller's chain (global, then tenant, then role), runs every filter,
checks that the chain's output keeps every invariant its input satisfied (docs/architecture.md, invariants; when it
does not, the first filter whose output broke one is named), strips the message annotations, places
the ``cache_control`` slot for upstreams that accept marks, and reports tokens and messages before
and after, per filter. In ``shadow`` mode (a tenant's or role's policy) the chain runs and is
reported the same way, but the body to forward keeps the original messages, and a failing filter is
reported instead of failing the request.

Per request, every message object is counted once (``TokenCounters.for_request``, shared with the
filters), so the counts between filters cost only what a filter changed. Re-fetches are noted."""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from operator import is_
from typing import Any

from history_proxy.config.models import Config
from history_proxy.config.policies import PolicyMode
from history_proxy.core.calibration import Calibration
from history_proxy.core.cost import Pricing
from history_proxy.core.identity import Identity
from history_proxy.core.invariants import invariant_errors, invariants_hold
from history_proxy.core.messages import Message, NotApplicable, strip_annotations
from history_proxy.core.refetch import refetch_notes
from history_proxy.core.tokens import TokenCounters
from history_proxy.core.validation import check_messages, message_list, request_messages
from history_proxy.core.windows import output_reserve, window_of
from history_proxy.errors import FilterError, InvalidRequestError, PayloadTooLargeError
from history_proxy.filters.base import Filter, FilterContext, RecallStore, Summarizer
from history_proxy.pipeline.recall import MemoryRecallStore
from history_proxy.pipeline.report import checked_side, report_head, side
from history_proxy.pipeline.scope import caller_summarizer

__all__ = ["FilterOutcome", "Pipeline", "PipelineResult", "request_messages"]
log = logging.getLogger("history_proxy.pipeline")


@dataclass
class FilterOutcome:
    """What one filter of the chain did."""

    type: str
    at: str
    messages_removed: int
    tokens_removed: int
    ms: float
    why_unchanged: str | None = None
    """When the filter changed nothing: why, in its own terms (:meth:`Filter.idle_reason`)."""


@dataclass
class PipelineResult:
    """The body to forward and what the chain did to it."""

    body: dict[str, Any]
    report: dict[str, Any]
    applied: list[str] = field(default_factory=list)
    tokens_before: int = 0
    tokens_after: int = 0
    messages_before: int = 0
    messages_after: int = 0
    chain_ms: float = 0.0
    failed_filter: str | None = None
    mode: PolicyMode = "enforce"
    """``shadow``: ``body`` carries the original messages; the token figures are the chain's."""
    filtered_messages: list[Message] = field(default_factory=list)
    """What the chain sends in ``enforce`` mode (annotations stripped, cache marks placed)."""
    tokens_forwarded: int = 0
    messages_forwarded: int = 0

    def without_messages(self) -> PipelineResult:
        """The figures and report alone: what a request keeps once its body is encoded."""
        return replace(self, body={}, filtered_messages=[])


def _same_messages(a: Sequence[Message], b: Sequence[Message]) -> bool:
    """The same message objects in the same order (what an unchanged chain hands back)."""
    return len(a) == len(b) and all(map(is_, a, b))


@dataclass(frozen=True)
class _Resolved:
    """A caller's chain as the config resolves it; shared by that caller's requests, never changed."""

    chain: list[tuple[str, Filter]]
    mode: PolicyMode
    names: tuple[str, ...]
    budgeted: tuple[Filter, ...]
    """The filters that may enforce a token limit (their class overrides ``Filter.budget``)."""


MAX_RESOLVED_CALLERS = 1024
"""How many (role, tenant) pairs a pipeline remembers the chain of; role headers are the caller's to choose."""


class Pipeline:
    """Runs the configured chains. One instance per loaded config; safe to share between requests."""

    def __init__(
        self,
        config: Config,
        tokens: TokenCounters,
        summarizer: Summarizer | None = None,
        recall: RecallStore | None = None,
        calibration: Calibration | None = None,
    ) -> None:
        self.config = config
        self.tokens = tokens
        self.summarizer = summarizer
        self.recall: RecallStore = recall if recall is not None else MemoryRecallStore()
        self.calibration = calibration if calibration is not None else Calibration()
        """Learned token ratios per upstream and model family (shared across reloads by the server)."""
        self.calibration.seed(
            {name: u.token_ratios for name, u in config.upstreams.items() if u.token_ratios}
        )
        self.completion_tools = frozenset(config.identity.completion_tools)
        # filter class -> whether it is awaited through apply_async (asking a pydantic model for a
        # missing attribute costs microseconds, on every filter of every request)
        self._awaited: dict[type[Filter], bool] = {}
        self._resolved: dict[tuple[str, str | None], _Resolved] = {}  # the config is frozen: so are these

    def resolve(self, role: str, tenant: str | None) -> _Resolved:
        """The chain and mode of a caller (global, then tenant, then role), remembered per (role, tenant)."""
        resolved = self._resolved.get((role, tenant))
        if resolved is None:
            chain = self.config.chain(role, tenant)
            resolved = _Resolved(
                chain=chain,
                mode=self.config.mode(role, tenant),
                names=tuple(f.type_name for _, f in chain),
                budgeted=tuple(f for _, f in chain if type(f).budget is not Filter.budget),
            )
            if len(self._resolved) < MAX_RESOLVED_CALLERS:
                self._resolved[(role, tenant)] = resolved
        return resolved

    def context(
        self,
        identity: Identity,
        model: str,
        upstream: str | None,
        tokens: TokenCounters | None = None,
        body: dict[str, Any] | None = None,
    ) -> FilterContext:
        """The filters' view of one request; ``tokens`` defaults to a fresh per-request view."""
        return FilterContext(
            role=identity.role,
            agent=identity.agent,
            phase=identity.phase,
            model=model,
            tenant=identity.tenant,
            completion_tools=self.completion_tools,
            tokens=tokens if tokens is not None else self.tokens.for_request(),
            summarizer=caller_summarizer(self.summarizer, identity),
            upstream=upstream,
            recall=self.recall,
            notes=list(identity.notes),
            pricing=self._pricing(upstream),
            window=window_of(model, self.config.context_windows),
            reserve=output_reserve(body) if body else 0,
            token_ratio=self.calibration.ratio(upstream, model),
        )

    def _pricing(self, upstream: str | None) -> Pricing | None:
        config = self.config.upstreams.get(upstream) if upstream else None
        return config.price_model if config else None

    async def run(
        self,
        body: dict[str, Any],
        identity: Identity,
        upstream: str | None = None,
        *,
        cache_marks: bool = True,
        counted: list[int | None] | None = None,
    ) -> PipelineResult:
        """Filter ``body`` for ``identity``; raises ``InvalidRequestError`` or ``FilterError``.

        ``cache_marks=False``: leave the ``cache_control`` slot to the caller (a surface adapter
        places native marks itself). ``counted``: each message's tokens as ``each_plain`` gives them,
        counted by the caller (a surface adapter, building its view); only None ones are checked here.
        """
        started = time.perf_counter()
        original: list[Message] = message_list(body)
        if len(original) > self.config.limits.max_messages:
            check_messages(original)  # an invalid message is answered first, as for any request
            raise PayloadTooLargeError(
                f"the request has {len(original)} messages; this proxy accepts at most "
                f"{self.config.limits.max_messages} (limits.max_messages)",
                code="too_many_messages",
            )
        model = body.get("model") if isinstance(body.get("model"), str) else ""
        ctx = self.context(identity, str(model), upstream, body=body)
        counter = ctx.tokens.get(model=ctx.model)  # the request's view: each message object counted once
        before = checked_side(counter, original, counted)  # checked too: filters then read them safely
        resolved = self.resolve(identity.role, identity.tenant)
        chain, mode = resolved.chain, resolved.mode

        messages = original
        outputs: list[list[Message]] = []  # every filter's output, to find the one that broke an invariant
        outcomes: list[FilterOutcome] = []
        failed: str | None = None
        tokens_now = before["tokens"]
        for at, filter_ in chain:
            t0 = time.perf_counter()
            try:
                result = await self._apply(filter_, messages, ctx)
                # a filter that changed nothing hands back the same objects: the same count
                same = _same_messages(result, messages)
                tokens_after = tokens_now if same else counter.messages(result)
            except Exception as exc:
                # a filter fed an invalid list by an earlier one: the chain stops at the earlier one
                failed = self._invalid_output(original, outputs, chain, mode) or self._raised(
                    filter_, at, exc, mode
                )
                break
            outcomes.append(
                FilterOutcome(
                    type=filter_.type_name,
                    at=at,
                    messages_removed=len(messages) - len(result),
                    tokens_removed=tokens_now - tokens_after,
                    ms=round((time.perf_counter() - t0) * 1000, 3),
                    why_unchanged=filter_.idle_reason(tokens_now, ctx) if same else None,
                )
            )
            outputs.append(result)
            messages, tokens_now = result, tokens_after
        else:
            failed = self._invalid_output(original, outputs, chain, mode)

        if failed is not None:
            messages, outcomes = original, []
        elif mode != "shadow":  # a re-fetch of an output this chain hid (docs/cost.md, evidence kept)
            ctx.notes.extend(refetch_notes(original, messages))
        forwarded = strip_annotations(messages)
        slot = self.config.cache_control
        target = self.config.upstreams.get(upstream or "")
        if cache_marks and slot is not None and target is not None and target.cache_control:
            forwarded = slot.apply(forwarded, ctx)

        if _same_messages(forwarded, original):  # nothing changed: the same figures, counted once
            after = {**before, "tokens_by_role": dict(before["tokens_by_role"])}
        else:
            after = side(counter, forwarded)
        report = self._report(identity, ctx, before, after, outcomes, resolved, failed)
        report["mode"] = mode
        filtered = forwarded
        if mode == "shadow":
            forwarded = strip_annotations(original)
            report["forwarded"] = {"messages": len(forwarded), "tokens": before["tokens"]}
        return PipelineResult(
            body={**body, "messages": forwarded},
            report=report,
            applied=[o.type for o in outcomes],
            tokens_before=before["tokens"],
            tokens_after=after["tokens"],
            messages_before=len(original),
            messages_after=after["messages"],
            chain_ms=(time.perf_counter() - started) * 1000,
            failed_filter=failed,
            mode=mode,
            filtered_messages=filtered,
            tokens_forwarded=before["tokens"] if mode == "shadow" else after["tokens"],
            messages_forwarded=len(forwarded),
        )

    def _raised(self, filter_: Filter, at: str, exc: Exception, mode: PolicyMode) -> str:
        """A filter raised: ``NotApplicable`` is the client's 400, anything else a filter failure."""
        if not isinstance(exc, NotApplicable):  # a filter bug: answer per on_filter_error, never a traceback
            return self._filter_failed(filter_, at, f"{type(exc).__name__}: {exc}", exc, mode == "shadow")
        if mode == "shadow":  # shadow mode never fails a request: report and forward the original
            return self._filter_failed(filter_, at, f"cannot apply: {exc}", None, shadow=True)
        raise InvalidRequestError(
            f"filter {filter_.type_name!r} ({at}) cannot apply to this request: {exc}",
            code="filter_not_applicable",
        ) from None

    def _invalid_output(
        self,
        original: list[Message],
        outputs: list[list[Message]],
        chain: list[tuple[str, Filter]],
        mode: PolicyMode,
    ) -> str | None:
        """When the newest output breaks an invariant the input kept, fail the first filter that broke one.

        Only the newest output is checked on the way (one pass); the others only when it is broken,
        so the failure still names the filter and its place in the chain.
        """
        if not outputs or _same_messages(outputs[-1], original) or invariants_hold(outputs[-1]):
            return None
        baseline = set() if invariants_hold(original) else set(invariant_errors(original))
        for (at, filter_), output in zip(chain, outputs, strict=False):
            if invariants_hold(output):
                continue
            broken = [
                f"{name}: {errs[0]}"
                for name, errs in invariant_errors(output).items()
                if name not in baseline
            ]
            if broken:
                return self._filter_failed(
                    filter_, at, "output breaks " + "; ".join(broken), None, mode == "shadow"
                )
        return None

    async def _apply(self, filter_: Filter, messages: list[Message], ctx: FilterContext) -> list[Message]:
        awaited = self._awaited.get(type(filter_))
        if awaited is None:
            apply_async = getattr(filter_, "apply_async", None)
            awaited = self._awaited[type(filter_)] = apply_async is not None and inspect.iscoroutinefunction(
                apply_async
            )
        if awaited:
            result = await filter_.apply_async(messages, ctx)  # type: ignore[attr-defined]
        else:
            result = filter_.apply(messages, ctx)
        if not isinstance(result, list):
            raise TypeError(f"apply returned {type(result).__name__}, not a list")
        return result

    def _filter_failed(
        self, filter_: Filter, at: str, reason: str, exc: BaseException | None, shadow: bool = False
    ) -> str:
        if self.config.on_filter_error == "reject" and not shadow:
            raise FilterError(reason, filter_type=filter_.type_name, position=at)
        log.warning(
            "filter %s at %s failed, forwarding unfiltered: %s", filter_.type_name, at, reason, exc_info=exc
        )
        return f"{filter_.type_name}@{at}"

    def _report(
        self,
        identity: Identity,
        ctx: FilterContext,
        before: dict[str, Any],
        after: dict[str, Any],
        outcomes: list[FilterOutcome],
        resolved: _Resolved,
        failed: str | None,
    ) -> dict[str, Any]:
        filters = [
            o.__dict__
            if o.why_unchanged is not None
            else {k: v for k, v in o.__dict__.items() if v is not None}
            for o in outcomes
        ]
        report = report_head(identity, ctx.model, ctx.upstream, list(resolved.names), before, after, filters)
        limits = [b for f in resolved.budgeted if (b := _budget(f, ctx)) is not None]
        if limits:
            limit = min(limits)
            report["limit"] = {
                "limit": limit,
                "within_limit": after["tokens"] <= limit,
                "tokens_remaining": max(0, limit - after["tokens"]),
                "tokens_over": max(0, after["tokens"] - limit),
            }
        if failed is not None:
            report["failed_filter"] = failed
        if ctx.notes:
            report["notes"] = list(ctx.notes)
        return report


_BUDGET_TAKES_CTX: dict[type, bool] = {}


def _budget(filter_: Filter, ctx: FilterContext) -> int | None:
    """``filter_.budget(ctx)``; a filter written before limits could be shares takes no context."""
    kind = type(filter_)
    takes = _BUDGET_TAKES_CTX.get(kind)
    if takes is None:
        takes = _BUDGET_TAKES_CTX[kind] = bool(inspect.signature(filter_.budget).parameters)
    return filter_.budget(ctx) if takes else filter_.budget()
