"""``history-proxy demo``: a recorded agent conversation sent through a running proxy as each role.

The conversation is OpenHands' CodeAct agent fixing ponylang/ponyc#4593 (All-Hands-AI/OpenHands, MIT;
``tests/corpus``): a coding agent with editor and shell tools, 68 messages. It is cut into the 33
requests the agent sent while
it grew (as ``history-proxy replay`` cuts it), and each request goes to the proxy's
``POST /v1/history/preview`` with ``X-Agent-Role`` set: the running proxy shapes it with its own config
and sends nothing to a model (a ``summarize`` filter excepted, which asks the proxy's upstream for its
summary). Per role the demo prints tokens, cost under prompt-cache prices and the evidence kept with
its context, unfiltered beside shaped, and why each idle filter of the last request did nothing.

The HTTP client is the standard library's: ``devtools`` stays off the proxy's HTTP stack.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from history_proxy.core.cost import Pricing
from history_proxy.core.tokens import TokenCounters
from history_proxy.devtools.replay import ReplayError, ReplayResult, Shaped, replay_through
from history_proxy.devtools.replay_render import pricing_line

DEMO_ROLES = ("orchestrator", "manager", "worker", "planner", "default")
"""The default config's roles, in the README's order."""
CONVERSATION = "OpenHands CodeAct on ponylang/ponyc#4593 (All-Hands-AI/OpenHands, MIT)"


class ProxyUnreachable(Exception):
    """No proxy answers at the demo's URL."""


def demo_conversation() -> dict[str, Any]:
    """The packaged conversation (a chat-completions body holding all 68 messages)."""
    text = resources.files("history_proxy.devtools").joinpath("demo_conversation.json").read_text("utf-8")
    body: dict[str, Any] = json.loads(text)
    return body


@dataclass
class ProxyPreview:
    """Shapes one request with the running proxy's ``/v1/history/preview``, as ``role``."""

    url: str
    role: str
    key: str | None = None
    last_report: dict[str, Any] = field(default_factory=dict)

    def _post(self, step: dict[str, Any]) -> dict[str, Any]:
        headers = {"Content-Type": "application/json", "X-Agent-Role": self.role, "X-Agent-Name": "demo"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        request = urllib.request.Request(
            f"{self.url}/v1/history/preview", data=json.dumps(step).encode(), headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=120) as answer:
                data: dict[str, Any] = json.load(answer)
                return data
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")[:300]
            raise ReplayError(f"the proxy answered {exc.code}: {detail}") from None
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ProxyUnreachable(
                f"no proxy answers at {self.url} ({reason}): start one in another terminal with `make run` "
                "(or `history-proxy serve --mock`), or give its address with --url"
            ) from None

    async def __call__(self, step: dict[str, Any]) -> Shaped:
        data = self._post(step)
        report: dict[str, Any] = data["report"]
        self.last_report = report
        return Shaped(
            sent=data["body"]["messages"],
            tokens_before=report["before"]["tokens"],
            tokens_after=report["after"]["tokens"],
            chain=report["chain"],
            mode=report.get("mode", "enforce"),
        )


@dataclass(frozen=True)
class RoleRun:
    """One role's replay through the proxy, and the report of its last request."""

    role: str
    result: ReplayResult
    last_report: dict[str, Any]


async def run_demo(
    url: str, pricing: Pricing, roles: tuple[str, ...] = DEMO_ROLES, key: str | None = None
) -> list[RoleRun]:
    """Every role's replay of the packaged conversation through the proxy at ``url``."""
    body = demo_conversation()
    counter = TokenCounters().get(model=str(body.get("model") or ""))
    runs = []
    for role in roles:
        preview = ProxyPreview(url.rstrip("/"), role, key)
        result = await replay_through(preview, body, role, counter, pricing)
        runs.append(RoleRun(role, result, preview.last_report))
    return runs


def _share(part: int, whole: int) -> str:
    return f"{(part / whole if whole else 1.0) * 100:.0f}% ({part}/{whole})"


def demo_row(run: RoleRun) -> str:
    """One role's line of the table: tokens, cost and evidence, unfiltered -> shaped."""
    r = run.result
    unfiltered = sum(s.tokens_unfiltered for s in r.steps)
    sent = sum(s.tokens_sent for s in r.steps)
    saved = f"-{(1 - sent / unfiltered) * 100:.0f}%" if unfiltered else "-0%"
    tokens = f"{unfiltered:,} -> {sent:,} ({saved})"
    cost = f"{r.unfiltered_cost:,.0f} -> {r.cost:,.0f} (x{r.cost_ratio:.2f})"
    evidence = f"{_share(r.evidence_needed, r.evidence_needed)} -> {_share(r.evidence_with_context, r.evidence_needed)}"
    return f"{run.role:<13} {tokens:<29} {cost:<28} {evidence}"


def _chain_line(run: RoleRun) -> str:
    parts = []
    for f in run.last_report.get("filters", []):
        why = f.get("why_unchanged")
        parts.append(f"{f['type']} ({why})" if why else f"{f['type']} (-{f['tokens_removed']:,} tokens)")
    return f"  {run.role}: " + ("; ".join(parts) or "no filter")


def demo_table(runs: list[RoleRun]) -> list[str]:
    """The table's two header lines and a row per role (the README quotes it: ``make docs-figures``)."""
    return [
        f"{'role':<13} {'tokens sent, all requests':<29} {'cost with caching':<28} evidence kept with its context",
        f"{'':<13} {'unfiltered -> shaped':<29} {'unfiltered -> shaped':<28} unfiltered -> shaped",
        *(demo_row(run) for run in runs),
    ]


def render_demo(runs: list[RoleRun], url: str) -> str:
    """The demo's table: each role unfiltered -> shaped, then each chain on the last request."""
    steps = len(runs[0].result.steps) if runs else 0
    lines = [
        f"history-proxy demo: {CONVERSATION}, {steps} requests as the agent grew it, "
        f"shaped by the proxy at {url} as each role",
        pricing_line(runs[0].result) if runs else "",
        "",
        *demo_table(runs),
        "",
        "each chain on the last request (a filter that changed nothing says why):",
        *(_chain_line(run) for run in runs),
        "",
        "cost: input-token equivalents (one uncached input token = 1) under the prompt-cache prices above;",
        "evidence: the tokens the agent's next answer took from earlier tool output, still where they stood.",
    ]
    return "\n".join(lines)
