"""Write the figures the docs quote from what the code computes now (`make docs-figures`).

Today, from README.md: the demo's table (its orchestrator and worker rows); from docs/observability.md:
the token report (the default config's worker chain on the SWE-agent conversation of the corpus, as
`history-proxy preview --role worker --agent coder-1` prints it) and the replay table of the same
conversation (`history-proxy replay --role worker`, abridged).

Usage: python scripts/docs_figures.py [--check]; with --check it writes nothing and exits 1 when a
figure drifted (tests/test_docs.py runs the check). Timings (``ms``) are not figures: they are kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from history_proxy.cli import main as cli  # noqa: E402
from history_proxy.config.loading import load_config  # noqa: E402
from history_proxy.core.identity import Identity  # noqa: E402
from history_proxy.core.tokens import TokenCounters  # noqa: E402
from history_proxy.pipeline.run import Pipeline  # noqa: E402
from history_proxy.surfaces.shape import preview  # noqa: E402
from scripts.generated_pages import write_or_check  # noqa: E402

PAGE = ROOT / "docs" / "observability.md"
CONVERSATION = ROOT / "tests" / "corpus" / "swe-agent-marshmallow-1867-fc.json"
AFTER = "history-proxy preview --role worker --agent coder-1 conversation.json | jq .report\n```\n\n"
BLOCK = re.compile(re.escape(AFTER) + r"```json\n(.*?)```", re.DOTALL)
REPLAY = "history-proxy replay --role worker conversation.json"
REPLAY_BLOCK = re.compile(re.escape(REPLAY + "\n```\n\n") + r"```text\n(.*?)```", re.DOTALL)
KEPT_ROWS = 3
"""The replay table shows its first and last rows this many each, with `...` between."""


def report() -> dict[str, Any]:
    """The token report the docs show, computed now."""
    config = load_config(ROOT / "config" / "default.yaml", env={})
    body = json.loads(CONVERSATION.read_text(encoding="utf-8"))
    caller = Identity(role="worker", agent="coder-1")
    shaped = asyncio.run(preview(Pipeline(config, TokenCounters()), body, caller, None))
    return dict(shaped.result.report)


def _j(value: Any) -> str:
    return json.dumps(value, separators=(", ", ": "))


def rendered(report: dict[str, Any], timings: list[float]) -> str:
    """The report in the page's layout (one line per filter), with the page's timings kept."""
    r = report
    filters = [
        "    " + _j({**f, "ms": timings[i] if i < len(timings) else f["ms"]})
        for i, f in enumerate(r["filters"])
    ]
    return (
        "{\n"
        f'  "role": {_j(r["role"])}, "agent": {_j(r["agent"])}, '
        f'"tenant": {_j(r["tenant"])}, "phase": {_j(r["phase"])},\n'
        f'  "model": {_j(r["model"])}, "upstream": {_j(r["upstream"])},\n'
        f'  "chain": {_j(r["chain"])},\n'
        f'  "before": {{"messages": {r["before"]["messages"]}, "tokens": {r["before"]["tokens"]},\n'
        f'             "tokens_by_role": {_j(r["before"]["tokens_by_role"])}}},\n'
        f'  "after":  {{"messages": {r["after"]["messages"]}, "tokens": {r["after"]["tokens"]},\n'
        f'             "tokens_by_role": {_j(r["after"]["tokens_by_role"])}}},\n'
        '  "filters": [\n' + ",\n".join(filters) + "\n  ],\n"
        f'  "limit": {_j(r["limit"])},\n'
        f'  "mode": {_j(r["mode"])}\n'
        "}\n"
    )


README = ROOT / "README.md"
DEMO_BLOCK = re.compile(r"unfiltered beside shaped:\n\n```text\n(.*?)```", re.DOTALL)
DEMO_ROLES = ("orchestrator", "worker")
"""The demo's rows the README quotes."""


def demo_rows() -> str:
    """`history-proxy demo`'s table for the README's roles, each role replayed in process on the
    default config (what the running proxy's preview computes for the same requests)."""
    from history_proxy.devtools.demo import RoleRun, demo_conversation, demo_table
    from history_proxy.devtools.replay import replay

    config = load_config(ROOT / "config" / "default.yaml", env={})
    body = demo_conversation()
    runs = [
        RoleRun(role, asyncio.run(replay(Pipeline(config, TokenCounters()), body, Identity(role=role))), {})
        for role in DEMO_ROLES
    ]
    return "\n".join(demo_table(runs)) + "\n"


def readme_page() -> str:
    text = README.read_text(encoding="utf-8")
    block = DEMO_BLOCK.search(text)
    if block is None:
        raise SystemExit("README.md: no demo table after 'unfiltered beside shaped:'")
    return text[: block.start(1)] + demo_rows() + text[block.end(1) :]


def main(argv: list[str]) -> int:
    page = PAGE.read_text(encoding="utf-8")
    match = BLOCK.search(page)
    if match is None:
        raise SystemExit(f"{PAGE.name}: no token report block after the preview command")
    timings = [f["ms"] for f in json.loads(match.group(1))["filters"]]
    page = page[: match.start(1)] + rendered(report(), timings) + page[match.end(1) :]
    table = REPLAY_BLOCK.search(page)
    if table is None:
        raise SystemExit(f"{PAGE.name}: no replay table after `{REPLAY}`")
    page = page[: table.start(1)] + replay_table() + page[table.end(1) :]
    return write_or_check({PAGE: page, README: readme_page()}, argv, "make docs-figures")


def replay_table() -> str:
    """`history-proxy replay --role worker` of the conversation, its middle rows abridged."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = cli(
            [
                "replay",
                "--role",
                "worker",
                "--config",
                str(ROOT / "config" / "default.yaml"),
                str(CONVERSATION),
            ]
        )
    if status != 0:
        raise SystemExit("history-proxy replay failed")
    lines = out.getvalue().splitlines()
    head, rows, total = lines[:3], lines[3:-1], lines[-1]
    if len(rows) > 2 * KEPT_ROWS:
        rows = [*rows[:KEPT_ROWS], " ...", *rows[-KEPT_ROWS:]]
    return "\n".join([*head, *rows, total]) + "\n"


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
