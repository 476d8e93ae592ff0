"""Write the figures the docs quote from what the code computes now (`make docs-figures`).

Today: the token report of docs/observability.md (the default config's worker chain on the
SWE-agent conversation of the corpus, as `history-proxy preview --role worker --agent coder-1` prints
it). Usage: python scripts/docs_figures.py [--check]; with --check it writes nothing and exits 1 when a
figure drifted (tests/test_docs.py runs the check). Timings (``ms``) are not figures: they are kept.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from proxy.config.loading import load_config  # noqa: E402
from proxy.core.identity import Identity  # noqa: E402
from proxy.core.tokens import TokenCounters  # noqa: E402
from proxy.pipeline.run import Pipeline  # noqa: E402
from proxy.surfaces.shape import preview  # noqa: E402
from scripts.generated_pages import write_or_check  # noqa: E402

PAGE = ROOT / "docs" / "observability.md"
CONVERSATION = ROOT / "tests" / "corpus" / "swe-agent-marshmallow-1867-fc.json"
AFTER = "history-proxy preview --role worker --agent coder-1 conversation.json | jq .report\n```\n\n"
BLOCK = re.compile(re.escape(AFTER) + r"```json\n(.*?)```", re.DOTALL)


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


def main(argv: list[str]) -> int:
    page = PAGE.read_text(encoding="utf-8")
    match = BLOCK.search(page)
    if match is None:
        raise SystemExit(f"{PAGE.name}: no token report block after the preview command")
    timings = [f["ms"] for f in json.loads(match.group(1))["filters"]]
    wanted = page[: match.start(1)] + rendered(report(), timings) + page[match.end(1) :]
    return write_or_check({PAGE: wanted}, argv, "make docs-figures")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
