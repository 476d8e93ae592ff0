"""Replay a conversation as an agent grows it, and measure what a chain sends and what a cache reuses.

Each request is the history the model answered: everything before each assistant message that
follows a user, tool or system message (so after the last result of a parallel group), and the whole
conversation when it ends with such a message. For every request the chain runs as it would in the
proxy (in ``shadow`` mode too: the figures are what the chain would send); we record tokens
unfiltered, tokens sent, and how many sent tokens are a byte-identical prefix of the previous sent
request (whole messages compared as JSON, ``cache_control`` marks ignored since providers do not key
their cache on them): what a provider's prompt cache can reuse.

Each request is also priced (``history_proxy.core.cost``) under the routed upstream's pricing model, or the
one given: tokens billed as cached, uncached, and the cost in input-token equivalents, beside the
same conversation sent unfiltered (append-only, so everything but the new messages is cached). A
conversation whose filtered cost ends above its unfiltered cost is flagged ``dearer``.

Beside the cost, each request measures *evidence kept* (docs/cost.md, evidence kept): the distinctive
tokens the model's next answer took from an earlier observation (``history_proxy.core.evidence``), read
three ways. First, *with its context* (``history_proxy.core.evidence_context``): the request still holds
the token where it stood; each token that lost its context is listed with why (``evidence_context_lost``:
elided, only in a notice, in a dropped message). Beside it, *token anywhere* (``evidence_lost`` lists the
tokens the request no longer holds at all) and *in an unchanged message* (``evidence_out_of_context``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from history_proxy.core.cost import CacheSimulator, Pricing, shared_prefix
from history_proxy.core.evidence import kept_share
from history_proxy.core.evidence_context import REASONS, ContextEvidence, ContextMemo, measure_context
from history_proxy.core.identity import Identity
from history_proxy.core.messages import Message
from history_proxy.core.tokens import TokenCounter
from history_proxy.devtools.replay_edits import with_client_edits
from history_proxy.errors import ProxyError
from history_proxy.pipeline.run import Pipeline


class ReplayError(ValueError):
    """A conversation that cannot be replayed, or a request of it the proxy would refuse."""


@dataclass(frozen=True)
class ReplayStep:
    """One request of the replay."""

    request: int
    messages: int
    tokens_unfiltered: int
    tokens_sent: int
    tokens_cached_prefix: int
    tokens_cached: int = 0
    """Of the prefix, the tokens the provider bills as cached (its minimum length and block size)."""
    cost: float = 0.0
    """This request's input price in uncached-token equivalents."""
    unfiltered_cached: int = 0
    unfiltered_cost: float = 0.0
    """The same request sent unfiltered, after the unfiltered previous ones."""
    evidence_needed: int = 0
    """Distinctive tokens the next answer took from an earlier observation (docs/cost.md, evidence kept)."""
    evidence_lost: tuple[str, ...] = ()
    """Of those, the ones the request sent no longer holds."""
    evidence_out_of_context: tuple[str, ...] = ()
    """Of those kept, the ones it holds only in messages the chain changed (a notice, a digest)."""
    rewrote: bool = False
    """The chain changed or dropped a message the previous request had sent (the cached prefix broke there)."""
    evidence_context_lost: tuple[tuple[str, str], ...] = ()
    """``(token, reason)`` for each evidence token the request holds without its context, or not at all
    (reason: elided, notice, dropped; docs/cost.md, evidence kept with its context)."""

    @property
    def evidence_kept(self) -> int:
        return self.evidence_needed - len(self.evidence_lost)

    @property
    def evidence_with_context(self) -> int:
        """Evidence tokens the request holds where they stood (the headline reading)."""
        return self.evidence_needed - len(self.evidence_context_lost)

    @property
    def evidence_share(self) -> float:
        return kept_share(self.evidence_kept, self.evidence_needed)

    @property
    def evidence_in_context(self) -> int:
        return self.evidence_kept - len(self.evidence_out_of_context)

    @property
    def tokens_uncached(self) -> int:
        return self.tokens_sent - self.tokens_cached

    @property
    def cached_share(self) -> float:
        return self.tokens_cached_prefix / self.tokens_sent if self.tokens_sent else 0.0


