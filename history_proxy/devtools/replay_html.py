"""The ``history-proxy replay --html`` page: two charts and the per-request table, self-contained.

The first chart draws every request as a share of the same request unfiltered (tokens sent, the
cacheable prefix, cost), so a long conversation whose unfiltered size grows a hundredfold still shows
what the chain does on request 3 as on request 300: unfiltered is the 100 % line. The second draws the
evidence kept per request (docs/cost.md, evidence kept), a bar for each request whose answer used something read in
an observation: kept with its context, kept only as a bare token, lost; hovering a bar lists the tokens
without their context and why. Ticks fall on round values and requests are
labelled along the x axis. Dashed orange lines mark the requests where the chain rewrote history the
previous request had sent; a request dearer than unfiltered (the cache written again there) is labelled
and explained under the chart. The legends are swatches beside dark text. No script, no external resource.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable

from history_proxy.devtools.replay import ReplayResult, ReplayStep
from history_proxy.devtools.replay_render import REASON_WORDS, cost_summary, pricing_line, result_evidence

WIDTH, HEIGHT, PAD = 900, 360, 50
EVIDENCE_HEIGHT = 220

_SERIES: tuple[tuple[str, str, str, Callable[[ReplayStep], float]], ...] = (
    ("tokens_unfiltered", "unfiltered (tokens and cost): 100 %", "#9aa5b1", lambda s: 1.0),
    ("tokens_sent", "tokens sent", "#1f77b4", lambda s: _share(s.tokens_sent, s.tokens_unfiltered)),
    (
        "tokens_cached_prefix",
        "cacheable prefix",
        "#2ca02c",
        lambda s: _share(s.tokens_cached_prefix, s.tokens_unfiltered),
    ),
    ("cost", "cost", "#d62728", lambda s: _share(s.cost, s.unfiltered_cost)),
)
KEPT, NOTICE, LOST = "#2ca02c", "#8cc97a", "#d62728"
ACTED = "#ff7f0e"
"""The marks where the chain rewrote history the previous request had sent (its cached prefix broke)."""


def _share(part: float, whole: float) -> float:
    return part / whole if whole else 1.0


def nice_step(span: float, most: int) -> float:
    """A round tick step (1, 2, 2.5 or 5 times a power of ten) giving at most ``most`` ticks over ``span``."""
    if span <= 0:
        return 1.0
    raw = span / most
    power = 10.0 ** math.floor(math.log10(raw))
    return next(power * m for m in (1, 2, 2.5, 5, 10) if power * m >= raw)


def request_ticks(count: int, most: int = 12) -> list[int]:
    """Request numbers to label on the x axis: 1, then round multiples, and the last."""
    step = max(1, int(nice_step(count, most)))
    ticks = [1, *range(step, count + 1, step)]
    if count - ticks[-1] >= step / 2:
        ticks.append(count)
    return sorted(set(ticks))


class _Axes:
    """Maps request numbers and shares to pixels; draws the grid, the axes and their labels."""

    def __init__(self, count: int, top: float, height: int) -> None:
        self.count, self.top, self.height = count, top, height
        self.span = max(count - 1, 1)

    def x(self, request: int) -> float:
        return PAD + (WIDTH - 2 * PAD) * (request - 1) / self.span

    def y(self, share: float) -> float:
        return self.height - PAD - (self.height - 2 * PAD) * share / self.top

    def draw(self, title: str) -> str:
        step = nice_step(self.top, 6)
        ticks = [i * step for i in range(int(self.top / step + 1e-9) + 1)]
        grid = "".join(
            f'<line x1="{PAD}" y1="{self.y(t):.1f}" x2="{WIDTH - PAD}" y2="{self.y(t):.1f}" stroke="#e5e5e5"/>'
            f'<text x="{PAD - 6}" y="{self.y(t) + 4:.1f}" font-size="11" text-anchor="end">{t * 100:g}%</text>'
            for t in ticks
        )
        bottom = self.height - PAD
        labels = "".join(
            f'<line x1="{self.x(r):.1f}" y1="{bottom}" x2="{self.x(r):.1f}" y2="{bottom + 4}" stroke="#333"/>'
            f'<text class="xtick" x="{self.x(r):.1f}" y="{bottom + 16}" font-size="11" text-anchor="middle">{r}</text>'
            for r in request_ticks(self.count)
        )
        return (
            f'{grid}<line x1="{PAD}" y1="{bottom}" x2="{WIDTH - PAD}" y2="{bottom}" stroke="#333"/>'
            f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{bottom}" stroke="#333"/>{labels}'
            f'<text x="{PAD}" y="{PAD - 12}" font-size="12">{html.escape(title)}</text>'
            f'<text x="{WIDTH - PAD}" y="{bottom + 34}" font-size="12" text-anchor="end">request</text>'
        )


def acted(steps: list[ReplayStep]) -> list[int]:
    """The requests where the chain acted on history already sent (an output elided, a turn dropped): the
    previous request's messages are no longer a prefix, so the provider writes its cache again."""
    return [s.request for s in steps if s.rewrote]


