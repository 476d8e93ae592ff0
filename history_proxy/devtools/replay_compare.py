"""Replay many conversations, and compare chains on them: the cost/evidence frontier (``replay --compare``).

Each chain (a config file) replays the same conversations under every pricing model asked for (both
presets by default); a chain's figures are its cost over unfiltered per pricing, the conversations
that ended dearer than unfiltered, evidence kept over all of them (docs/cost.md, evidence kept: with its
context first, then token anywhere and in an unchanged message) and the conversation that kept the
least with its context. A chain is *on the frontier* when no other chain costs no more under every
pricing and keeps no less evidence (with context, anywhere, unchanged), while doing strictly better on
one of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from history_proxy.core.cost import ANTHROPIC, OPENAI, Pricing
from history_proxy.core.identity import Identity
from history_proxy.devtools.replay import ReplayError, ReplayResult, replay
from history_proxy.devtools.replay_render import REASON_WORDS, many_totals
from history_proxy.errors import ProxyError
from history_proxy.pipeline.run import Pipeline
from history_proxy.surfaces.shape import as_chat, surface_named


def is_tool_loop(messages: Any, least: int) -> bool:
    """A conversation of at least ``least`` messages in which the model called a tool."""
    return (
        isinstance(messages, list)
        and len(messages) >= least
        and any(isinstance(m, dict) and m.get("tool_calls") for m in messages)
    )


def chat_bodies(bodies: dict[str, Any], api: str | None, tool_loops: int = 0) -> dict[str, Any]:
    """Each body as a chat body (a Responses or Messages body replays as its view); with ``tool_loops``,
    only the tool loops of that many messages or more. Raises ``ReplayError`` naming the file."""
    out: dict[str, Any] = {}
    for name, body in bodies.items():
        try:
            chat = as_chat(surface_named(api, body), body)
        except ProxyError as exc:
            raise ReplayError(f"{name}: {exc.message}") from None
        messages = chat.get("messages") if isinstance(chat, dict) else None
        if not tool_loops or is_tool_loop(messages, tool_loops):
            out[name] = chat
    return out


def replay_files(
    bodies: dict[str, Any],
    pipeline: Callable[[], Pipeline],
    identity: Identity,
    pricing: Pricing | None,
    client_edits: list[dict[str, Any]] | None = None,
) -> dict[str, ReplayResult]:
    """Replay every chat body (with the client's Messages edits after the chain, when given); raises
    ``ReplayError`` naming the file that cannot be replayed."""
    results: dict[str, ReplayResult] = {}
    for name, body in bodies.items():
        try:
            results[name] = asyncio.run(replay(pipeline(), body, identity, pricing, client_edits))
        except ReplayError as exc:
            raise ReplayError(f"{name}: {exc}") from None
        except ProxyError as exc:
            raise ReplayError(f"{name}: the proxy would answer {exc.status_code}: {exc.message}") from None
    return results


@dataclass(frozen=True)
class ChainFigures:
    """One chain's figures over the compared conversations."""

    name: str
    chain: list[str]
    cost_ratio: dict[str, float]
    """Filtered over unfiltered cost, per pricing model's name."""
    dearer: dict[str, list[str]]
    """The conversations dearer than unfiltered, per pricing model's name."""
    worst_cost: dict[str, float]
    """The highest cost ratio of one conversation, per pricing model's name."""
    evidence_kept: int
    evidence_needed: int
    evidence_in_context: int
    """Evidence kept in a message the chain left as it was (a notice's facts do not count)."""
    least_evidence: dict[str, Any] | None
    frontier: bool = False
    evidence_with_context: int = 0
    """Evidence kept where it stood (docs/cost.md, evidence kept with its context): the headline."""
    context_lost_by_reason: dict[str, int] | None = None
    """Evidence without its context, by why (elided, notice, dropped)."""

    @property
    def with_context_share(self) -> float:
        return self.evidence_with_context / self.evidence_needed if self.evidence_needed else 1.0

    @property
    def evidence_share(self) -> float:
        return self.evidence_kept / self.evidence_needed if self.evidence_needed else 1.0

    @property
    def in_context_share(self) -> float:
        return self.evidence_in_context / self.evidence_needed if self.evidence_needed else 1.0

    def to_json(self) -> dict[str, Any]:
        return {
            "config": self.name,
            "chain": self.chain,
            "cost_ratio": self.cost_ratio,
            "evidence_with_context": self.evidence_with_context,
            "with_context_share": round(self.with_context_share, 4),
            "context_lost_by_reason": self.context_lost_by_reason or {},
            "dearer": self.dearer,
            "worst_cost": self.worst_cost,
            "evidence_kept": self.evidence_kept,
            "evidence_needed": self.evidence_needed,
            "evidence_share": round(self.evidence_share, 4),
            "evidence_in_context": self.evidence_in_context,
            "in_context_share": round(self.in_context_share, 4),
            "least_evidence": self.least_evidence,
            "frontier": self.frontier,
        }


def figures(name: str, by_pricing: dict[str, dict[str, ReplayResult]]) -> ChainFigures:
    """A chain's figures from its replays under each pricing (evidence does not depend on pricing)."""
    first = next(iter(by_pricing.values()))
    totals = {pricing: many_totals(results) for pricing, results in by_pricing.items()}
    any_totals = next(iter(totals.values()))
    chain = next(iter(first.values())).chain if first else []
    return ChainFigures(
        name=name,
        chain=chain,
        cost_ratio={pricing: t["cost_ratio"] for pricing, t in totals.items()},
        dearer={pricing: t["dearer"] for pricing, t in totals.items()},
        worst_cost={
            pricing: t["worst"]["cost_ratio"] if t["worst"] else 1.0 for pricing, t in totals.items()
        },
        evidence_kept=any_totals["evidence_kept"],
        evidence_needed=any_totals["evidence_needed"],
        evidence_in_context=any_totals["evidence_in_context"],
        least_evidence=any_totals["least_evidence"],
        evidence_with_context=any_totals["evidence_with_context"],
        context_lost_by_reason=any_totals["context_lost_by_reason"],
    )


def _dominates(a: ChainFigures, b: ChainFigures) -> bool:
    """``a`` costs no more under any pricing and keeps no less evidence (with its context, anywhere, in an
    unchanged message), and does strictly better on one of them."""
    pairs = [
        (-a.with_context_share, -b.with_context_share),
        (-a.evidence_share, -b.evidence_share),
        (-a.in_context_share, -b.in_context_share),
    ]
    pairs += [(a.cost_ratio[p], b.cost_ratio[p]) for p in b.cost_ratio]
    return all(x <= y for x, y in pairs) and any(x < y for x, y in pairs)


def on_frontier(rows: Sequence[ChainFigures]) -> list[ChainFigures]:
    """The rows, each marked ``frontier`` when no other row dominates it."""
    return [
        ChainFigures(
            **{**row.__dict__, "frontier": not any(_dominates(o, row) for o in rows if o is not row)}
        )
        for row in rows
    ]


def render_compare(rows: Sequence[ChainFigures], conversations: int) -> str:
    """A table: one line per chain, costs per pricing, evidence kept with its context first (then token
    anywhere and in an unchanged message), the conversation that kept the least with its context."""
    pricings = list(rows[0].cost_ratio) if rows else []
    width = max((len(r.name) for r in rows), default=6)
    head = f"{'config':<{width}} " + " ".join(f"{'x ' + p:>10}" for p in pricings)
    lines = [
        f"{conversations} conversations; cost with caching over unfiltered; evidence kept (docs/cost.md) with "
        "its context, token anywhere, in an unchanged message; * = on the cost/evidence frontier",
        f"  {head} {'with context':>17} {'anywhere':>9} {'unchanged':>9} {'dearer':>6} {'worst':>7}  least kept",
    ]
    for r in rows:
        costs = " ".join(f"{'x' + format(r.cost_ratio[p], '.3f'):>10}" for p in pricings)
        evidence = f"{r.with_context_share * 100:.1f}% ({r.evidence_with_context}/{r.evidence_needed})"
        dearer = max((len(d) for d in r.dearer.values()), default=0)
        least = r.least_evidence
        worst = f"{least['file']} {least['with_context_share'] * 100:.0f}%" if least else "-"
        mark = "*" if r.frontier else " "
        anywhere = f"{r.evidence_share * 100:.1f}%"
        unchanged = f"{r.in_context_share * 100:.1f}%"
        dearest = f"x{max(r.worst_cost.values(), default=1.0):.3f}"
        lines.append(
            f"{mark} {r.name:<{width}} {costs} {evidence:>17} {anywhere:>9} {unchanged:>9} {dearer:>6} "
            f"{dearest:>7}  {worst}"
        )
        reasons = ", ".join(
            f"{n} {REASON_WORDS[why]}" for why, n in (r.context_lost_by_reason or {}).items() if n
        )
        lines.append(
            f"  {'':<{width}}   chain: {', '.join(r.chain) or '(none)'}"
            + (f"; without context: {reasons}" if reasons else "")
        )
    return "\n".join(lines)


def compare(
    bodies: dict[str, Any],
    chains: dict[str, tuple[Callable[[], Pipeline], Identity]],
    pricing: Pricing | None = None,
    client_edits: list[dict[str, Any]] | None = None,
) -> list[ChainFigures]:
    """Every chain (a pipeline factory and the caller it runs for) replayed on the same chat ``bodies``,
    under ``pricing`` or else both presets, each row marked when it is on the frontier; with
    ``client_edits``, every chain once more with the client's edits after it (``NAME + client edits``)."""
    pricings = [pricing] if pricing else [ANTHROPIC, OPENAI]
    variants: list[tuple[str, list[dict[str, Any]] | None]] = [("", None)]
    if client_edits:
        variants.append((" + client edits", client_edits))
    rows = [
        figures(name + suffix, {p.name: replay_files(bodies, make, caller, p, edits) for p in pricings})
        for name, (make, caller) in chains.items()
        for suffix, edits in variants
    ]
    return on_frontier(rows)
