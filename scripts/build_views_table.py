"""Write docs/views-on-real-traffic.md: what each default role view keeps of every corpus conversation, and why.

Usage: python scripts/build_views_table.py [--check]. With --check it writes nothing and exits 1 when the
page is out of date; tests/test_views_on_real_traffic.py runs the check, so the table always says
what the code does. The views are configured as config/default.yaml configures them; each request
carries the identity headers it was recorded with (MANIFEST.tsv's notes, framework recordings only).
"""

from __future__ import annotations

import csv
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from history_proxy.config.loading import load_config  # noqa: E402
from history_proxy.config.models import DEFAULT_CONFIG_PATH  # noqa: E402
from history_proxy.core.messages import (  # noqa: E402
    FINAL,
    Message,
    classify,
    group_spans,
    leading_system_count,
    newest_user_index,
)
from history_proxy.filters import Filter, FilterContext  # noqa: E402
from history_proxy.filters._views import TurnPattern, producing_agent, view_turn  # noqa: E402
from scripts.generated_pages import write_or_check  # noqa: E402

CORPUS = ROOT / "tests" / "corpus"
PAGE = ROOT / "docs" / "views-on-real-traffic.md"
VIEWS = ("orchestrator_view", "manager_view", "worker_view")
_HEADER = re.compile(r"X-Agent-(Role|Name)=(\S+)")


@dataclass(frozen=True)
class Row:
    """One conversation under one view."""

    file: str
    view: str
    before: int
    after: int
    task: tuple[int, ...]
    task_kept: bool
    newest_user_kept: bool
    since_kept: bool
    notes: tuple[str, ...]
    why: str


def default_views() -> dict[str, Filter]:
    """The first filter of each view role's chain in the shipped default config."""
    config = load_config(DEFAULT_CONFIG_PATH, env={})
    found: dict[str, Filter] = {}
    for role in ("orchestrator", "manager", "worker"):
        for _, chain_filter in config.chain(role, None):
            if chain_filter.type_name in VIEWS:
                found[chain_filter.type_name] = chain_filter
    return found


def recorded_agents() -> dict[str, str]:
    """file -> the X-Agent-Name it was recorded with (framework recordings)."""
    agents: dict[str, str] = {}
    with (CORPUS / "MANIFEST.tsv").open(encoding="utf-8") as manifest:
        for row in csv.DictReader(manifest, delimiter="\t"):
            headers = dict(_HEADER.findall(row.get("notes") or ""))
            if "Name" in headers:
                agents[row["filename"]] = headers["Name"]
    return agents


def task_statement(messages: list[Message]) -> tuple[int, ...]:
    """The opening task statement: the first user message and the user messages right after it (the
    leading system messages when there is no user message)."""
    first = next((i for i, m in enumerate(messages) if m.get("role") == "user"), None)
    if first is None:  # a request of system messages alone (AutoGen's speaker selection): they are the task
        return tuple(range(leading_system_count(messages)))
    end = first
    while end < len(messages) and messages[end].get("role") == "user":
        end += 1
    return tuple(range(first, end))


def keeps(out: list[Message], message: Message) -> bool:
    return any(kept is message for kept in out)


def evaluate(name: str, view: Filter, messages: list[Message], agent: str | None) -> Row:
    ctx = FilterContext(role=view.type_name.removesuffix("_view"), agent=agent, notes=[])
    out = view.apply(messages, ctx)
    task = task_statement(messages)
    turns: TurnPattern | Literal["every_user", "first_user"] = getattr(view, "turns", "every_user")
    turn = view_turn(messages, turns)
    newest = newest_user_index(messages)
    kinds = classify(messages)
    own_since = [
        messages[i]
        for a, b in group_spans(messages, task[-1] + 1 if task else len(messages))
        if producing_agent(messages[a]) in (None, agent)
        for i in range(a, b)
        if kinds[i] != FINAL
    ]
    since_kept = all(keeps(out, m) for m in own_since)
    has_user = any(m.get("role") == "user" for m in messages)
    turn_text = (
        f"turn from #{turn.start}" if has_user else "no user message: the system messages are the task"
    )
    reason = [f"turns={turns if isinstance(turns, str) else 'pattern'}: {turn_text}"]
    if turn.anchor:
        reason.append(f"task #{turn.anchor[0]}-{turn.anchor[-1]} anchored")
    dropped = len(messages) - len(out)
    if dropped:
        final = sum(1 for k in kinds if k == FINAL)
        reason.append(f"{dropped} dropped" + (f" ({final} completion)" if final else ""))
    return Row(
        file=name,
        view=view.type_name,
        before=len(messages),
        after=len(out),
        task=task,
        task_kept=all(keeps(out, messages[i]) for i in task),
        newest_user_kept=newest is None or keeps(out, messages[newest]),
        since_kept=since_kept,
        notes=tuple(ctx.notes),
        why="; ".join(reason),
    )


def rows() -> list[Row]:
    views = default_views()
    agents = recorded_agents()
    found: list[Row] = []
    for path in sorted(CORPUS.glob("*.json")):
        messages = json.loads(path.read_text(encoding="utf-8"))["messages"]
        for view_name in VIEWS:
            found.append(evaluate(path.name, views[view_name], messages, agents.get(path.name)))
    return found


def mark(ok: bool) -> str:
    return "yes" if ok else "**NO**"


def render() -> str:
    table = rows()
    lines = [
        "# What the default role views keep of real traffic",
        "",
        "Generated by `python scripts/build_views_table.py` from `tests/corpus/` and `config/default.yaml`;",
        "`tests/test_views_on_real_traffic.py` fails when this page and the code disagree.",
        "",
        "Each corpus conversation is the request of one agent, sent as recorded (framework recordings",
        "with the `X-Agent-Name` they were recorded with, others with none) to each view as the default",
        "config sets it: `orchestrator_view` (`turns: every_user`, 8 conversation messages),",
        "`manager_view` and `worker_view` (`turns: first_user`), no `X-Agent-Phase`. *Task* is the",
        "opening task statement (the first user message and the user messages right after it; the system",
        "messages of a request that has no user message); *since*:",
        "every group after it that is not another agent's (its first message carries no `name` or the",
        "caller's own) is kept whole, completion signals aside: what `worker_view` and `manager_view`",
        "promise (`orchestrator_view` reduces earlier turns to conversation by design). Other agents'",
        "plain messages stay too; their tool calls and results (their traces) go.",
        "",
        "| conversation | view | messages | task | newest user | since | notes | why |",
        "|---|---|---:|---|---|---|---|---|",
    ]
    for row in table:
        since = mark(row.since_kept) if row.view != "orchestrator_view" else "-"
        lines.append(
            f"| {row.file.removesuffix('.json')} | {row.view} | {row.before} -> {row.after} | "
            f"{mark(row.task_kept)} | {mark(row.newest_user_kept)} | {since} | {', '.join(row.notes)} | {row.why} |"
        )
    lost = [r for r in table if not r.task_kept]
    lines += ["", f"{len(table)} view requests; the task statement lost in {len(lost)}.", ""]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    return write_or_check({PAGE: render()}, argv, "python scripts/build_views_table.py")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
