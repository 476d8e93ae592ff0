"""How ``history-proxy replay`` shows what it measured: a table, and totals over many files (the HTML page:
``replay_html``).

Costs are in input-token equivalents (one uncached input token = 1.0), so they read beside the token
counts; ``x0.58`` is the filtered cost over the unfiltered cost of the same requests.
"""

from __future__ import annotations

from typing import Any

from history_proxy.devtools.replay import ReplayResult


def pricing_line(result: ReplayResult) -> str:
    p = result.pricing
    if p is None:
        return "pricing: none"
    return (
        f"pricing {p.name}: cached reads x{p.read:g}, cache writes x{p.write:g}, from {p.min_tokens} tokens "
        f"in blocks of {p.block}, ttl {p.ttl_s:g} s"
    )


def cost_summary(result: ReplayResult) -> str:
    """``cost 1234.5 vs 2345.6 unfiltered (x0.53)``, with ``DEARER than unfiltered`` when it is."""
    flag = ", DEARER than unfiltered" if result.dearer else ""
    return (
        f"cost {result.cost:.1f} vs {result.unfiltered_cost:.1f} unfiltered (x{result.cost_ratio:.3f}){flag}"
    )


def _share(part: int, whole: int) -> str:
    return f"{(part / whole if whole else 1.0) * 100:.1f}%"


REASON_WORDS = {"elided": "elided", "notice": "only in a notice", "dropped": "in a dropped message"}
"""How the text names each reason a token lost its context (docs/cost.md)."""


def evidence_summary(
    with_context: int, kept: int, unchanged: int, needed: int, by_reason: dict[str, int] | None = None
) -> str:
    """``evidence with context 87.5% (35/40; lost: 3 elided, 2 only in a notice), token anywhere 100.0%
    (40/40), in an unchanged message 87.5%``: the headline reading first (docs/cost.md)."""
    reasons = ", ".join(f"{n} {REASON_WORDS[r]}" for r, n in (by_reason or {}).items() if n)
    return (
        f"evidence with context {_share(with_context, needed)} ({with_context}/{needed}"
        + (f"; lost: {reasons}" if reasons else "")
        + f"), token anywhere {_share(kept, needed)} ({kept}/{needed}), in an unchanged message "
        + _share(unchanged, needed)
    )


def result_evidence(result: ReplayResult) -> str:
    """:func:`evidence_summary` of one replayed conversation."""
    return evidence_summary(
        result.evidence_with_context,
        result.evidence_kept,
        result.evidence_in_context,
        result.evidence_needed,
        result.context_lost_by_reason,
    )


def _lost(pairs: tuple[tuple[str, str], ...], most: int = 4) -> str:
    """``HAT170:notice 8080:elided +3``: the first tokens without their context, each with why."""
    shown = " ".join(f"{token}:{reason}" for token, reason in pairs[:most])
    return shown + (f" +{len(pairs) - most}" if len(pairs) > most else "")


def render_text(result: ReplayResult) -> str:
    """A fixed-width table, one line per request, then the totals."""
    shadow = ", shadow mode" if result.mode == "shadow" else ""
    lines = [
        f"role {result.role}{shadow}, chain: {', '.join(result.chain) or '(none)'}",
        pricing_line(result),
    ]
    lines += [
        f"{'req':>4} {'msgs':>5} {'unfiltered':>11} {'sent':>9} {'cached prefix':>14} {'cached %':>9} "
        f"{'billed cached':>14} {'uncached':>9} {'cost':>10} {'unfilt. cost':>13} {'context':>9} {'token':>9}"
        "  without context (why)"
    ]
    for s in result.steps:
        lines.append(
            f"{s.request:>4} {s.messages:>5} {s.tokens_unfiltered:>11} {s.tokens_sent:>9} "
            f"{s.tokens_cached_prefix:>14} {s.cached_share * 100:>8.1f}% "
            f"{s.tokens_cached:>14} {s.tokens_uncached:>9} {s.cost:>10.1f} {s.unfiltered_cost:>13.1f} "
            f"{f'{s.evidence_with_context}/{s.evidence_needed}':>9} {f'{s.evidence_kept}/{s.evidence_needed}':>9}  "
            f"{_lost(s.evidence_context_lost)}".rstrip()
        )
    t = result.totals
    lines.append(
        f"total: {t['requests']} requests, {t['tokens_unfiltered']} tokens unfiltered, {t['tokens_sent']} sent "
        f"({t['saved_share'] * 100:.1f}% saved), {t['tokens_cached_prefix']} a cacheable prefix "
        f"({t['cached_share'] * 100:.1f}% of sent), {t['tokens_cached']} billed cached, "
        f"{t['tokens_uncached']} uncached; {cost_summary(result)}; {result_evidence(result)}"
    )
    return "\n".join(lines)