def cost_spike(steps: list[ReplayStep]) -> ReplayStep | None:
    """The request dearest against the same request unfiltered, when it costs more than unfiltered."""
    dearest = max(steps, key=lambda s: _share(s.cost, s.unfiltered_cost), default=None)
    return dearest if dearest is not None and _share(dearest.cost, dearest.unfiltered_cost) > 1.0 else None


def _acted_marks(axes: _Axes, steps: list[ReplayStep]) -> str:
    bottom = axes.height - PAD
    return "".join(
        f'<line class="acted" data-request="{r}" x1="{axes.x(r):.1f}" y1="{PAD}" x2="{axes.x(r):.1f}" '
        f'y2="{bottom}" stroke="{ACTED}" stroke-width="1.5" stroke-dasharray="2 3">'
        f"<title>request {r}: the chain rewrote history the previous request sent</title></line>"
        for r in acted(steps)
    )


def _spike_label(axes: _Axes, steps: list[ReplayStep]) -> str:
    spike = cost_spike(steps)
    if spike is None:
        return ""
    share = _share(spike.cost, spike.unfiltered_cost)
    x, y = axes.x(spike.request), axes.y(share)
    anchor = "end" if x > WIDTH / 2 else "start"
    shift = -8 if anchor == "end" else 8
    return (
        f'<text class="spike" x="{x + shift:.1f}" y="{y - 6:.1f}" font-size="11" text-anchor="{anchor}">'
        f"request {spike.request}: {share * 100:.0f}% (cache written again, see below)</text>"
    )


def _spike_note(steps: list[ReplayStep]) -> str:
    spike = cost_spike(steps)
    if spike is None:
        return ""
    share = _share(spike.cost, spike.unfiltered_cost)
    return (
        f'<p class="note" id="spike-note">Request {spike.request} costs {share * 100:.0f}% of the same request '
        "unfiltered: there the chain rewrote history the provider had cached, so that request pays to write the "
        "cache again, while unfiltered would have read it. The requests after it read a smaller prefix from "
        "the cache; the totals above weigh both. Orange dashed lines mark every request where the chain "
        "rewrote history already sent.</p>"
    )


def _key(colour: str, label: str, dashed: bool = False) -> str:
    """A legend entry: a colour swatch beside dark text (coloured text is hard to read on white)."""
    style = f"border-top:2px dashed {colour};height:0" if dashed else f"background:{colour}"
    return f'<span class="key"><i style="{style}"></i>{html.escape(label)}</span>'


