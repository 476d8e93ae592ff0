"""Pages generated from the code: write them, or (``--check``) say which drifted and exit 1.

The scripts that generate parts of the docs (``build_readme.py``, ``build_views_table.py``,
``docs_figures.py``) end the same way; tests run each with ``--check``.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def write_or_check(pages: dict[Path, str], argv: list[str], command: str) -> int:
    """Write each page whose text differs from ``pages``; with ``--check`` only report them (exit 1)."""
    stale = [
        path for path, text in pages.items() if not path.is_file() or path.read_text(encoding="utf-8") != text
    ]
    if "--check" in argv:
        for path in stale:
            print(f"{path.relative_to(ROOT)} is out of date: run {command}", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.write_text(pages[path], encoding="utf-8")
    return 0
