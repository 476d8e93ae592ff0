"""replay --split tune|held-out and the headline measure in every output (issue 32): the corpus split keeps
whole sources on one side, the halves replay apart, and evidence with its context comes first."""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from history_proxy.cli import main
from history_proxy.core.messages import Message
from history_proxy.devtools.replay_split import SplitError, half_of, parse_split
from tests.factories import CORPUS_DIR, action, assistant, call, result, system, user

SPLIT = CORPUS_DIR / "split.tsv"
CHAIN = """\
upstreams: {mock: {base_url: "mock://"}}
policies:
  roles:
    worker: [{type: last_n_observations, n: 1, notice: facts}]
"""


def is_tool_loop(messages: list[Message]) -> bool:
    return len(messages) >= 12 and any(m.get("tool_calls") for m in messages)


# --- the corpus split --------------------------------------------------------------------------------


def test_the_split_keeps_whole_sources_on_one_side_and_lists_real_files() -> None:
    """Issue 32 asks for 60 tool loops from 6 sources; the committed corpus has fewer (the converted
    public runs must come through shared/corpus/, tests/corpus/tool-loops/README.md), so this holds the
    split's rules, not that count."""
    halves = parse_split(SPLIT.read_text(encoding="utf-8"))
    sources: dict[str, set[str]] = defaultdict(set)
    loops: dict[str, int] = defaultdict(int)
    for line in SPLIT.read_text(encoding="utf-8").splitlines()[1:]:
        path, half, source = line.split("\t")
        sources[source].add(half)
        messages = json.loads((CORPUS_DIR / path).read_text(encoding="utf-8"))["messages"]
        loops[half] += is_tool_loop(messages)
    assert all(len(sides) == 1 for sides in sources.values()), sources
    assert min(loops.values()) >= 1, loops
    assert {"tune", "held-out"} == set(halves.values())


def test_every_corpus_tool_loop_is_in_the_split_and_in_a_manifest() -> None:
    halves = parse_split(SPLIT.read_text(encoding="utf-8"))
    listed = set()
    for manifest, prefix in (
        (CORPUS_DIR / "MANIFEST.tsv", ""),
        (CORPUS_DIR / "tool-loops" / "MANIFEST.tsv", "tool-loops/"),
    ):
        with manifest.open(encoding="utf-8") as rows:
            listed |= {
                prefix + row["filename"] for row in csv.DictReader(rows, delimiter="\t") if row["license"]
            }
    files = [*CORPUS_DIR.glob("*.json"), *(CORPUS_DIR / "tool-loops").glob("*.json")]
    for path in files:
        name = path.relative_to(CORPUS_DIR).as_posix()
        if is_tool_loop(json.loads(path.read_text(encoding="utf-8"))["messages"]):
            assert name in halves and name in listed, name


def test_a_split_file_names_the_bad_line() -> None:
    with pytest.raises(SplitError, match=r"split\.tsv, line 2"):
        parse_split("# file\thalf\tsource\na.json\tsometimes\tX\n")
    assert (
        half_of(
            CORPUS_DIR.resolve() / "tool-loops" / "x.json",
            {CORPUS_DIR.resolve(): {"tool-loops/x.json": "tune"}},
        )
        == "tune"
    )


# --- replay --split on a small corpus ---------------------------------------------------------------


