"""Real traffic through the default role views: no view loses the caller's task, and the docs table says so.

The rows come from ``scripts/build_views_table.py``, which also writes docs/views-on-real-traffic.md:
every corpus conversation (old and framework recordings) under each default view, with the identity
headers it was recorded with.
"""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
TABLE = runpy.run_path(str(ROOT / "scripts" / "build_views_table.py"))
ROWS: list[Any] = TABLE["rows"]()


def test_the_docs_table_matches_the_code() -> None:
    assert TABLE["main"](["--check"]) == 0, "run: python scripts/build_views_table.py"


def test_every_corpus_conversation_meets_every_default_view() -> None:
    conversations = {row.file for row in ROWS}
    assert len(conversations) == len(list((ROOT / "tests" / "corpus").glob("*.json")))
    assert {row.view for row in ROWS} == {"orchestrator_view", "manager_view", "worker_view"}


@pytest.mark.parametrize("row", ROWS, ids=lambda row: f"{row.file.removesuffix('.json')}-{row.view}")
def test_no_default_view_drops_the_task_statement_or_the_newest_user_message(row: Any) -> None:
    assert row.task, f"{row.file}: no task statement found"
    assert row.task_kept, f"{row.view} dropped the task statement of {row.file}: {row.why}"
    assert row.newest_user_kept


@pytest.mark.parametrize(
    "row", [r for r in ROWS if r.view != "orchestrator_view"], ids=lambda row: f"{row.file}-{row.view}"
)
def test_worker_and_manager_keep_everything_the_caller_did_since_its_task(row: Any) -> None:
    assert row.since_kept, f"{row.view} hid part of {row.file}'s own work: {row.why}"