def many_totals(results: dict[str, ReplayResult]) -> dict[str, Any]:
    """Totals over several replayed conversations: tokens, cost, ratio, and the conversations dearer."""
    cost = sum(r.cost for r in results.values())
    unfiltered = sum(r.unfiltered_cost for r in results.values())
    worst = max(results.items(), key=lambda item: item[1].cost_ratio, default=None)
    needed = sum(r.evidence_needed for r in results.values())
    kept = sum(r.evidence_kept for r in results.values())
    in_context = sum(r.evidence_in_context for r in results.values())
    with_context = sum(r.evidence_with_context for r in results.values())
    by_reason = {
        reason: sum(r.context_lost_by_reason[reason] for r in results.values()) for reason in REASON_WORDS
    }
    least = min(results.items(), key=lambda item: (item[1].with_context_share, item[0]), default=None)
    if least is not None and least[1].with_context_share >= 1.0:
        least = None  # every conversation kept all its evidence with its context
    return {
        "conversations": len(results),
        "requests": sum(len(r.steps) for r in results.values()),
        "tokens_unfiltered": sum(r.totals["tokens_unfiltered"] for r in results.values()),
        "tokens_sent": sum(r.totals["tokens_sent"] for r in results.values()),
        "tokens_cached": sum(r.totals["tokens_cached"] for r in results.values()),
        "cost": round(cost, 1),
        "unfiltered_cost": round(unfiltered, 1),
        "cost_ratio": round(cost / unfiltered, 4) if unfiltered else 1.0,
        "dearer": sorted(name for name, r in results.items() if r.dearer),
        "worst": {"file": worst[0], "cost_ratio": round(worst[1].cost_ratio, 4)} if worst else None,
        "evidence_needed": needed,
        "evidence_with_context": with_context,
        "with_context_share": round(with_context / needed, 4) if needed else 1.0,
        "context_lost_by_reason": by_reason,
        "evidence_kept": kept,
        "evidence_share": round(kept / needed, 4) if needed else 1.0,
        "evidence_in_context": in_context,
        "in_context_share": round(in_context / needed, 4) if needed else 1.0,
        "least_evidence": {
            "file": least[0],
            "with_context_share": round(least[1].with_context_share, 4),
            "evidence_with_context": least[1].evidence_with_context,
            "evidence_share": round(least[1].evidence_share, 4),
            "evidence_kept": least[1].evidence_kept,
            "evidence_needed": least[1].evidence_needed,
        }
        if least
        else None,
    }


def render_many(results: dict[str, ReplayResult]) -> str:
    """One line per conversation, then the totals over all of them."""
    first = next(iter(results.values()))
    lines = [f"role {first.role}, chain: {', '.join(first.chain) or '(none)'}", pricing_line(first)]
    width = max(len(name) for name in results)
    for name, r in results.items():
        t = r.totals
        lines.append(
            f"{name:<{width}} {t['requests']:>4} req {t['tokens_unfiltered']:>9} unfiltered "
            f"{t['tokens_sent']:>8} sent; {cost_summary(r)}; {result_evidence(r)}"
        )
    t = many_totals(results)
    lines.append(
        f"total: {t['conversations']} conversations, {t['requests']} requests, {t['tokens_unfiltered']} tokens "
        f"unfiltered, {t['tokens_sent']} sent; cost {t['cost']:.1f} vs {t['unfiltered_cost']:.1f} unfiltered "
        f"(x{t['cost_ratio']:.3f}); {len(t['dearer'])} dearer than unfiltered"
        + (f" (worst x{t['worst']['cost_ratio']:.3f}: {t['worst']['file']})" if t["worst"] else "")
        + "; "
        + evidence_summary(
            t["evidence_with_context"],
            t["evidence_kept"],
            t["evidence_in_context"],
            t["evidence_needed"],
            t["context_lost_by_reason"],
        )
        + (
            f" (least with context {t['least_evidence']['with_context_share'] * 100:.1f}%: "
            f"{t['least_evidence']['file']})"
            if t["least_evidence"]
            else ""
        )
    )
    return "\n".join(lines)
