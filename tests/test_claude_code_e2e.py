"""The real Claude Code CLI through ``history-proxy serve`` on the worker role, in a loopback-only namespace.

``claude -p`` (the pinned npm release, installed once into ``.npm-clients/``, gitignored) runs a
two-call tool loop -- it reads a file with its ``Read`` tool, then answers -- against the proxy, whose
upstream is the scripted Anthropic recorder (``tests/corpus/recording/anthropic_recorder.py``). The
CLI, the proxy and the recorder run inside ``unshare -n`` with only ``lo`` up, so nothing can reach
any other address (tests/clients/claude_code_netns.py). The test checks that the turn completed and
what the upstream received: ``?beta=true`` and the ``anthropic-beta`` values, the system blocks and
every tool, the mid-conversation ``system`` message in place, the thinking block passed back, the
cache marks within the limit of 4 and in Anthropic's TTL order. Skips, with the reason, when npm
cannot install the CLI or the machine cannot make a network namespace.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.claude_code import DRIVER, INSTALL_TIMEOUT_S, claude_binary, netns_command

REPO = Path(__file__).resolve().parents[1]
SECRET = "The secret word is PINEAPPLE-4242."
BETA = "context-management-2025-06-27"

pytestmark = pytest.mark.timeout(INSTALL_TIMEOUT_S + 300)  # the first run installs the CLI (~400 MB)


def worker_config(ttl: str | None = "1h", context_management: str | None = None) -> str:
    """The default config's chains, its upstream the recorder (an Anthropic upstream with cache marks)."""
    config = yaml.safe_load((REPO / "config" / "default.yaml").read_text(encoding="utf-8"))
    upstream: dict[str, Any] = {"base_url": "UPSTREAM", "api": "anthropic", "cache_control": True}
    if context_management is not None:
        upstream["context_management"] = context_management
    config["upstreams"] = {"claude": upstream}
    config["routes"] = []
    config["cache_control"] = {"last_n_messages": 2, **({"ttl": ttl} if ttl else {})}
    return yaml.safe_dump(config, sort_keys=False)


def run_claude(
    tmp_path: Path, runs: list[tuple[list[str], str]], config: str | None = None, **spec: Any
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The CLI's runs (exit code, stdout, stderr) and the upstream's requests, all inside the namespace."""
    netns = netns_command()
    binary = claude_binary()
    (tmp_path / "note.txt").write_text(SECRET + "\n", encoding="utf-8")
    spec_file = tmp_path / "spec.json"
    config = config if config is not None else worker_config()
    spec_file.write_text(
        json.dumps({"claude": str(binary), "work": str(tmp_path), "config": config, "runs": runs, **spec}),
        encoding="utf-8",
    )
    done = subprocess.run(
        [*netns, sys.executable, str(DRIVER), str(spec_file)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    upstream = tmp_path / "upstream.jsonl"
    lines = upstream.read_text(encoding="utf-8").splitlines() if upstream.exists() else []
    return results, [json.loads(line) for line in lines]


def access_lines(work: Path) -> list[dict[str, Any]]:
    """The proxy's access lines (one per client request) from the run in ``work``."""
    lines = (work / "proxy.log").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines if line.startswith("{")]
    return [r for r in records if r.get("logger") == "history_proxy.access"]


def ttl_order_holds(body: dict[str, Any]) -> bool:
    """Anthropic's rule: no breakpoint with a longer TTL after one with a shorter TTL (tools, system, messages)."""
    seconds: list[int] = []

    def walk(items: Any) -> None:
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict):
                mark = item.get("cache_control")
                if mark:
                    seconds.append(3600 if mark.get("ttl") == "1h" else 300)
                walk(item.get("content"))

    walk(body.get("tools"))
    walk(body.get("system"))
    walk(body.get("messages"))
    return all(a >= b for a, b in itertools.pairwise(seconds)) and len(seconds) <= 4


