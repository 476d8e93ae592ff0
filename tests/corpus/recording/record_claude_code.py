#!/usr/bin/env python3
"""Record what the real Claude Code CLI sends, scrubbed of its closed-source text, as a Messages fixture.

Runs the pinned CLI (tests/test_claude_code_e2e.py installs it into ``.npm-clients/``) straight
against the scripted Anthropic recorder, inside a loopback-only network namespace
(tests/clients/claude_code_netns.py with ``"direct": true``), for three turns of one session:

1. read a file with the ``Read`` tool, then answer (a tool loop, with a ``thinking`` block);
2. ``--continue``: read a second file, then answer (another tool loop);
3. ``--continue``: a question answered with text alone.

Every request body is kept in order, with Claude Code's own text replaced by placeholders (it is not
ours to publish): the system blocks, the mid-conversation ``system`` messages, the
``<system-reminder>`` texts, every tool's description and the descriptions inside its input schema.
Structure stays as sent: block types, fields, cache marks, betas, tool names and schemas.

Run: ``.venv/bin/python tests/corpus/recording/record_claude_code.py`` (as root, or where
``unshare -n`` works); it writes ``tests/corpus/messages/claude-code-<version>.json``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))
from tests.support.claude_code import CLAUDE_CODE_VERSION, DRIVER, claude_binary, netns_command  # noqa: E402

WORKDIR = "/work/project"
"""Where the recorded session seems to have run (the temporary directory's path is replaced)."""
KEPT_HEADERS = ("anthropic-beta", "anthropic-version", "user-agent", "x-app", "x-stainless-retry-count")


def placeholder(what: str, text: str) -> str:
    return f"[{what} of Claude Code {CLAUDE_CODE_VERSION}: {len(text)} characters, replaced]"


def scrub_text_blocks(content: Any, what: str) -> Any:
    """``content`` (a string or blocks) with every text replaced by a placeholder of its size."""
    if isinstance(content, str):
        return placeholder(what, content)
    return [
        {**b, "text": placeholder(what, b["text"])} if isinstance(b, dict) and isinstance(b.get("text"), str) else b
        for b in content
    ]


def scrub_schema(schema: Any) -> Any:
    """A JSON schema with every ``description`` replaced (names, types and structure kept)."""
    if isinstance(schema, dict):
        return {
            k: placeholder("a schema description", v) if k == "description" and isinstance(v, str) else scrub_schema(v)
            for k, v in schema.items()
        }
    if isinstance(schema, list):
        return [scrub_schema(v) for v in schema]
    return schema


def scrub_message(message: dict[str, Any]) -> dict[str, Any]:
    if message.get("role") not in ("user", "assistant"):
        return {**message, "content": scrub_text_blocks(message.get("content"), "a system message")}
    content = message.get("content")
    if not isinstance(content, list):
        return message
    blocks = []
    for block in content:
        text = block.get("text") if isinstance(block, dict) else None
        if isinstance(text, str) and text.lstrip().startswith("<system-reminder>"):
            block = {**block, "text": "<system-reminder>" + placeholder("a reminder", text) + "</system-reminder>"}
        blocks.append(block)
    return {**message, "content": blocks}


def scrub(body: dict[str, Any]) -> dict[str, Any]:
    out = dict(body)
    if "system" in out:
        out["system"] = scrub_text_blocks(out["system"], "a system prompt block")
    out["tools"] = [
        {**t, "description": placeholder("a tool description", t.get("description", "")), **(
            {"input_schema": scrub_schema(t["input_schema"])} if "input_schema" in t else {}
        )}
        for t in out.get("tools") or []
    ]  # fmt: skip
    out["messages"] = [scrub_message(m) for m in out.get("messages") or []]
    if "metadata" in out:
        out["metadata"] = {"user_id": "user_placeholder"}
    return out


def main() -> int:
    binary = claude_binary()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "note.txt").write_text("The secret word is PINEAPPLE-4242.\n", encoding="utf-8")
        (work / "todo.txt").write_text("1. ship the parser\n2. write the docs\n", encoding="utf-8")
        runs = [
            (["--allowedTools", "Read"], f"Read the file FILE:{work}/note.txt and tell me the secret word."),
            (["--continue", "--allowedTools", "Read"], f"Now read FILE:{work}/todo.txt and tell me what comes first."),
            (["--continue"], "Thanks. Which file did you read first?"),
        ]
        spec = {"claude": str(binary), "work": str(work), "config": "", "runs": runs, "direct": True}
        (work / "spec.json").write_text(json.dumps(spec), encoding="utf-8")
        subprocess.run([*netns_command(), sys.executable, str(DRIVER), str(work / "spec.json")], check=True)
        results = json.loads((work / "results.json").read_text(encoding="utf-8"))
        assert all(r["returncode"] == 0 for r in results), results
        records = [json.loads(line) for line in (work / "upstream.jsonl").read_text(encoding="utf-8").splitlines()]
        requests = [
            {
                "path": r["path"],
                "query": r["query"],
                "headers": {k: r["headers"][k] for k in KEPT_HEADERS if k in r["headers"]},
                "body": scrub(r["body"]),
            }
            for r in records
            if r["path"] == "/v1/messages"
        ]
        text = json.dumps(requests, ensure_ascii=False).replace(str(work), WORKDIR)
    fixture = {
        "client": "Claude Code",
        "version": CLAUDE_CODE_VERSION,
        "surface": "messages",
        "recorded_with": "tests/corpus/recording/record_claude_code.py",
        "requests": json.loads(text),
    }
    out = REPO / "tests" / "corpus" / "messages" / f"claude-code-{CLAUDE_CODE_VERSION}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(fixture, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{out}: {len(requests)} requests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