@dataclass(frozen=True)
class ReplayResult:
    """Every step and the totals."""

    steps: list[ReplayStep]
    role: str
    chain: list[str] = field(default_factory=list)
    mode: str = "enforce"
    pricing: Pricing | None = None

    @property
    def cost(self) -> float:
        return sum(s.cost for s in self.steps)

    @property
    def unfiltered_cost(self) -> float:
        return sum(s.unfiltered_cost for s in self.steps)

    @property
    def cost_ratio(self) -> float:
        """Filtered cost over unfiltered cost (1.0 when nothing was priced)."""
        return self.cost / self.unfiltered_cost if self.unfiltered_cost else 1.0

    @property
    def evidence_needed(self) -> int:
        return sum(s.evidence_needed for s in self.steps)

    @property
    def evidence_kept(self) -> int:
        return sum(s.evidence_kept for s in self.steps)

    @property
    def evidence_share(self) -> float:
        """Evidence kept over evidence needed, every request of the conversation together (1.0: none needed)."""
        return kept_share(self.evidence_kept, self.evidence_needed)

    @property
    def evidence_in_context(self) -> int:
        """Evidence kept in a message the chain left as it was."""
        return sum(s.evidence_in_context for s in self.steps)

    @property
    def evidence_with_context(self) -> int:
        """Evidence kept with its context (docs/cost.md): the headline reading."""
        return sum(s.evidence_with_context for s in self.steps)

    @property
    def with_context_share(self) -> float:
        return kept_share(self.evidence_with_context, self.evidence_needed)

    @property
    def context_lost_by_reason(self) -> dict[str, int]:
        """Evidence tokens without their context, by why: elided, notice, dropped."""
        counts = dict.fromkeys(REASONS, 0)
        for step in self.steps:
            for _, reason in step.evidence_context_lost:
                counts[reason] += 1
        return counts

    @property
    def dearer(self) -> bool:
        """The conversation cost more through the chain than unfiltered."""
        return self.cost > self.unfiltered_cost + 1e-9

    @property
    def totals(self) -> dict[str, Any]:
        unfiltered = sum(s.tokens_unfiltered for s in self.steps)
        sent = sum(s.tokens_sent for s in self.steps)
        cached = sum(s.tokens_cached_prefix for s in self.steps)
        billed = sum(s.tokens_cached for s in self.steps)
        return {
            "requests": len(self.steps),
            "tokens_unfiltered": unfiltered,
            "tokens_sent": sent,
            "tokens_saved": unfiltered - sent,
            "saved_share": round((unfiltered - sent) / unfiltered, 4) if unfiltered else 0.0,
            "tokens_cached_prefix": cached,
            "cached_share": round(cached / sent, 4) if sent else 0.0,
            "tokens_cached": billed,
            "tokens_uncached": sent - billed,
            "unfiltered_cached": sum(s.unfiltered_cached for s in self.steps),
            "cost": round(self.cost, 1),
            "unfiltered_cost": round(self.unfiltered_cost, 1),
            "cost_ratio": round(self.cost_ratio, 4),
            "dearer": self.dearer,
            "evidence_needed": self.evidence_needed,
            "evidence_with_context": self.evidence_with_context,
            "with_context_share": round(self.with_context_share, 4),
            "context_lost_by_reason": self.context_lost_by_reason,
            "evidence_kept": self.evidence_kept,
            "evidence_share": round(self.evidence_share, 4),
            "evidence_in_context": self.evidence_in_context,
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "chain": self.chain,
            "mode": self.mode,
            "pricing": asdict(self.pricing) if self.pricing else None,
            "steps": [
                {
                    **asdict(s),
                    "cost": round(s.cost, 1),
                    "unfiltered_cost": round(s.unfiltered_cost, 1),
                    "tokens_uncached": s.tokens_uncached,
                    "cached_share": round(s.cached_share, 4),
                    "evidence_lost": list(s.evidence_lost),
                    "evidence_out_of_context": list(s.evidence_out_of_context),
                    "evidence_context_lost": [list(pair) for pair in s.evidence_context_lost],
                    "evidence_with_context": s.evidence_with_context,
                    "evidence_share": round(s.evidence_share, 4),
                }
                for s in self.steps
            ],
            "totals": self.totals,
        }


def request_ends(messages: list[Message]) -> list[int]:
    """Lengths of the growing requests: up to each answer of the model, and the whole if it ends unanswered."""
    ends = [
        i
        for i in range(1, len(messages))
        if messages[i].get("role") == "assistant" and messages[i - 1].get("role") != "assistant"
    ]
    if messages and messages[-1].get("role") != "assistant":
        ends.append(len(messages))
    return ends


def _without_marks(message: Message) -> str:
    """The message as JSON with cache marks removed; a lone text part compares equal to a string."""
    clean = {k: v for k, v in message.items() if k != "cache_control"}
    content = clean.get("content")
    if isinstance(content, list):
        parts = [
            {k: v for k, v in p.items() if k != "cache_control"} if isinstance(p, dict) else p
            for p in content
        ]
        lone_text = len(parts) == 1 and isinstance(parts[0], dict) and set(parts[0]) == {"type", "text"}
        clean["content"] = parts[0]["text"] if lone_text else parts
    return json.dumps(clean, sort_keys=True, ensure_ascii=False)