def loop(tag: str) -> dict[str, object]:
    """A tool loop of 14 messages whose answers use what the outputs showed."""
    messages: list[Message] = [system(), user(f"Task {tag}.")]
    for step in range(5):
        act = action(call("lookup", {"step": step}))
        rows = "\n".join(f"row {row}: nothing of note on this line of the listing" for row in range(20))
        messages += [act, result(act, f"record {tag}_{step}_identifier: value {4000 + step}\n{rows}")]
    messages += [assistant(f"Using {tag}_0_identifier and 4000 and {tag}_3_identifier."), user("Thanks.")]
    return {"model": "gpt-4o", "messages": messages}


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    folder = tmp_path / "corpus"
    (folder / "more").mkdir(parents=True)
    for name in ("alpha.json", "beta.json", "more/gamma.json"):
        (folder / name).write_text(json.dumps(loop(name.split("/")[-1][:5])), encoding="utf-8")
    (folder / "split.tsv").write_text(
        "# file\thalf\tsource\nalpha.json\ttune\tA\nbeta.json\ttune\tA\nmore/gamma.json\theld-out\tB\n",
        encoding="utf-8",
    )
    (tmp_path / "chain.yaml").write_text(CHAIN, encoding="utf-8")
    return folder


def replayed(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["replay", "--role", "worker", "--json", *args]) == 0
    printed: dict[str, Any] = json.loads(capsys.readouterr().out)
    return printed


def test_split_replays_one_half_of_a_folder(corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chain = str(corpus.parent / "chain.yaml")
    tune = replayed(capsys, str(corpus), "--split", "tune", "--config", chain)
    assert sorted(Path(f).name for f in tune["files"]) == ["alpha.json", "beta.json"]
    every = replayed(capsys, str(corpus), "--config", chain)  # no --split: both halves
    assert len(every["files"]) == 3


def test_split_keeps_the_files_a_split_file_above_places_in_that_half(
    corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = [str(corpus / "alpha.json"), str(corpus / "beta.json"), str(corpus / "more" / "gamma.json")]
    held = replayed(capsys, *files, "--split", "held-out", "--config", str(corpus.parent / "chain.yaml"))
    assert held["steps"] and held["totals"]  # one file left: its own table


def test_split_refuses_what_no_split_file_places(corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stray = corpus.parent / "stray.json"
    stray.write_text(json.dumps(loop("stray")), encoding="utf-8")
    assert main(["replay", str(stray), "--split", "tune"]) != 0
    assert "no split.tsv in its folder or above lists it" in capsys.readouterr().err
    assert main(["replay", str(corpus / "more"), "--split", "tune"]) != 0
    assert "no split.tsv to take the tune half from" in capsys.readouterr().err


# --- the headline in every output -------------------------------------------------------------------


def test_every_output_puts_evidence_with_its_context_first(
    corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chain, alpha = str(corpus.parent / "chain.yaml"), str(corpus / "alpha.json")
    one = replayed(capsys, alpha, "--config", chain)
    totals = one["totals"]
    assert isinstance(totals, dict)
    # the facts notice keeps every token somewhere, none where it stood
    assert totals["evidence_kept"] == totals["evidence_needed"] > totals["evidence_with_context"]
    assert (
        totals["context_lost_by_reason"]["notice"]
        == totals["evidence_needed"] - totals["evidence_with_context"]
    )
    step = next(s for s in one["steps"] if s["evidence_context_lost"])
    assert all(why == "notice" for _, why in step["evidence_context_lost"])
    assert main(["replay", "--role", "worker", alpha, "--config", chain]) == 0
    total = capsys.readouterr().out.splitlines()[-1]
    assert total.split("; ")[2].startswith("evidence with context ") and "only in a notice" in total
    compared = replayed(capsys, str(corpus), "--config", chain, "--compare", chain, chain)
    row = compared["chains"][0]
    assert row["with_context_share"] < row["evidence_share"] == 1.0
    assert row["context_lost_by_reason"]["notice"] > 0
    assert main(["replay", "--role", "worker", str(corpus), "--config", chain, "--compare", chain]) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[1].split()[5:8] == ["with", "context", "anywhere"]
    assert f"without context: {row['context_lost_by_reason']['notice']} only in a notice" in table
    page = corpus.parent / "page.html"
    assert main(["replay", "--role", "worker", alpha, "--config", chain, "--html", str(page)]) == 0
    assert "evidence with context" in page.read_text(encoding="utf-8").split("<table>")[0]
