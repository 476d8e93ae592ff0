"""Docs that cannot rot: the README carries every filter's section, generated from docs/filters/."""

from __future__ import annotations

import runpy
from pathlib import Path

from proxy.filters import FILTER_TYPES

ROOT = Path(__file__).resolve().parent.parent


def test_readme_filter_sections_match_docs_filters() -> None:
    script = runpy.run_path(str(ROOT / "scripts" / "build_readme.py"))
    assert script["main"](["--check"]) == 0, "run: python scripts/build_readme.py"


def test_every_filter_type_has_a_readme_heading_of_its_own_name() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    missing = [name for name in FILTER_TYPES if f"\n### {name}\n" not in readme]
    assert missing == []


def test_readme_first_code_block_holds_the_run_and_test_commands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("```", 2)[1]
    assert "make run" in block and "make test" in block
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "make test" in ci
