"""Smoke tests of the benchmark harness: bodies, load generator, report. No timing asserts."""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench import procs
from bench.bodies import SIZES, corpus_bodies, replay_prefixes, synthetic_messages
from bench.floor import UPSTREAM_ENV as FLOOR_UPSTREAM_ENV
from bench.loadgen import Target, build_request, percentile, run_load
from bench.report import paired_difference, summarise_cell, write_results
from bench.run import select_cells
from history_proxy.core.invariants import invariant_errors
from history_proxy.pipeline.run import request_messages

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("size", SIZES)
def test_synthetic_conversations_are_valid_requests_of_exactly_the_asked_size(size: int) -> None:
    messages = synthetic_messages(size)
    assert len(messages) == size
    assert invariant_errors(messages) == {}
    assert request_messages({"messages": messages}) == messages
    assert [m["role"] for m in messages[:2]] == ["system", "user"]
    assert any(len(m.get("tool_calls") or []) > 1 for m in synthetic_messages(100)), "some parallel calls"


def test_synthetic_conversations_are_deterministic_and_carry_no_annotations() -> None:
    assert synthetic_messages(100) == synthetic_messages(100)
    assert not any({"tags", "message_type", "phase_id", "agent"} & m.keys() for m in synthetic_messages(400))


def test_small_sizes_never_leave_a_tool_call_unanswered() -> None:
    for size in range(2, 40):
        assert invariant_errors(synthetic_messages(size)) == {}, size


def test_corpus_bodies_are_valid_and_replay_ends_each_request_before_an_assistant_message() -> None:
    bodies = corpus_bodies()
    assert len(bodies) >= 30
    for name, body in bodies.items():
        assert invariant_errors(body["messages"]) == {}, name
        prefixes = replay_prefixes(body["messages"])
        assert prefixes[-1] == body["messages"]
        for prefix in prefixes[:-1]:
            assert body["messages"][len(prefix)]["role"] == "assistant"


@pytest.fixture
def fast_upstream(tmp_path: Path) -> Iterator[int]:
    port = procs.free_port()
    command = [sys.executable, "-m", "bench.fast_upstream", "--port", str(port), "--chunks", "3"]
    with procs.running(procs.start("upstream", command, tmp_path, cwd=ROOT)) as started:
        procs.wait_ready(started, port, "/v1/models", timeout_s=20)
        yield port


def test_loadgen_measures_every_request_against_the_fast_upstream(fast_upstream: int) -> None:
    target = Target("direct", "127.0.0.1", fast_upstream)
    request = build_request(target, b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}')
    result = asyncio.run(run_load(target, [request], concurrency=2, max_requests=20, max_seconds=10))
    summary = result.summary()
    assert (summary["ok"], summary["errors"], summary["statuses"]) == (20, 0, {"200": 20})
    assert all(latency > 0 for latency in result.latencies_ms)
    assert summary["throughput_rps"] > 0


def test_loadgen_records_first_byte_before_the_end_of_a_stream(fast_upstream: int) -> None:
    target = Target("direct", "127.0.0.1", fast_upstream)
    body = b'{"model": "m", "stream": true, "messages": []}'
    request = build_request(target, body, [("x-bench-chunks", "4"), ("x-bench-chunk-delay-ms", "20")])
    result = asyncio.run(run_load(target, [request], concurrency=1, max_requests=3, max_seconds=10))
    assert result.ok == 3
    assert all(first < total for first, total in zip(result.ttfb_ms, result.latencies_ms, strict=True))
    assert result.body_bytes / result.ok > 4 * len(b"data: ")


def test_the_floor_forwards_whole_and_streamed_answers_from_the_upstream(
    fast_upstream: int, tmp_path: Path
) -> None:
    port = procs.free_port()
    command = [
        sys.executable,
        "-m",
        "uvicorn",
        "bench.floor:app",
        "--port",
        str(port),
        "--log-level",
        "warning",
    ]
    env = {**os.environ, FLOOR_UPSTREAM_ENV: f"http://127.0.0.1:{fast_upstream}"}
    with procs.running(procs.start("floor", command, tmp_path, env=env, cwd=ROOT)) as started:
        procs.wait_ready(started, port, "/healthz", timeout_s=20)
        target = Target("floor", "127.0.0.1", port)
        whole = build_request(target, b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}')
        streamed = build_request(target, b'{"model": "m", "stream": true, "messages": []}')
        for request in (whole, streamed):
            result = asyncio.run(run_load(target, [request], concurrency=2, max_requests=6, max_seconds=10))
            assert (result.ok, result.errors) == (6, 0)
        direct = Target("direct", "127.0.0.1", fast_upstream)
        request = build_request(direct, b'{"stream": true}')
        one = asyncio.run(run_load(direct, [request], concurrency=1, max_requests=1, max_seconds=5))
        assert result.body_bytes == 6 * one.body_bytes  # every streamed byte relayed


def test_compare_runs_two_trees_interleaved_and_measures_memory_with_fresh_proxies(tmp_path: Path) -> None:
    from bench.compare import main as compare

    argv = [str(ROOT), str(ROOT), "--cells", "20-nonstream-c1", "--chains", "passthrough", "--seconds", "0.2"]
    argv += ["--memory", "1", "--slow-streams", "8", "--slow-chunk-delay-ms", "5", "--no-pin"]
    assert compare([*argv, "--results", str(tmp_path)]) == 0
    (written,) = tmp_path.glob("compare-*.json")
    result = json.loads(written.read_text())
    assert result["order"] == "old new new old old new"
    (row,) = result["rows"]
    assert (row["cell"], row["chain"]) == ("20-nonstream-c1", "passthrough")
    for tree in ("old", "new"):
        assert row[tree]["segments"] == 3 and row[tree]["errors"] == 0 and row[tree]["rps"] > 0
        (run,) = result["memory"][tree]
        assert (run["ok"], run["errors"]) == (8, 0) and run["rss_peak_mb"] > 10


