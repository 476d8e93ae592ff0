"""From measured segments to figures: paired differences, the markdown table, the result files.

A cell's segments are run in a palindrome (direct, proxy, proxy, direct, ...), so the k-th segment
of a target and the k-th direct segment sit symmetrically around the middle and linear drift
cancels. Added latency is the median over those pairs of (target figure - direct figure).
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DIRECT = "direct"
RESULTS_DIR = Path(__file__).resolve().parent / "results"


def paired_difference(direct: Sequence[dict[str, Any]], target: Sequence[dict[str, Any]], key: str) -> float:
    """Median over the k-th segment pairs of ``target[k][key] - direct[k][key]`` (NaN without pairs)."""
    differences = [
        t[key] - d[key]
        for d, t in zip(direct, target, strict=False)
        if isinstance(d.get(key), float | int)
        and isinstance(t.get(key), float | int)
        and not math.isnan(d[key])
        and not math.isnan(t[key])
    ]
    return statistics.median(differences) if differences else math.nan


def _pooled(segments: Sequence[dict[str, Any]], key: str, how: str = "median") -> float:
    values = [s[key] for s in segments if isinstance(s.get(key), float | int) and not math.isnan(s[key])]
    if not values:
        return math.nan
    if how == "max":
        return float(max(values))
    if how == "sum":
        return float(sum(values))
    return float(statistics.median(values))


def summarise_cell(segments: dict[str, list[dict[str, Any]]], stream: bool) -> dict[str, Any]:
    """Per target: its own figures and, for every target but direct, what it adds over direct."""
    direct = segments.get(DIRECT, [])
    figures: dict[str, Any] = {}
    for name, runs in segments.items():
        entry: dict[str, Any] = {
            "p50_ms": _pooled(runs, "p50_ms"),
            "p99_ms": _pooled(runs, "p99_ms"),
            "throughput_rps": _pooled(runs, "throughput_rps"),
            "cpu_ms_per_request": _pooled(runs, "cpu_ms_per_request"),
            "rss_peak_mb": _pooled(runs, "rss_peak_kb", "max") / 1024,
            "requests": int(_pooled(runs, "requests", "sum")),
            "errors": int(_pooled(runs, "errors", "sum")),
            "segments": len(runs),
        }
        if stream:
            entry["ttfb_p50_ms"] = _pooled(runs, "ttfb_p50_ms")
        if name != DIRECT:
            entry["added_p50_ms"] = paired_difference(direct, runs, "p50_ms")
            entry["added_p99_ms"] = paired_difference(direct, runs, "p99_ms")
            if stream:
                entry["added_ttfb_p50_ms"] = paired_difference(direct, runs, "ttfb_p50_ms")
        figures[name] = entry
    return figures


def _target_label(name: str) -> str:
    """``history-proxy/worker/messages`` -> ``history-proxy /v1/messages`` (the chain has its own column)."""
    parts = name.split("/")
    return f"{parts[0]} /v1/{parts[2]}" if len(parts) > 2 else parts[0]


def _number(value: Any, digits: int = 2, signed: bool = False) -> str:
    if not isinstance(value, float | int) or math.isnan(value):
        return "-"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


TABLE_HEAD = (
    "| messages | mode | conc. | target | chain | added p50 ms | added p99 ms | added TTFB ms "
    "| rps | direct rps | CPU ms/req | peak RSS MB | errors |\n"
    "|---:|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def markdown_table(cells: Sequence[dict[str, Any]]) -> str:
    """One row per cell and target (direct excluded: it is the baseline of every row)."""
    rows = [TABLE_HEAD]
    for cell in cells:
        figures = cell["figures"]
        direct = figures.get(DIRECT, {})
        for name, entry in figures.items():
            if name == DIRECT:
                continue
            rows.append(
                f"| {cell['messages']} | {'stream' if cell['stream'] else 'non-stream'} | {cell['concurrency']} "
                f"| {_target_label(name)} | {entry.get('chain') or '-'} "
                f"| {_number(entry.get('added_p50_ms'), 2, True)} "
                f"| {_number(entry.get('added_p99_ms'), 2, True)} "
                f"| {_number(entry.get('added_ttfb_p50_ms'), 2, True) if cell['stream'] else '-'} "
                f"| {_number(entry.get('throughput_rps'), 0)} | {_number(direct.get('throughput_rps'), 0)} "
                f"| {_number(entry.get('cpu_ms_per_request'), 3)} | {_number(entry.get('rss_peak_mb'), 0)} "
                f"| {entry.get('errors', 0)} |"
            )
    return "\n".join(rows)


def markdown(result: dict[str, Any]) -> str:
    """The whole report: what ran where, the table, and the slow-stream memory figure if measured."""
    meta = result.get("meta", {})
    lines = [
        f"# history-proxy benchmark, {meta.get('started_utc', '?')}",
        "",
        (
            f"- machine: {meta.get('cpu_model', '?')}, {meta.get('cpus', '?')} CPUs; python {meta.get('python', '?')}; "
            f"commit {meta.get('commit', '?')}"
        ),
        f"- pinning: {meta.get('pinning', 'none')}",
        (
            f"- per segment: {meta.get('segment_seconds', '?')} s or {meta.get('segment_requests', '?')} requests; "
            f"{meta.get('rounds', '?')} round(s) of {meta.get('order', 'A B B A')}; streams: "
            f"{meta.get('stream_chunks', '?')} chunks, {meta.get('stream_chunk_delay_ms', '?')} ms apart"
        ),
        f"- targets: {', '.join(meta.get('targets', [])) or '?'}",
    ]
    if meta.get("note"):
        lines.append(f"- note: {meta['note']}")
    lines += [
        "",
        (
            "Added = median over interleaved pairs of (target - direct to the mock upstream). "
            "CPU ms/req = target process tree utime+stime per request; peak RSS = highest VmRSS sampled "
            "during the cell (VmHWM where sampling missed it)."
        ),
        "",
        markdown_table(result.get("cells", [])),
    ]
    slow = result.get("slow_streams")
    if slow:
        lines += [
            "",
            (
                f"Slow streams: {slow.get('streams')} concurrent streams of {slow.get('seconds_per_stream')} s "
                f"through the proxy ({slow.get('chain')} chain): peak RSS {_number(slow.get('rss_peak_mb'), 0)} MB, "
                f"{slow.get('ok')} completed, {slow.get('errors')} errors."
            ),
        ]
    return "\n".join(lines) + "\n"


def jsonable(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def write_results(
    result: dict[str, Any], directory: Path = RESULTS_DIR, stamp: str | None = None
) -> tuple[Path, Path]:
    """Write ``<stamp>.json`` and ``<stamp>.md`` and refresh ``latest.md``; returns the two paths."""
    directory.mkdir(parents=True, exist_ok=True)
    stamp = stamp or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    json_path = directory / f"{stamp}.json"
    md_path = directory / f"{stamp}.md"
    json_path.write_text(json.dumps(jsonable(result), indent=2) + "\n", encoding="utf-8")
    text = markdown(result)
    md_path.write_text(text, encoding="utf-8")
    (directory / "latest.md").write_text(text, encoding="utf-8")
    return json_path, md_path