def _cost_chart(steps: list[ReplayStep]) -> str:
    peak = max((fn(s) for s in steps for *_, fn in _SERIES), default=1.0)
    axes = _Axes(len(steps), max(1.0, math.ceil(peak / 0.25) * 0.25), HEIGHT)
    lines = [_acted_marks(axes, steps)]
    for key, label, colour, fn in _SERIES:
        points = [(axes.x(s.request), axes.y(fn(s))) for s in steps]
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        dash = ' stroke-dasharray="6 3"' if key == "cost" else ""
        lines.append(
            f'<polyline class="series" data-series="{key}" fill="none" stroke="{colour}" stroke-width="2"{dash} '
            f'points="{path}"><title>{label}</title></polyline>'
        )
        if len(points) <= 100:  # dots keep short replays visible (one request draws no line)
            dots = "".join(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3"/>' for x, y in points)
            lines.append(f'<g class="dots" data-series="{key}" fill="{colour}">{dots}</g>')
    return (
        f'<svg id="chart" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}">{axes.draw("share of the same request unfiltered")}{"".join(lines)}'
        f"{_spike_label(axes, steps)}</svg>"
    )


def _without_context(s: ReplayStep) -> str:
    """``elided: HAT170 8080; only in a notice: ZFA04Y``: the tokens without their context, by why."""
    groups = {
        words: " ".join(t for t, r in s.evidence_context_lost if r == reason)
        for reason, words in REASON_WORDS.items()
    }
    return "; ".join(f"{words}: {tokens}" for words, tokens in groups.items() if tokens)


def _lost_title(s: ReplayStep) -> str:
    return html.escape(
        f"request {s.request}: {s.evidence_with_context} of {s.evidence_needed} kept with their context, "
        f"{s.evidence_kept} anywhere; without context: {_without_context(s) or 'nothing'}"
    )


def _evidence_bar(axes: _Axes, s: ReplayStep, width: float) -> str:
    """A stacked bar, bottom up: evidence with its context, kept only as a bare token, lost."""
    x = axes.x(s.request) - width / 2
    bare = max(0, s.evidence_kept - s.evidence_with_context)
    shares = [
        (s.evidence_with_context / s.evidence_needed, KEPT),
        (bare / s.evidence_needed, NOTICE),
        ((s.evidence_needed - s.evidence_with_context - bare) / s.evidence_needed, LOST),
    ]
    rects, base = [], 0.0
    for share, colour in shares:
        if share > 0:
            top, bottom = axes.y(base + share), axes.y(base)
            rects.append(
                f'<rect x="{x:.1f}" y="{top:.1f}" width="{width:.1f}" height="{bottom - top:.1f}" fill="{colour}"/>'
            )
        base += share
    title = f"<title>{_lost_title(s)}</title>"
    return f'<g class="evidence" data-request="{s.request}">{title}{"".join(rects)}</g>'


def _evidence_chart(steps: list[ReplayStep]) -> str:
    axes = _Axes(len(steps), 1.0, EVIDENCE_HEIGHT)
    slot = (WIDTH - 2 * PAD) / max(len(steps), 1)
    bar = max(1.0, min(14.0, slot * 0.7))
    bars = [_evidence_bar(axes, s, bar) for s in steps if s.evidence_needed]
    return (
        f'<svg id="evidence" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{EVIDENCE_HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {EVIDENCE_HEIGHT}">'
        f"{axes.draw('evidence kept: tokens the answer read in an observation, still where they stood')}"
        f"{''.join(bars)}</svg>"
    )


def _row(s: ReplayStep) -> str:
    context = f"{s.evidence_with_context}/{s.evidence_needed}" if s.evidence_needed else ""
    evidence = f"{s.evidence_kept}/{s.evidence_needed}" if s.evidence_needed else ""
    return (
        f"<tr><td>{s.request}</td><td>{s.messages}</td><td>{s.tokens_unfiltered}</td><td>{s.tokens_sent}</td>"
        f"<td>{s.tokens_cached_prefix}</td><td>{s.cached_share * 100:.1f}%</td><td>{s.tokens_cached}</td>"
        f"<td>{s.tokens_uncached}</td><td>{s.cost:.1f}</td><td>{s.unfiltered_cost:.1f}</td>"
        f'<td>{context}</td><td>{evidence}</td><td class="lost">{html.escape(_without_context(s))}</td></tr>'
    )


def render_html(result: ReplayResult, title: str) -> str:
    """A self-contained page: the share-of-unfiltered chart, the evidence chart and the per-request table."""
    steps = result.steps
    t = result.totals
    flag = ' <b class="dearer">dearer than unfiltered</b>' if result.dearer else ""
    legend = (
        " ".join(_key(colour, label) for _, label, colour, _ in _SERIES)
        + " "
        + _key(ACTED, "the chain rewrote history already sent", dashed=True)
    )
    evidence = result_evidence(result)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:2px 8px;text-align:right}}
td.lost{{text-align:left;font-family:monospace;max-width:24em}}
.key{{margin-right:1.2em;color:#222;white-space:nowrap}}
.key i{{display:inline-block;width:14px;height:10px;margin-right:5px;vertical-align:middle}}
.note{{max-width:60em;color:#333}}</style>
</head><body><h1>{html.escape(title)}</h1>
<p>role <b>{html.escape(result.role)}</b>{" (shadow mode)" if result.mode == "shadow" else ""},
chain <b>{html.escape(", ".join(result.chain) or "(none)")}</b>: {t["requests"]} requests,
{t["tokens_unfiltered"]} tokens unfiltered,
{t["tokens_sent"]} sent ({t["saved_share"] * 100:.1f}% saved), {t["cached_share"] * 100:.1f}% of sent tokens a
cacheable prefix.</p>
<p>{html.escape(pricing_line(result))}: {html.escape(cost_summary(result))}{flag}
(costs in uncached input-token equivalents); {html.escape(evidence)}.</p>
<p>{legend}</p>
{_cost_chart(steps)}
{_spike_note(steps)}
<p>{_key(KEPT, "evidence kept with its context")} {_key(NOTICE, "only the bare token (a notice's fact list)")}
{_key(LOST, "lost")} (hover a bar for the tokens)</p>
{_evidence_chart(steps)}
<table><tr><th>request</th><th>messages sent</th><th>unfiltered</th><th>sent</th><th>cacheable prefix</th>
<th>cached</th><th>billed cached</th><th>uncached</th><th>cost</th><th>cost unfiltered</th>
<th>evidence with context</th><th>token anywhere</th><th>without context (why)</th></tr>
{"".join(_row(s) for s in steps)}</table>
</body></html>
"""
