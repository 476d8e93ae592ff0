"""Splice docs/filters/<type>.md into README.md between the filter markers.

Usage: python scripts/build_readme.py [--check]. With --check it writes nothing and exits 1 when the
README is out of date. tests/test_docs.py runs the check, so the README cannot drift from the docs.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs" / "filters"
START, END = "<!-- filters -->", "<!-- /filters -->"
# SPEC section 5's order; a doc not listed here is appended in name order.
ORDER = [
    "passthrough",
    "orchestrator_view",
    "manager_view",
    "worker_view",
    "tool_call_filter",
    "token_limiter",
    "tool_result_truncation",
    "worker_compaction",
    "sop_digest",
    "manager_digest",
    "last_n_observations",
    "tag_tool_call_observations",
    "remove_regex",
    "sliding_window",
    "truncate",
    "summarize",
    "cache_control",
    "custom",
]


def filter_docs() -> list[Path]:
    found = {p.stem: p for p in DOCS.glob("*.md")}
    ordered = [found.pop(name) for name in ORDER if name in found]
    return ordered + [found[name] for name in sorted(found)]


def rendered(readme: str) -> str:
    if START not in readme:
        raise SystemExit(f"README.md has no {START} marker")
    head, _, rest = readme.partition(START)
    _, _, tail = rest.partition(END) if END in rest else ("", "", rest)
    sections = "\n".join(p.read_text(encoding="utf-8").strip() + "\n" for p in filter_docs())
    return f"{head}{START}\n\n{sections}\n{END}{tail}"


def main(argv: list[str]) -> int:
    current = README.read_text(encoding="utf-8")
    wanted = rendered(current)
    if "--check" in argv:
        if current != wanted:
            print("README.md is out of date: run python scripts/build_readme.py", file=sys.stderr)
            return 1
        return 0
    README.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
