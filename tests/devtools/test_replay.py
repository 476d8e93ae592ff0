"""history-proxy replay: growing requests, tokens sent, cacheable prefix, the HTML chart (issue 7)."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import struct
import subprocess
import zlib
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from history_proxy.cli import main
from history_proxy.config.loading import load_config
from history_proxy.config.models import Config
from history_proxy.core.identity import Identity
from history_proxy.core.messages import Message
from history_proxy.core.tokens import TokenCounters
from history_proxy.devtools.replay import replay
from history_proxy.devtools.replay_html import render_html
from history_proxy.pipeline.run import Pipeline
from tests.factories import CORPUS_DIR, corpus_body

CONVERSATION = "swe-agent-marshmallow-1867-fc.json"
WORKER_CONFIG = """\
upstreams: {mock: {base_url: "mock://"}}
policies:
  roles:
    worker:
      - {type: worker_view}
      - {type: last_n_observations, n: 5, polling: 1}
      - {type: token_limiter, limit: 6000}
"""
SERIES_COLOURS = {
    "tokens_unfiltered": (0x9A, 0xA5, 0xB1),
    "tokens_sent": (0x1F, 0x77, 0xB4),
    "cached": (0x2C, 0xA0, 0x2C),
}

pytestmark = pytest.mark.skipif(not (CORPUS_DIR / CONVERSATION).exists(), reason="corpus not available")


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "worker.yaml"
    path.write_text(WORKER_CONFIG)
    return path


def answered_prefixes(messages: list[Message]) -> list[list[Message]]:
    """The requests an agent sent: the history before each model answer, and the whole if unanswered."""
    prefixes = []
    for i, message in enumerate(messages):
        if i > 0 and message["role"] == "assistant" and messages[i - 1]["role"] != "assistant":
            prefixes.append(messages[:i])
    if messages[-1]["role"] != "assistant":
        prefixes.append(messages)
    return prefixes


def independent_totals(config: Config, body: dict[str, Any]) -> dict[str, int]:
    """Totals computed here: unfiltered tokens straight from the token counter, the prefix by comparison."""
    counter = TokenCounters().get(model=body["model"])
    pipeline = Pipeline(config, TokenCounters())
    unfiltered = sent = cached = 0
    previous: list[Message] = []
    prefixes = answered_prefixes(body["messages"])
    for prefix in prefixes:
        unfiltered += counter.messages(prefix)
        outcome = asyncio.run(pipeline.run({**body, "messages": prefix}, Identity(role="worker"), "mock"))
        messages = outcome.body["messages"]
        sent += counter.messages(messages)
        shared = 0
        while shared < min(len(previous), len(messages)) and previous[shared] == messages[shared]:
            shared += 1
        cached += sum(counter.message(m) for m in messages[:shared])
        previous = messages
    return {
        "requests": len(prefixes),
        "tokens_unfiltered": unfiltered,
        "tokens_sent": sent,
        "tokens_cached_prefix": cached,
    }


def test_replay_totals_match_an_independent_count(
    config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = corpus_body(CONVERSATION)
    expected = independent_totals(load_config(config_file), body)
    status = main(
        ["replay", str(CORPUS_DIR / CONVERSATION), "--config", str(config_file), "--role", "worker", "--json"]
    )
    assert status == 0
    printed = json.loads(capsys.readouterr().out)
    totals = printed["totals"]
    assert {k: totals[k] for k in expected} == expected
    assert 0 < totals["tokens_sent"] < totals["tokens_unfiltered"]  # the chain does something here
    assert 0 < totals["tokens_cached_prefix"] < totals["tokens_sent"]
    assert totals["cached_share"] == round(expected["tokens_cached_prefix"] / expected["tokens_sent"], 4)
    assert printed["chain"] == ["worker_view", "last_n_observations", "token_limiter"]
    steps = printed["steps"]
    assert [s["request"] for s in steps] == list(range(1, expected["requests"] + 1))
    assert steps[0]["tokens_cached_prefix"] == 0  # nothing to reuse on the first request
    assert all(s["tokens_sent"] <= 6000 for s in steps)


def test_replay_prints_a_table_line_per_request_then_totals(
    config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(
        ["replay", str(CORPUS_DIR / CONVERSATION), "--config", str(config_file), "--role", "worker"]
    )
    lines = capsys.readouterr().out.splitlines()
    assert status == 0
    assert lines[0] == "role worker, chain: worker_view, last_n_observations, token_limiter"
    assert lines[1].startswith("pricing openai: cached reads x0.1, cache writes x1, from 1024 tokens")
    assert lines[2].split() == [
        "req", "msgs", "unfiltered", "sent", "cached", "prefix", "cached", "%",
        "billed", "cached", "uncached", "cost", "unfilt.", "cost", "context", "token",
        "without", "context", "(why)",
    ]  # fmt: skip
    requests = len(answered_prefixes(corpus_body(CONVERSATION)["messages"]))
    assert len(lines) == 3 + requests + 1
    assert lines[-1].startswith(f"total: {requests} requests, ")


def test_a_larger_step_keeps_more_of_the_sent_prefix_cacheable(tmp_path: Path) -> None:
    body = corpus_body(CONVERSATION)
    shares = []
    for polling in (1, 5):
        path = tmp_path / f"polling{polling}.yaml"
        path.write_text(WORKER_CONFIG.replace("polling: 1", f"polling: {polling}"))
        result = asyncio.run(
            replay(Pipeline(load_config(path), TokenCounters()), body, Identity(role="worker"))
        )
        shares.append(result.totals["cached_share"])
    assert shares[1] > shares[0]


def test_replay_of_a_file_without_messages_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"model": "gpt-4o"}')
    assert main(["replay", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "non-empty 'messages' list" in err


def test_replay_writes_a_self_contained_page(config_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "replay.html"
    args = ["replay", str(CORPUS_DIR / CONVERSATION), "--config", str(config_file), "--role", "worker"]
    assert main([*args, "--html", str(out)]) == 0
    page = out.read_text()
    # unfiltered (100 %), tokens sent, cacheable prefix, cost: each a share of the request unfiltered
    assert page.count('<polyline class="series"') == 4
    assert '<svg id="chart"' in page
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "") and "<script" not in page


# --- the chart, seen by a real browser ----------------------------------------------------------


def png_rows(data: bytes) -> tuple[int, int, Iterator[bytes]]:
    """Width, height and the RGB rows, decoded one by one, of an 8-bit RGB(A) non-interlaced PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    offset, idat = 8, b""
    width = height = channels = 0
    while offset < len(data):
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        kind = data[offset + 4 : offset + 8]
        chunk = data[offset + 8 : offset + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", chunk)
            assert depth == 8 and interlace == 0 and colour in (2, 6)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        offset += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    low, high = int.from_bytes(b"\x7f" * stride, "big"), int.from_bytes(b"\x80" * stride, "big")

    def add(a: bytes | bytearray, b: bytes | bytearray) -> bytearray:
        """Bytewise (a + b) mod 256 in one big-integer step (the Up filter, without a Python loop)."""
        x, y = int.from_bytes(a, "big"), int.from_bytes(b, "big")
        return bytearray((((x & low) + (y & low)) ^ ((x ^ y) & high)).to_bytes(stride, "big"))

    def rows() -> Iterator[bytes]:
        previous, n = bytearray(stride), channels
        for y in range(height):
            start = y * (stride + 1)
            kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
            if kind == 1:  # Sub
                for i in range(n, stride):
                    line[i] = (line[i] + line[i - n]) & 0xFF
            elif kind == 2:  # Up
                line = add(line, previous)
            elif kind == 3:  # Average
                for i in range(stride):
                    line[i] = (line[i] + (((line[i - n] if i >= n else 0) + previous[i]) >> 1)) & 0xFF
            elif kind == 4:  # Paeth
                for i in range(n):
                    line[i] = (line[i] + previous[i]) & 0xFF
                for i in range(n, stride):
                    a, b, c = line[i - n], previous[i], previous[i - n]
                    pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                    line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
            previous = line
            yield bytes(line) if n == 3 else bytes(v for i, v in enumerate(line) if i % 4 != 3)

    return width, height, rows()


AXIS_RUN = re.compile(rb"(?:[\x20-\xc7]{3}){500,}")  # 500+ grey pixels in a row: the anti-aliased #333 axis


def rows_down_to_the_x_axis(rows: Iterator[bytes]) -> tuple[list[bytes], tuple[int, int, int, int]]:
    """The rows decoded down to the chart's x axis, and the plot area above it (260 px high)."""
    decoded = []
    for y, row in enumerate(rows):
        decoded.append(row)
        for match in AXIS_RUN.finditer(row):
            if match.start() % 3 == 0:
                left, right = match.start() // 3, match.end() // 3
                return decoded, (left + 3, y - 260, right - 3, y - 2)
    raise AssertionError("no x axis drawn")


def colour_pixels(rows: list[bytes], box: tuple[int, int, int, int], colour: tuple[int, int, int]) -> int:
    """Pixels in ``box`` within 16 of ``colour`` on every channel."""
    left, top, right, bottom = box
    ranges = b"".join(
        b"[" + re.escape(bytes([max(0, c - 16)])) + b"-" + re.escape(bytes([min(255, c + 16)])) + b"]"
        for c in colour
    )
    near = re.compile(b"(?=" + ranges + b")")
    return sum(
        1
        for y in range(top, bottom)
        for m in near.finditer(rows[y][3 * left : 3 * right])
        if m.start() % 3 == 0
    )


def test_the_html_chart_is_drawn_in_a_real_browser(config_file: Path, tmp_path: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("Debian's chromium is not installed here (.ci/run installs it)")
    body = corpus_body(CONVERSATION)
    result = asyncio.run(
        replay(Pipeline(load_config(config_file), TokenCounters()), body, Identity(role="worker"))
    )
    page = tmp_path / "replay.html"
    page.write_text(render_html(result, "replay"), encoding="utf-8")
    shot = screenshot(browser, page, tmp_path, 800)
    width, height, rows = png_rows(shot.read_bytes())
    assert (width, height) == (1000, 800)
    decoded, box = rows_down_to_the_x_axis(rows)
    assert box[2] - box[0] > 700 and box[1] > 0, f"the plot area {box} is not the chart's"
    for series, colour in SERIES_COLOURS.items():
        assert colour_pixels(decoded, box, colour) >= 30, f"{series} is not drawn in the chart"


# --- cost with prompt caching priced in (issue 18) ----------------------------------------------


def test_replay_prices_each_request_against_the_same_requests_unfiltered(
    config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["replay", str(CORPUS_DIR / CONVERSATION), "--config", str(config_file), "--role", "worker"]
    assert main([*args, "--json", "--pricing", "anthropic"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["pricing"]["write"] == 1.25
    counter = TokenCounters().get(model=corpus_body(CONVERSATION)["model"])
    previous = 0
    expected_unfiltered = 0.0
    for step, prefix in zip(
        printed["steps"], answered_prefixes(corpus_body(CONVERSATION)["messages"]), strict=True
    ):
        total = counter.messages(prefix)
        cached = (
            previous if previous >= 1024 and total >= 1024 else 0
        )  # unfiltered: the whole previous request
        expected_unfiltered += cached * 0.1 + (total - cached) * (1.25 if total >= 1024 else 1.0)
        previous = sum(counter.message(m) for m in prefix)
        assert step["tokens_cached"] + step["tokens_uncached"] == step["tokens_sent"]
    totals = printed["totals"]
    assert totals["unfiltered_cost"] == pytest.approx(expected_unfiltered, abs=0.1)
    assert totals["cost_ratio"] == round(totals["cost"] / totals["unfiltered_cost"], 4)
    assert totals["dearer"] == (totals["cost"] > totals["unfiltered_cost"])


def test_replay_flags_a_conversation_dearer_than_unfiltered(
    config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # polling 1 with a tight limit rewrites the prefix on almost every request: dearer under Anthropic prices
    args = ["replay", str(CORPUS_DIR / CONVERSATION), "--config", str(config_file), "--role", "worker"]
    assert main([*args, "--pricing", "anthropic"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert "DEARER than unfiltered;" in last


def test_replay_reads_pricing_from_a_file(
    config_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("{preset: anthropic, read: 0.5, write: 0.5}\n")
    args = [
        "replay",
        str(CORPUS_DIR / CONVERSATION),
        "--config",
        str(config_file),
        "--role",
        "worker",
        "--json",
    ]
    assert main([*args, "--pricing", str(prices)]) == 0
    assert json.loads(capsys.readouterr().out)["pricing"]["read"] == 0.5
    prices.write_text("{preset: anthropic, reed: 0.5}\n")
    assert main([*args, "--pricing", str(prices)]) == 1
    assert "--pricing" in capsys.readouterr().err


def test_replay_of_many_files_totals_the_tool_loops(capsys: pytest.CaptureFixture[str]) -> None:
    files = [str(CORPUS_DIR / name) for name in (CONVERSATION, "crewai-hierarchical-manager.json")]
    assert main(["replay", *files, "--role", "worker", "--tool-loops", "12", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert list(printed["files"]) == [files[0]]  # 9 messages: not a tool loop of 12
    assert printed["totals"]["conversations"] == 1
    assert printed["totals"]["cost"] == printed["files"][files[0]]["cost"]


@pytest.mark.parametrize("pricing", ["openai", "anthropic"])
def test_the_default_worker_chain_costs_at_most_0_6_of_unfiltered_on_every_tool_loop(
    pricing: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 18's target, with the command docs/cost.md gives: total <= x0.6, none dearer by over 2 %."""
    files = [str(path) for path in sorted(CORPUS_DIR.glob("*.json"))]
    assert (
        main(["replay", *files, "--role", "worker", "--tool-loops", "12", "--pricing", pricing, "--json"])
        == 0
    )
    printed = json.loads(capsys.readouterr().out)
    assert printed["totals"]["conversations"] >= 20
    assert printed["totals"]["cost_ratio"] <= 0.6
    assert {name: t["cost_ratio"] for name, t in printed["files"].items() if t["cost_ratio"] > 1.02} == {}


# --- a long conversation stays readable; evidence kept is drawn beside the cost (issues 23, 25) -----

LONG = "openhands-codeact-ponylang-ponyc-4588.json"


def long_replay_page() -> str:
    body = corpus_body(LONG)
    # a chain whose notices list facts, so the page draws every evidence class
    config = load_config(
        Path(__file__).resolve().parents[2] / "config" / "examples" / "last_n_observations.yaml"
    )
    result = asyncio.run(replay(Pipeline(config, TokenCounters()), body, Identity(role="researcher")))
    assert len(result.steps) >= 40
    return render_html(result, "long replay")


def test_the_page_labels_requests_and_ticks_round_shares() -> None:
    page = long_replay_page()
    chart = page[page.index('<svg id="chart"') : page.index("</svg>")]
    y_ticks = [float(t) for t in re.findall(r'text-anchor="end">([^<]+)%</text>', chart)]
    steps = {b - a for a, b in pairwise(y_ticks)}
    assert y_ticks[0] == 0 and len(steps) == 1 and steps.pop() in {10, 20, 25, 50, 100}, y_ticks
    assert 100 in y_ticks
    x_ticks = [int(t) for t in re.findall(r'class="xtick"[^>]*>(\d+)</text>', chart)]
    assert x_ticks[0] == 1 and len(x_ticks) >= 6 and x_ticks[-1] >= 45
    assert all(t % 5 == 0 for t in x_ticks[1:-1])


def test_the_evidence_chart_lists_the_lost_tokens_on_hover_and_in_the_table(config_file: Path) -> None:
    body = corpus_body("tau-bench-airline-task2-trial1.json")
    config = load_config(config_file)
    result = asyncio.run(replay(Pipeline(config, TokenCounters()), body, Identity(role="worker")))
    page = render_html(result, "replay")
    lost = next(s for s in result.steps if s.evidence_lost)
    assert (
        f"request {lost.request}: {lost.evidence_with_context} of {lost.evidence_needed} kept with their "
        f"context, {lost.evidence_kept} anywhere; without context: elided: {lost.evidence_context_lost[0][0]}"
    ) in page
    elided = " ".join(t for t, why in lost.evidence_context_lost if why == "elided")
    assert f'<td class="lost">elided: {elided}</td>' in page
    assert page.count('<g class="evidence"') == sum(1 for s in result.steps if s.evidence_needed)


def test_a_long_conversation_is_readable_in_a_real_browser(tmp_path: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("Debian's chromium is not installed here (.ci/run installs it)")
    page = tmp_path / "long.html"
    page.write_text(long_replay_page(), encoding="utf-8")
    shot = screenshot(browser, page, tmp_path, 1100)
    _, _, rows = png_rows(shot.read_bytes())
    decoded, box = rows_down_to_the_x_axis(rows)
    # the early requests of the sent series stand well off the x axis instead of lying flat under an
    # unfiltered line that grows tenfold later on
    left, top, right, bottom = box
    early = (left, top, left + (right - left) // 5, bottom)
    blue = [
        y
        for y in range(top, bottom)
        if colour_pixels(decoded, (early[0], y, early[2], y + 1), SERIES_COLOURS["tokens_sent"])
    ]
    assert blue and bottom - min(blue) > 0.25 * (bottom - top), (min(blue), bottom)
    # the evidence chart below it draws bars of evidence kept in context (green) and kept only in a
    # notice (light green; the default chain loses none here)
    rest = list(rows)
    below = (left, 0, right, len(rest))
    assert colour_pixels(rest, below, (0x2C, 0xA0, 0x2C)) >= 500
    assert colour_pixels(rest, below, (0xB5, 0xE3, 0xA8)) >= 500


def screenshot(browser: str, page: Path, tmp_path: Path, height: int) -> Path:
    shot = tmp_path / "shot.png"
    subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={shot}",
            f"--window-size=1000,{height}",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=90,
    )
    return shot


def test_compare_prints_the_frontier_of_several_chains_under_both_pricings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chains = {}
    for name, notice in (("lines", "lines"), ("facts", "facts")):
        path = tmp_path / f"{name}.yaml"
        path.write_text(WORKER_CONFIG.replace("polling: 1}", f"polling: 1, notice: {notice}}}"))
        chains[name] = str(path)
    files = [str(CORPUS_DIR / CONVERSATION), str(CORPUS_DIR / "tau-bench-airline-task2-trial1.json")]
    args = ["replay", *files, "--role", "worker", "--compare", chains["lines"], chains["facts"]]
    assert main([*args, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    lines, facts = printed["chains"]
    assert printed["conversations"] == 2 and set(lines["cost_ratio"]) == {"anthropic", "openai"}
    assert lines["evidence_share"] < facts["evidence_share"] == 1.0
    assert facts["frontier"]  # nothing keeps more evidence than all of it
    assert main(args) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[1].split()[:3] == ["config", "x", "anthropic"]
    assert any(line.startswith("* ") and "facts.yaml" in line for line in table)
