"""Replay a conversation as an agent grows it, and measure what a chain sends and what a cache reuses.

Each request is the history the model answered: everything before each assistant message that
follows a user, tool or system message (so after the last result of a parallel group), and the whole
conversation when it ends with such a message. For every request the chain runs as it would in the
proxy (in ``shadow`` mode too: the figures are what the chain would send); we record tokens
unfiltered, tokens sent, and how many sent tokens are a byte-identical prefix of the previous sent
request (whole messages compared as JSON, ``cache_control`` marks ignored since providers do not key
their cache on them): what a provider's prompt cache can reuse.
"""

from __future__ import annotations

import html
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from proxy.core.identity import Identity
from proxy.core.messages import Message
from proxy.errors import ProxyError
from proxy.pipeline.run import Pipeline


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

    @property
    def totals(self) -> dict[str, Any]:
        unfiltered = sum(s.tokens_unfiltered for s in self.steps)
        sent = sum(s.tokens_sent for s in self.steps)
        cached = sum(s.tokens_cached_prefix for s in self.steps)
        return {
            "requests": len(self.steps),
            "tokens_unfiltered": unfiltered,
            "tokens_sent": sent,
            "tokens_saved": unfiltered - sent,
            "saved_share": round((unfiltered - sent) / unfiltered, 4) if unfiltered else 0.0,
            "tokens_cached_prefix": cached,
            "cached_share": round(cached / sent, 4) if sent else 0.0,
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "chain": self.chain,
            "mode": self.mode,
            "steps": [{**asdict(s), "cached_share": round(s.cached_share, 4)} for s in self.steps],
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


def common_prefix_length(previous: list[str], current: list[str]) -> int:
    """How many leading messages two requests share byte for byte."""
    n = 0
    for a, b in zip(previous, current, strict=False):
        if a != b:
            break
        n += 1
    return n


async def replay(pipeline: Pipeline, body: dict[str, Any], identity: Identity) -> ReplayResult:
    """Run the chain on every growing request of ``body``'s conversation."""
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise ReplayError("the file must be a chat-completions body with a non-empty 'messages' list")
    model = str(body.get("model") or "")
    upstream = pipeline.config.route(model)[0]
    counter = pipeline.tokens.get(model=model)
    steps: list[ReplayStep] = []
    previous: list[str] = []
    chain: list[str] = []
    mode = "enforce"
    for number, end in enumerate(request_ends(messages), start=1):
        try:
            result = await pipeline.run({**body, "messages": messages[:end]}, identity, upstream)
        except ProxyError as exc:
            raise ReplayError(
                f"request {number} (the first {end} messages): the proxy would answer {exc.status_code}: {exc.message}"
            ) from None
        chain, mode = result.report["chain"], result.mode
        sent = result.filtered_messages
        keys = [_without_marks(m) for m in sent]
        shared = common_prefix_length(previous, keys)
        steps.append(
            ReplayStep(
                request=number,
                messages=len(sent),
                tokens_unfiltered=result.tokens_before,
                tokens_sent=result.tokens_after,
                tokens_cached_prefix=sum(counter.message(m) for m in sent[:shared]),
            )
        )
        previous = keys
    return ReplayResult(steps=steps, role=identity.role, chain=chain, mode=mode)


def render_text(result: ReplayResult) -> str:
    """A fixed-width table, one line per request, then the totals."""
    shadow = ", shadow mode" if result.mode == "shadow" else ""
    lines = [f"role {result.role}{shadow}, chain: {', '.join(result.chain) or '(none)'}"]
    lines += [f"{'req':>4} {'msgs':>5} {'unfiltered':>11} {'sent':>9} {'cached prefix':>14} {'cached %':>9}"]
    for s in result.steps:
        lines.append(
            f"{s.request:>4} {s.messages:>5} {s.tokens_unfiltered:>11} {s.tokens_sent:>9} "
            f"{s.tokens_cached_prefix:>14} {s.cached_share * 100:>8.1f}%"
        )
    t = result.totals
    lines.append(
        f"total: {t['requests']} requests, {t['tokens_unfiltered']} tokens unfiltered, {t['tokens_sent']} sent "
        f"({t['saved_share'] * 100:.1f}% saved), {t['tokens_cached_prefix']} a cacheable prefix "
        f"({t['cached_share'] * 100:.1f}% of sent)"
    )
    return "\n".join(lines)


_SERIES = (
    ("tokens_unfiltered", "tokens unfiltered", "#9aa5b1"),
    ("tokens_sent", "tokens sent", "#1f77b4"),
    ("tokens_cached_prefix", "cacheable prefix", "#2ca02c"),
)


def render_html(result: ReplayResult, title: str) -> str:
    """A self-contained page: an SVG line chart of the three series and the per-request table."""
    width, height, pad = 900, 360, 50
    steps = result.steps
    peak = max((max(s.tokens_unfiltered, s.tokens_sent) for s in steps), default=1) or 1
    span = max(len(steps) - 1, 1)

    def xy(i: int, value: int) -> tuple[float, float]:
        return pad + (width - 2 * pad) * i / span, height - pad - (height - 2 * pad) * value / peak

    lines = []
    for key, label, colour in _SERIES:
        points = [xy(i, getattr(s, key)) for i, s in enumerate(steps)]
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        lines.append(
            f'<polyline class="series" data-series="{key}" fill="none" stroke="{colour}" stroke-width="2" '
            f'points="{path}"><title>{label}</title></polyline>'
        )
        if len(points) <= 100:  # dots keep short replays visible (one request draws no line)
            dots = "".join(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3"/>' for x, y in points)
            lines.append(f'<g class="dots" data-series="{key}" fill="{colour}">{dots}</g>')
    grid = "".join(
        f'<line x1="{pad}" y1="{y:.1f}" x2="{width - pad}" y2="{y:.1f}" stroke="#e5e5e5"/>'
        f'<text x="{pad - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end">{round(peak * q)}</text>'
        for q in (0.25, 0.5, 0.75)
        for y in [xy(0, round(peak * q))[1]]
    )
    legend = "".join(f'<span style="color:{colour}">&#9632; {label}</span> ' for _, label, colour in _SERIES)
    axis = (
        f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="#333"/>'
        f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="#333"/>'
        f'<text x="{pad}" y="{pad - 10}" font-size="12">{peak} tokens</text>'
        f'<text x="{width - pad}" y="{height - pad + 20}" font-size="12" text-anchor="end">request {len(steps)}</text>'
    )
    rows = "".join(
        f"<tr><td>{s.request}</td><td>{s.messages}</td><td>{s.tokens_unfiltered}</td><td>{s.tokens_sent}</td>"
        f"<td>{s.tokens_cached_prefix}</td><td>{s.cached_share * 100:.1f}%</td></tr>"
        for s in steps
    )
    t = result.totals
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:2px 8px;text-align:right}}</style></head>
<body><h1>{html.escape(title)}</h1>
<p>role <b>{html.escape(result.role)}</b>{" (shadow mode)" if result.mode == "shadow" else ""},
chain <b>{html.escape(", ".join(result.chain) or "(none)")}</b>: {t["requests"]} requests,
{t["tokens_unfiltered"]} tokens unfiltered,
{t["tokens_sent"]} sent ({t["saved_share"] * 100:.1f}% saved), {t["cached_share"] * 100:.1f}% of sent tokens a
cacheable prefix.</p>
<p>{legend}</p>
<svg id="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}"
 viewBox="0 0 {width} {height}">{grid}{axis}{"".join(lines)}</svg>
<table><tr><th>request</th><th>messages sent</th><th>unfiltered</th><th>sent</th><th>cacheable prefix</th>
<th>cached</th></tr>{rows}</table>
</body></html>
"""
