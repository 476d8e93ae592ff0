"""From a parsed request body to the body sent upstream: chain, validation, annotations, cache marks.

``Pipeline.run`` resolves the caller's chain (global, then tenant, then role), runs every filter,
checks after each one that it kept every invariant its input satisfied (SPEC section 5), strips the
message annotations, places the ``cache_control`` slot for upstreams that accept marks, and reports
tokens and messages before and after, per filter.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.config import Config
from proxy.errors import FilterError, InvalidRequestError
from proxy.filters.base import Filter, FilterContext, Summarizer
from proxy.identity import Identity
from proxy.messages import (
    ANNOTATION_KEYS,
    KNOWN_ROLES,
    MESSAGE_TYPES,
    Message,
    NotApplicable,
    invariant_errors,
    strip_annotations,
)
from proxy.tokens import TokenCounter, TokenCounters

log = logging.getLogger("history_proxy.pipeline")


@dataclass
class FilterOutcome:
    """What one filter of the chain did."""

    type: str
    at: str
    messages_removed: int
    tokens_removed: int
    ms: float


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


def request_messages(body: Any) -> list[Message]:
    """The ``messages`` of a chat-completions body, checked enough for filters to read them safely."""
    if not isinstance(body, dict):
        raise InvalidRequestError("the request body must be a JSON object")
    messages = body.get("messages")
    if messages is None:
        raise InvalidRequestError("'messages' is required", param="messages", code="missing_required_parameter")
    if not isinstance(messages, list):
        raise InvalidRequestError("'messages' must be a list of message objects", param="messages")
    if not messages:
        raise InvalidRequestError("'messages' must contain at least one message", param="messages")
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise InvalidRequestError(f"{where} must be an object with a 'role'", param=where)
        role = message.get("role")
        if role not in KNOWN_ROLES:
            raise InvalidRequestError(
                f"{where}.role must be one of {', '.join(sorted(KNOWN_ROLES))}, got {str(role)[:40]!r}",
                param=f"{where}.role",
            )
        _check_annotations(message, where)
        calls = message.get("tool_calls")
        if calls is not None and not (
            isinstance(calls, list) and all(isinstance(c, dict) and isinstance(c.get("function"), dict) for c in calls)
        ):
            raise InvalidRequestError(
                f"{where}.tool_calls must be a list of {{id, type, function: {{name, arguments}}}} objects",
                param=f"{where}.tool_calls",
            )
    return messages


def _check_annotations(message: Message, where: str) -> None:
    if not ANNOTATION_KEYS.intersection(message):
        return
    tags = message.get("tags")
    if tags is not None and not (isinstance(tags, list) and all(isinstance(t, str) for t in tags)):
        raise InvalidRequestError(f"{where}.tags must be a list of strings", param=f"{where}.tags")
    kind = message.get("message_type")
    if kind is not None and kind not in MESSAGE_TYPES:
        raise InvalidRequestError(
            f"{where}.message_type must be one of {', '.join(sorted(MESSAGE_TYPES))}", param=f"{where}.message_type"
        )
    phase = message.get("phase_id")
    if phase is not None and (isinstance(phase, bool) or not isinstance(phase, int | str)):
        raise InvalidRequestError(f"{where}.phase_id must be an integer or a string", param=f"{where}.phase_id")
    agent = message.get("agent")
    if agent is not None and not isinstance(agent, str):
        raise InvalidRequestError(f"{where}.agent must be a string", param=f"{where}.agent")


def tokens_by_role(counter: TokenCounter, messages: Sequence[Message]) -> dict[str, int]:
    """Message tokens summed per role (reply priming not included)."""
    by_role: dict[str, int] = {}
    for message in messages:
        role = str(message.get("role"))
        by_role[role] = by_role.get(role, 0) + counter.message(message)
    return by_role


def _side(counter: TokenCounter, messages: Sequence[Message]) -> dict[str, Any]:
    by_role = tokens_by_role(counter, messages)
    return {"messages": len(messages), "tokens": sum(by_role.values()) + 3, "tokens_by_role": by_role}


class Pipeline:
    """Runs the configured chains. One instance per loaded config; safe to share between requests."""

    def __init__(self, config: Config, tokens: TokenCounters, summarizer: Summarizer | None = None) -> None:
        self.config = config
        self.tokens = tokens
        self.summarizer = summarizer
        self.completion_tools = frozenset(config.identity.completion_tools)

    def context(self, identity: Identity, model: str, upstream: str | None) -> FilterContext:
        return FilterContext(
            role=identity.role,
            agent=identity.agent,
            phase=identity.phase,
            model=model,
            tenant=identity.tenant,
            completion_tools=self.completion_tools,
            tokens=self.tokens,
            summarizer=self.summarizer,
            upstream=upstream,
        )

    async def run(self, body: dict[str, Any], identity: Identity, upstream: str | None = None) -> PipelineResult:
        """Filter ``body`` for ``identity``; raises ``InvalidRequestError`` or ``FilterError``."""
        started = time.perf_counter()
        original = request_messages(body)
        model = body.get("model") if isinstance(body.get("model"), str) else ""
        ctx = self.context(identity, str(model), upstream)
        counter = self.tokens.get(model=ctx.model)
        chain = self.config.chain(identity.role, identity.tenant)

        before = _side(counter, original)
        baseline = set(invariant_errors(original))
        messages = original
        outcomes: list[FilterOutcome] = []
        failed: str | None = None
        tokens_now = before["tokens"]
        for at, filter_ in chain:
            t0 = time.perf_counter()
            try:
                result = await self._apply(filter_, messages, ctx)
            except NotApplicable as exc:
                raise InvalidRequestError(
                    f"filter {filter_.type_name!r} ({at}) cannot apply to this request: {exc}", code="filter_not_applicable"
                ) from None
            except Exception as exc:  # a filter bug: answer per on_filter_error, never a traceback
                failed = self._filter_failed(filter_, at, f"{type(exc).__name__}: {exc}", exc)
                break
            broken = [f"{name}: {errs[0]}" for name, errs in invariant_errors(result).items() if name not in baseline]
            if broken:
                failed = self._filter_failed(filter_, at, "output breaks " + "; ".join(broken), None)
                break
            tokens_after = counter.messages(result)
            outcomes.append(
                FilterOutcome(
                    type=filter_.type_name,
                    at=at,
                    messages_removed=len(messages) - len(result),
                    tokens_removed=tokens_now - tokens_after,
                    ms=round((time.perf_counter() - t0) * 1000, 3),
                )
            )
            messages, tokens_now = result, tokens_after

        if failed is not None:
            messages, outcomes = original, []
        forwarded = strip_annotations(messages)
        slot = self.config.cache_control
        target = self.config.upstreams.get(upstream or "")
        if slot is not None and target is not None and target.cache_control:
            forwarded = slot.apply(forwarded, ctx)

        after = _side(counter, forwarded)
        report = self._report(identity, ctx, before, after, outcomes, chain, failed)
        return PipelineResult(
            body={**body, "messages": forwarded},
            report=report,
            applied=[o.type for o in outcomes],
            tokens_before=before["tokens"],
            tokens_after=after["tokens"],
            messages_before=len(original),
            messages_after=len(forwarded),
            chain_ms=(time.perf_counter() - started) * 1000,
            failed_filter=failed,
        )

    @staticmethod
    async def _apply(filter_: Filter, messages: list[Message], ctx: FilterContext) -> list[Message]:
        apply_async = getattr(filter_, "apply_async", None)
        if apply_async is not None and inspect.iscoroutinefunction(apply_async):
            result = await apply_async(messages, ctx)
        else:
            result = filter_.apply(messages, ctx)
        if not isinstance(result, list):
            raise TypeError(f"apply returned {type(result).__name__}, not a list")
        return result

    def _filter_failed(self, filter_: Filter, at: str, reason: str, exc: BaseException | None) -> str:
        if self.config.on_filter_error == "reject":
            raise FilterError(reason, filter_type=filter_.type_name, position=at)
        log.warning("filter %s at %s failed, forwarding unfiltered: %s", filter_.type_name, at, reason, exc_info=exc)
        return f"{filter_.type_name}@{at}"

    def _report(
        self,
        identity: Identity,
        ctx: FilterContext,
        before: dict[str, Any],
        after: dict[str, Any],
        outcomes: list[FilterOutcome],
        chain: list[tuple[str, Filter]],
        failed: str | None,
    ) -> dict[str, Any]:
        report: dict[str, Any] = {
            "role": identity.role,
            "agent": identity.agent,
            "tenant": identity.tenant,
            "phase": identity.phase,
            "model": ctx.model,
            "upstream": ctx.upstream,
            "chain": [f.type_name for _, f in chain],
            "before": before,
            "after": after,
            "filters": [o.__dict__ for o in outcomes],
        }
        limits = [b for _, f in chain if (b := f.budget()) is not None]
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