def test_compare_with_surfaces_measures_each_cell_as_chat_responses_and_messages(tmp_path: Path) -> None:
    from bench.compare import main as compare

    argv = [str(ROOT), str(ROOT), "--cells", "20-nonstream-c1", "--chains", "worker", "--seconds", "0.2"]
    assert compare([*argv, "--surfaces", "--no-pin", "--results", str(tmp_path)]) == 0
    (written,) = tmp_path.glob("compare-*.json")
    rows = json.loads(written.read_text())["rows"]
    assert [row["surface"] for row in rows] == ["chat/completions", "responses", "messages"]
    for row in rows:
        for tree in ("old", "new"):
            assert row[tree]["errors"] == 0 and row[tree]["rps"] > 0


def test_the_hostile_loads_run_and_report_memory_statuses_and_stalls(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from bench.hostile import main as hostile

    def run(*argv: str) -> dict[str, Any]:
        assert hostile(["--tree", str(ROOT), *argv]) == 0
        return dict(json.loads(capsys.readouterr().out.splitlines()[-1]))

    memo = run("memo", "--requests", "3", "--size", "200000")
    assert memo["rss_after_mb"] > 10 and memo["memo_gauge_mb"] >= 0.4  # each holds its 200 KB opening
    inflight = run("inflight", "--concurrent", "3", "--size", "1000000", "--budget", "1500000")
    assert inflight["statuses"].get("529", 0) >= 1 and inflight["statuses"].get("200", 0) >= 1
    capture = run("capture", "--messages", "20", "--size", "1000")
    assert capture["capture"] is True and capture["healthz_worst_s"] > 0


def test_compare_refuses_a_directory_without_the_project(tmp_path: Path) -> None:
    from bench.compare import main as compare

    with pytest.raises(SystemExit):
        compare([str(ROOT), str(tmp_path)])


def test_loadgen_counts_an_unreachable_target_as_errors_not_latencies() -> None:
    target = Target("nowhere", "127.0.0.1", procs.free_port())
    result = asyncio.run(
        run_load(target, [build_request(target, b"{}")], concurrency=2, max_requests=5, max_seconds=2)
    )
    assert result.ok == 0 and result.errors == 2


def test_percentile_interpolates_and_is_nan_for_no_values() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 50) == 3.0
    assert percentile([0.0, 10.0], 99) == pytest.approx(9.9)
    assert math.isnan(percentile([], 50))


def test_added_latency_is_the_median_of_the_interleaved_pair_differences() -> None:
    direct = [{"p50_ms": 1.0}, {"p50_ms": 2.0}, {"p50_ms": 1.0}]
    proxy = [{"p50_ms": 1.5}, {"p50_ms": 2.6}, {"p50_ms": 3.0}]
    assert paired_difference(direct, proxy, "p50_ms") == pytest.approx(0.6)


def _segment(p50: float, p99: float, rps: float) -> dict[str, float]:
    return {
        "p50_ms": p50,
        "p99_ms": p99,
        "ttfb_p50_ms": p50 / 2,
        "throughput_rps": rps,
        "requests": 100,
        "errors": 0,
        "cpu_ms_per_request": 0.4,
        "rss_peak_kb": 81920,
    }


def test_report_writes_json_and_a_markdown_table_from_a_tiny_result(tmp_path: Path) -> None:
    segments = {
        "direct": [_segment(0.20, 0.40, 4000), _segment(0.22, 0.42, 3900)],
        "history-proxy/worker": [_segment(0.70, 1.90, 1200), _segment(0.72, 1.92, 1150)],
    }
    figures = summarise_cell(segments, stream=True)
    figures["history-proxy/worker"]["chain"] = "worker"
    cell = {"id": "100-stream-c1", "messages": 100, "stream": True, "concurrency": 1, "figures": figures}
    result = {"meta": {"started_utc": "2026-01-01T00:00:00Z", "targets": list(segments)}, "cells": [cell]}
    json_path, md_path = write_results(result, tmp_path, stamp="test")
    table = md_path.read_text()
    assert json_path.exists() and (tmp_path / "latest.md").read_text() == table
    row = next(line for line in table.splitlines() if line.startswith("| 100 |"))
    assert "| stream | 1 | history-proxy | worker | +0.50 | +1.50 | +0.25 |" in row
    assert "| 80 |" in row  # peak RSS in MB


def test_cells_are_chosen_by_glob_over_their_ids() -> None:
    assert [c.id for c in select_cells(["100-*-c1"])] == ["100-nonstream-c1", "100-stream-c1"]
    assert len(select_cells(["*"])) == 18


def test_the_tricks_ab_measures_both_variants_and_restores_the_trick() -> None:
    from bench import tricks
    from history_proxy.filters.base import Filter

    trick = Filter.private
    figures = tricks.private_reads(rounds=1, repeats=2)
    assert set(figures) == {"remove_regex", "last_n_observations"}
    assert all(v["trick"] > 0 and v["plain"] > 0 for v in figures.values())
    assert Filter.private is trick