def test_claude_code_runs_a_tool_loop_through_the_worker_role(tmp_path: Path) -> None:
    results, seen = run_claude(
        tmp_path,
        [
            (
                ["--allowedTools", "Read"],
                f"Read the file FILE:{tmp_path}/note.txt and tell me the secret word.",
            ),
            (["--continue"], "Thanks. Now say goodbye."),
        ],
    )
    first, second = results
    assert first["returncode"] == 0, first["stderr"][-1000:]
    assert f"DONE: {SECRET}" in first["stdout"]  # the tool loop completed: Read ran, its result came back
    assert second["returncode"] == 0, second["stderr"][-1000:]
    calls = [r for r in seen if r["path"] == "/v1/messages"]
    loop = [r["body"] for r in calls if r["body"].get("tools")]
    assert len(loop) >= 3, [r["path"] for r in seen]  # tool_use, final answer, the second turn
    for record in calls:
        assert record["query"] == "beta=true"
        betas = record["headers"]["anthropic-beta"].split(",")
        assert "claude-code-20250219" in betas and len(betas) >= 4  # every value passed through
        assert "x-agent-role" not in record["headers"]  # identity stays at the proxy
    for body in loop:
        # a local upstream's default mode is emulate: Claude Code's edits applied here, the field not sent
        assert body["thinking"]["type"] == "adaptive" and "context_management" not in body
        assert len(body["system"]) == len(loop[0]["system"]) >= 2
        assert "Read" in [tool["name"] for tool in body["tools"]] and body["tools"] == loop[0]["tools"]
        roles = [m["role"] for m in body["messages"]]
        assert "system" in roles  # Claude Code's mid-conversation system message, kept
        assert ttl_order_holds(body), json.dumps(body)[:3000]
    first_call, answer_call = loop[0], loop[1]
    assert [m["role"] for m in first_call["messages"]][:2] == ["user", "system"]  # in place
    assert "FILE:" in json.dumps(first_call["messages"][0])  # the task
    kinds = [
        b.get("type") for m in answer_call["messages"] for b in m["content"] if isinstance(m["content"], list)
    ]
    assert "thinking" in kinds and "tool_use" in kinds and "tool_result" in kinds  # the agent's own work
    assert SECRET in json.dumps(answer_call["messages"])
    last = loop[-1]
    assert "say goodbye" in json.dumps(last["messages"][-1])  # the second turn's task
    assert [m["role"] for m in last["messages"]][:2] == ["user", "system"]  # still in place
    shaped = [line for line in access_lines(tmp_path) if line["path"] == "/v1/messages"]
    assert len(shaped) == len(calls) and all(line["role"] == "worker" for line in shaped)
    chain = ["remove_regex", "worker_view", "last_n_observations", "token_limiter"]  # config/default.yaml
    assert all([f["type"] for f in line["filters"]] == chain for line in shaped)


def test_a_429_costs_no_more_upstream_calls_than_claude_codes_own_tries(tmp_path: Path) -> None:
    results, seen = run_claude(tmp_path, [([], "Say hello.")], fail_first=2)
    assert results[0]["returncode"] == 0, results[0]["stderr"][-1000:]
    calls = [r for r in seen if r["path"] == "/v1/messages"]
    assert len(calls) == 3  # two refused, one answered
    # Claude Code retries in its own loop (every try says x-stainless-retry-count: 0): the proxy's access
    # line of each of its tries must show one upstream attempt, no retry of the proxy's stacked on it
    tries = [line for line in access_lines(tmp_path) if line["path"] == "/v1/messages"]
    assert [line["status"] for line in tries] == [429, 429, 200]
    assert [line["attempts"] for line in tries] == [1, 1, 1]


def streamed_context_management(work: Path) -> list[Any]:
    """The ``context_management`` of every ``/v1/messages`` answer Claude Code got (through the tap)."""
    found = []
    for line in (work / "answers.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if not record["path"].startswith("/v1/messages?") or record["status"] != 200:
            continue
        events = [json.loads(x[5:]) for x in record["body"].splitlines() if x.startswith("data:")]
        deltas = [e for e in events if e.get("type") == "message_delta"]
        found.append(deltas[-1].get("context_management") if deltas else None)
    return found


@pytest.mark.parametrize(
    ("profile", "mode"), [("strict", None), ("honour", "native")], ids=["strict-emulated", "honouring-native"]
)
def test_claude_codes_context_management_works_on_a_strict_upstream_and_on_one_that_honours_it(
    tmp_path: Path, profile: str, mode: str | None
) -> None:
    prompt = f"Read the file FILE:{tmp_path}/note.txt and tell me the secret word."
    results, seen = run_claude(
        tmp_path,
        [(["--allowedTools", "Read"], prompt)],
        config=worker_config(context_management=mode),
        profile=profile,
        tap=True,
    )
    assert results[0]["returncode"] == 0, results[0]["stderr"][-1000:]
    assert f"DONE: {SECRET}" in results[0]["stdout"]  # the tool loop completed
    loop = [r for r in seen if r["path"] == "/v1/messages" and r["body"].get("tools")]
    assert len(loop) >= 2
    for record in loop:
        betas = record["headers"].get("anthropic-beta", "").split(",")
        if profile == "strict":  # emulated: neither the field nor its beta reaches the upstream
            assert "context_management" not in record["body"] and BETA not in betas
        else:  # native: the field as Claude Code sent it, the beta with it
            assert record["body"]["context_management"]["edits"][0]["type"] == "clear_thinking_20251015"
            assert BETA in betas
    # Claude Code's edit is clear_thinking with keep "all": the loop's thinking block goes back whole
    kinds = [b.get("type") for m in loop[1]["body"]["messages"] for b in m["content"] if isinstance(b, dict)]
    assert "thinking" in kinds
    answers = streamed_context_management(tmp_path)
    assert len(answers) >= 2 and all(answer is not None for answer in answers), answers
    assert all(isinstance(answer["applied_edits"], list) for answer in answers)
    notes = [line["notes"] for line in access_lines(tmp_path) if line["path"] == "/v1/messages"]
    emulated = ["context_management:emulated" in (n or []) for n in notes]
    assert any(emulated) if profile == "strict" else not any(emulated)