def _evidence_fields(evidence: ContextEvidence | None) -> dict[str, Any]:
    """A request's evidence as the step records it: needed, lost anywhere, kept only in a changed message,
    and each token without its context with why."""
    if evidence is None:
        return {}
    return {
        "evidence_needed": len(evidence.needed),
        "evidence_lost": tuple(t for t in evidence.needed if t not in evidence.anywhere),
        "evidence_out_of_context": tuple(
            t for t in evidence.needed if t in evidence.anywhere and t not in evidence.unchanged
        ),
        "evidence_context_lost": evidence.lost,
    }


@dataclass(frozen=True)
class Shaped:
    """What a chain made of one growing request: the messages it sends and its figures."""

    sent: list[Message]
    tokens_before: int
    tokens_after: int
    chain: list[str]
    mode: str


Shape = Callable[[dict[str, Any]], Awaitable[Shaped]]
"""Runs the chain on one request body (in this process, or through a running proxy: ``history-proxy demo``)."""


async def replay(
    pipeline: Pipeline,
    body: dict[str, Any],
    identity: Identity,
    pricing: Pricing | None = None,
    client_edits: list[dict[str, Any]] | None = None,
) -> ReplayResult:
    """Run the chain on every growing request of ``body``'s conversation, priced by ``pricing``
    (default: the routed upstream's pricing model); with ``client_edits`` (Messages
    ``context_management`` edits), each request gets them after the chain, as the proxy emulates them
    (:mod:`history_proxy.devtools.replay_edits`)."""
    model = str(body.get("model") or "") if isinstance(body, dict) else ""
    upstream = pipeline.config.route(model)[0]
    if pricing is None:
        pricing = pipeline.config.upstreams[upstream].price_model

    counter = pipeline.tokens.get(model=model)

    async def shape(step: dict[str, Any]) -> Shaped:
        try:
            result = await pipeline.run(step, identity, upstream)
        except ProxyError as exc:
            raise ReplayError(f"the proxy would answer {exc.status_code}: {exc.message}") from None
        sent, tokens_sent = result.filtered_messages, result.tokens_after
        if client_edits:
            sent, _ = with_client_edits(sent, client_edits, counter.text, tokens_sent)
            tokens_sent = counter.messages(sent)
        return Shaped(sent, result.tokens_before, tokens_sent, result.report["chain"], result.mode)

    return await replay_through(shape, body, identity.role, counter, pricing)


def _checked_messages(body: Any) -> list[Message]:
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise ReplayError("the file must be a chat-completions body with a non-empty 'messages' list")
    return messages


async def replay_through(
    shape: Shape, body: dict[str, Any], role: str, counter: TokenCounter, pricing: Pricing
) -> ReplayResult:
    """Every growing request of ``body``'s conversation through ``shape``: tokens, prompt-cache reuse and
    cost against the same requests unfiltered, and the evidence each kept with its context."""
    messages = _checked_messages(body)
    billed, unfiltered_billed = CacheSimulator(pricing), CacheSimulator(pricing)
    original_keys: list[str] = []
    original_tokens: list[int] = []
    steps: list[ReplayStep] = []
    previous: list[str] = []
    chain: list[str] = []
    mode = "enforce"
    memo = ContextMemo()
    for number, end in enumerate(request_ends(messages), start=1):
        try:
            result = await shape({**body, "messages": messages[:end]})
        except ReplayError as exc:
            raise ReplayError(f"request {number} (the first {end} messages): {exc}") from None
        chain, mode = result.chain, result.mode
        sent = result.sent
        keys = [_without_marks(m) for m in sent]
        shared = shared_prefix(previous, keys)
        per_message = [counter.message(m) for m in sent]
        priced = billed.send(keys, per_message, result.tokens_after)
        for m in messages[len(original_keys) : end]:
            original_keys.append(_without_marks(m))
            original_tokens.append(counter.message(m))
        plain = unfiltered_billed.send(original_keys[:end], original_tokens[:end], result.tokens_before)
        answer = messages[end] if end < len(messages) else None
        evidence = measure_context(messages[:end], answer, sent, memo=memo) if answer is not None else None
        steps.append(
            ReplayStep(
                request=number,
                messages=len(sent),
                tokens_unfiltered=result.tokens_before,
                tokens_sent=result.tokens_after,
                tokens_cached_prefix=sum(per_message[:shared]),
                tokens_cached=priced.cached,
                cost=priced.cost,
                unfiltered_cached=plain.cached,
                unfiltered_cost=plain.cost,
                rewrote=shared < len(previous),
                **_evidence_fields(evidence),
            )
        )
        previous = keys
    return ReplayResult(steps=steps, role=role, chain=chain, mode=mode, pricing=pricing)
