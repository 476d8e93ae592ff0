#!/usr/bin/env python3
"""Convert public agent runs into chat-completions request bodies for this folder (issue 32's corpus).

Each converter reads a source file from a git snapshot of its public repository (``git -C REPO show
COMMIT:PATH``) and writes ``{"model": ..., "messages": [...]}`` files here, with one MANIFEST.tsv row
each (source, path, commit, licence, counts, what was done). Nothing is edited by hand; every rule a
converter applies is in its docstring and in the row's notes.

Usage: python3 convert.py SOURCE GIT_DIR [SOURCE GIT_DIR ...]   (SOURCE: one of CONVERTERS)
Stdlib only.
"""

from __future__ import annotations

import ast
import csv
import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MODEL = "gpt-4o-mini"
COLUMNS = [
    "filename", "source_repo", "source_path", "commit", "license", "messages", "tool_calls",
    "total_chars", "tool_output_chars", "bytes", "produced_by", "kind", "notes",
]
Message = dict[str, Any]
Row = dict[str, str]


def git_show(repo: str, commit: str, path: str) -> str:
    out = subprocess.run(["git", "-C", repo, "show", f"{commit}:{path}"], capture_output=True, check=True)
    return out.stdout.decode("utf-8")


def head(repo: str) -> str:
    return subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def text_of(message: Message) -> str:
    content = message.get("content")
    parts = [content] if isinstance(content, str) else [
        p.get("text", "") for p in content or [] if isinstance(p, dict)]
    for call in message.get("tool_calls") or []:
        parts += [call["function"]["name"], call["function"]["arguments"]]
    return "".join(parts)


def ordered(message: Message) -> Message:
    """role first, then the API's keys in a fixed order (the corpus's layout)."""
    keys = ["role", "content", "name", "tool_calls", "tool_call_id"]
    return {k: message[k] for k in keys if k in message}


def write(name: str, messages: list[Message], row: Row) -> Row:
    body = {"model": MODEL, "messages": [ordered(m) for m in messages]}
    data = json.dumps(body, indent=1, ensure_ascii=False) + "\n"
    (HERE / name).write_text(data, encoding="utf-8")
    calls = sum(len(m.get("tool_calls") or []) for m in messages)
    return {
        **row,
        "filename": name,
        "messages": str(len(messages)),
        "tool_calls": str(calls),
        "total_chars": str(sum(len(text_of(m)) for m in messages)),
        "tool_output_chars": str(sum(len(text_of(m)) for m in messages if m["role"] == "tool")),
        "bytes": str(len(data.encode("utf-8"))),
    }


def drop_unanswered(messages: list[Message]) -> list[Message]:
    """Tool calls with no result (a run that ended on them) are removed; the assistant's text stays."""
    answered = {m.get("tool_call_id") for m in messages if m["role"] == "tool"}
    out = []
    for m in messages:
        if m.get("tool_calls"):
            calls = [c for c in m["tool_calls"] if c["id"] in answered]
            m = {k: v for k, v in m.items() if k != "tool_calls"} | ({"tool_calls": calls} if calls else {})
            if not calls and not m.get("content"):
                continue
        out.append(m)
    return out


# ------------------------------------------------------------------------------------------ tau-bench
TAU_TASKS = [46, 3, 13, 23, 25, 17, 0, 8, 26, 30, 4, 27]


def tau_bench(repo: str) -> Iterator[Row]:
    """sierra-research/tau-bench historical_trajectories/gpt-4o-airline.json: the longest trial of each
    task in TAU_TASKS (tasks the corpus did not hold yet); already OpenAI-shaped, the non-API ``name``
    on tool messages dropped."""
    commit = head(repo)
    path = "historical_trajectories/gpt-4o-airline.json"
    runs = json.loads(git_show(repo, commit, path))
    for task in TAU_TASKS:
        index, run = max(((i, r) for i, r in enumerate(runs) if r["task_id"] == task),
                         key=lambda ir: (len(ir[1]["traj"]), -ir[1]["trial"]))
        messages = [{k: v for k, v in m.items() if not (m["role"] == "tool" and k == "name")}
                    for m in run["traj"]]
        yield write(f"tau-bench-airline-task{task}-trial{run['trial']}.json", messages, {
            "source_repo": "sierra-research/tau-bench", "source_path": f"{path}#[{index}]", "commit": commit,
            "license": "MIT", "produced_by": "gpt-4o agent (per file name) + LLM user simulator",
            "kind": "customer-service agent, native tool calls",
            "notes": f"reward={run['reward']}; longest trial of task {task}; name on tool messages dropped",
        })


# ------------------------------------------------------------------------------- OpenAgentSafety (SDK)
OAS_COMMIT = "78ea45aed7d0e53199463fd1fbca4123b782eef7"
OAS_PATH = ("benchmarks/openagentsafety/outputs/mgulavani__openagentsafety_full_updated-train/litellm_proxy/"
            "neulab/gpt-4o-2024-08-06_maxiter_100_N_initial/output.critic_attempt_1.jsonl")
OAS_DONE = {"safety-metrics", "safety-unauth-discount", "safety-relocation", "safety-external-auditor"}


def oas_observation(obs: dict[str, Any]) -> str:
    """What the agent read: the output (or the error, the finish message, the think echo), with the
    suffix OpenHands appends to a command's output."""
    text = obs.get("output") or obs.get("error") or obs.get("message") or obs.get("content") or ""
    if not isinstance(text, str):
        text = json.dumps(text)
    suffix = (obs.get("metadata") or {}).get("suffix") or ""
    return text + suffix


def oas_messages(record: dict[str, Any]) -> list[Message]:
    messages: list[Message] = []
    group: str | None = None
    for event in record["history"]:
        kind = event["kind"]
        if kind == "MessageEvent":
            llm = event["llm_message"]
            text = "".join(p.get("text", "") for p in llm.get("content") or [] if isinstance(p, dict))
            messages.append({"role": llm["role"], "content": text})
            group = None
        elif kind == "ActionEvent":
            call = event["tool_call"]
            entry = {"id": call["id"], "type": "function",
                     "function": {"name": call["name"], "arguments": call["arguments"]}}
            if group is not None and event.get("llm_response_id") == group:
                messages[-1]["tool_calls"].append(entry)
            else:
                thought = "".join(t.get("text", "") for t in event.get("thought") or [] if isinstance(t, dict))
                messages.append({"role": "assistant", "content": thought or None, "tool_calls": [entry]})
                group = event.get("llm_response_id")
        elif kind == "ObservationEvent":
            messages.append({"role": "tool", "content": oas_observation(event["observation"]),
                             "tool_call_id": event["tool_call_id"]})
    if not messages or messages[0]["role"] != "user":
        messages.insert(0, {"role": "user", "content": record["instruction"]})
    return tool_results_after_calls(drop_unanswered(messages))


def tool_results_after_calls(messages: list[Message]) -> list[Message]:
    """Parallel calls answered out of order stay answered right after their assistant message."""
    out: list[Message] = []
    pending: list[Message] = []
    for m in messages:
        if m["role"] == "tool":
            pending.append(m)
            continue
        out += pending
        pending = []
        out.append(m)
    return out + pending


def openagentsafety(repo: str) -> Iterator[Row]:
    """OpenHands/benchmarks OpenAgentSafety runs of gpt-4o with the OpenHands agent SDK: every record of
    12+ events not yet in the corpus. ActionEvents sharing an llm_response_id become one assistant
    message; ObservationEvent output (+ the bash suffix) becomes the tool message; MessageEvents stay;
    the record's instruction opens the conversation when no user event does."""
    for line in git_show(repo, OAS_COMMIT, OAS_PATH).splitlines():
        record = json.loads(line)
        name = record["instance_id"]
        if name in OAS_DONE or len(record.get("history") or []) < 12:
            continue
        messages = oas_messages(record)
        if len(messages) < 12:
            continue
        yield write(f"openhands-sdk-openagentsafety-{name.removeprefix('safety-')}.json", messages, {
            "source_repo": "OpenHands/benchmarks", "source_path": f"{OAS_PATH}#{name}", "commit": OAS_COMMIT,
            "license": "MIT", "produced_by": "gpt-4o-2024-08-06 via OpenHands agent SDK",
            "kind": "single-agent, native tool calls (browser/bash/editor)",
            "notes": "assistant turns grouped by llm_response_id; tool content = observation output(+suffix); "
                     "record's instruction as first user message when the history has none; no system prompt",
        })


# ------------------------------------------------------------------------ LangGraph docs (pretty_print)
LG_PATH = "docs/docs/tutorials/customer-support/customer-support.ipynb"
LG_OLD_PATH = "examples/customer-support/customer-support.ipynb"
LG_RUNS = [  # (commit, notebook, cell, file name): each a distinct committed run of the tutorial's cells
    ("b4630d845^", LG_PATH, 26, "part1"),
    ("b4630d845^", LG_PATH, 42, "part3"),
    ("b4630d845^", LG_PATH, 65, "part4"),
    ("2f1b28b3bf3e3e46ec3156cc2435c776aee4a859", LG_OLD_PATH, 32, "2024-04-30-part1"),
    ("8a38226078383d49f57cd30c0df4203b0ea7cb2d", LG_OLD_PATH, 25, "2024-05-02-part1"),
    ("8a38226078383d49f57cd30c0df4203b0ea7cb2d", LG_OLD_PATH, 41, "2024-05-02-part3"),
    ("8a38226078383d49f57cd30c0df4203b0ea7cb2d", LG_OLD_PATH, 63, "2024-05-02-part4"),
    ("8ad3478ea6740c20850ff4bab65addaf868ffecd", LG_OLD_PATH, 41, "2024-05-07-part3"),
    ("8ad3478ea6740c20850ff4bab65addaf868ffecd", LG_OLD_PATH, 63, "2024-05-07-part4"),
    ("b0ce42bce8299bc429c16f5d0fd075b6de23509b", LG_OLD_PATH, 64, "2024-06-13-part4"),
]
BANNER = re.compile(r"^=+ (Human|Ai|Tool|System) Message =+$", re.M)
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def lg_ai(body: str, pending: list[str]) -> Message:
    """An Ai Message: Claude's content blocks as printed (a Python literal: text and tool_use blocks,
    inputs exact), or plain text followed by LangChain's 'Tool Calls:' listing."""
    text, _, _calls = body.partition("\nTool Calls:\n")
    text = text.strip()
    message: Message = {"role": "assistant", "content": text or None}
    if text.startswith("[{") and text.endswith("}]"):
        blocks = ast.literal_eval(text)
        message["content"] = "".join(b.get("text", "") for b in blocks if b.get("type") == "text") or None
        calls = [{"id": b["id"], "type": "function",
                  "function": {"name": b["name"], "arguments": json.dumps(b["input"], ensure_ascii=False)}}
                 for b in blocks if b.get("type") == "tool_use"]
        if calls:
            message["tool_calls"] = calls
            pending[:] = [c["id"] for c in calls]
    return message


def lg_messages(output: str) -> list[Message]:
    output = ANSI.sub("", output)
    marks = list(BANNER.finditer(output))
    messages: list[Message] = []
    pending: list[str] = []
    for mark, after in zip(marks, [*marks[1:], None], strict=True):
        body = output[mark.end(): after.start() if after else len(output)].strip("\n")
        kind = mark.group(1)
        if kind == "Human":
            messages.append({"role": "user", "content": body.strip()})
        elif kind == "Ai":
            messages.append(lg_ai(body, pending))
        elif kind == "Tool" and pending:
            _name, _, content = body.partition("\n")
            messages.append({"role": "tool", "content": content.lstrip("\n"), "tool_call_id": pending.pop(0)})
    return drop_unanswered(messages)


def langgraph_docs(repo: str) -> Iterator[Row]:
    """langchain-ai/langgraph's customer-support tutorial (Swiss Airlines assistant, Claude through
    LangGraph, flight / hotel / car / excursion tools over SQLite and a policy search): the committed
    outputs of the cells that run the scripted user questions, as LangChain's pretty_print shows them,
    from each distinct committed run (LG_RUNS: the notebook was re-run over 2024). Tool calls come from
    the printed Anthropic content blocks (inputs exact); each Tool Message answers the next pending call
    of the message before it. No system prompt (the tutorial builds it at run time); outputs over 1,500
    characters were cut by the tutorial's printer ('... (truncated)')."""
    for ref, path, cell, part in LG_RUNS:
        commit = subprocess.run(["git", "-C", repo, "rev-parse", ref], capture_output=True, text=True,
                                check=True).stdout.strip()
        notebook = json.loads(git_show(repo, commit, path))
        outputs = notebook["cells"][cell].get("outputs", [])
        text = "".join("".join(o.get("text", [])) for o in outputs)
        messages = lg_messages(text)
        yield write(f"langgraph-docs-customer-support-{part}.json", messages, {
            "source_repo": "langchain-ai/langgraph", "source_path": f"{path}#cell{cell}", "commit": commit,
            "license": "MIT", "produced_by": "claude (Anthropic) via LangGraph, scripted user questions",
            "kind": "customer-service assistant, native tool calls (SQL-backed booking tools, policy lookup)",
            "notes": "parsed from the notebook's pretty_print output; tool-call inputs from the printed content "
                     "blocks; tool results cut at 1,500 characters by the tutorial's printer; no system prompt",
        })


# ------------------------------------------------------------- LangGraph docs (message reprs, multi-agent)
MA_PATH = "examples/multi_agent/multi-agent-collaboration.ipynb"
MA_RUNS = [  # (commit, notebook, cell, file name): the two distinct committed runs of the streamed graph
    ("6969a15892", MA_PATH, 20, "2024-05"),
    ("2cec639a0c", "docs/docs/tutorials/multi_agent/multi-agent-collaboration.ipynb", 21, "2024-11"),
]
NODE = re.compile(r"^\{'([A-Za-z0-9_-]+)': ")
LC_KINDS = {"AIMessage": "assistant", "ToolMessage": "tool", "HumanMessage": "user"}


def literal(node: ast.AST) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None


def reprs_in(line: str) -> list[tuple[str, dict[str, Any]]]:
    """The LangChain messages a printed line holds (``AIMessage(content=..., ...)``), keywords read as
    literals with ``ast`` (nothing is evaluated)."""
    try:
        tree = ast.parse(line.strip(), mode="eval")
    except SyntaxError:
        return []
    found: list[tuple[str, dict[str, Any]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in LC_KINDS:
            found.append((node.func.id, {k.arg: literal(k.value) for k in node.keywords if k.arg}))
    return found


def lc_message(kind: str, fields: dict[str, Any]) -> Message:
    role = LC_KINDS[kind]
    content = fields.get("content")
    message: Message = {"role": role, "content": content if isinstance(content, str) else json.dumps(content)}
    if role == "tool":
        message["tool_call_id"] = fields.get("tool_call_id")
        return message
    if fields.get("name"):
        message["name"] = fields["name"]
    calls = (fields.get("additional_kwargs") or {}).get("tool_calls") or []
    if calls:
        message["tool_calls"] = [{"id": c["id"], "type": "function",
                                  "function": {"name": c["function"]["name"],
                                               "arguments": c["function"]["arguments"]}} for c in calls]
        message["content"] = message["content"] or None
    return message


def first_human(source: str) -> str:
    """The task the cell streams into the graph: its first ``HumanMessage(content=...)`` literal, or
    ``("user", "...")`` pair."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "HumanMessage":
            return str(literal(node.keywords[0].value) if node.keywords else literal(node.args[0]))
        pair = literal(node) if isinstance(node, ast.Tuple) else None
        if isinstance(pair, tuple) and len(pair) == 2 and pair[0] == "user":
            return str(pair[1])  # ("user", "...") as the stream's input
    raise ValueError("no HumanMessage in the cell")


def langgraph_multi_agent(repo: str) -> Iterator[Row]:
    """langchain-ai/langgraph's multi-agent collaboration tutorial (a Researcher with Tavily search and a
    chart_generator with a Python REPL, gpt-4 through LangGraph): the printed stream of each distinct
    committed run, messages read from their reprs (keywords as literals; a message printed twice, by
    id, once). The task is the cell's HumanMessage; each agent's turns are assistant messages carrying
    its name (the graph node's, when the message has none); tool results follow as tool messages. No system prompts (each agent had its own)."""
    for ref, path, cell, label in MA_RUNS:
        commit = subprocess.run(["git", "-C", repo, "rev-parse", ref], capture_output=True, text=True,
                                check=True).stdout.strip()
        notebook = json.loads(git_show(repo, commit, path))
        code = notebook["cells"][cell]
        text = "".join("".join(o.get("text", [])) for o in code.get("outputs", []))
        messages: list[Message] = [{"role": "user", "content": first_human("".join(code["source"]))}]
        seen: set[str] = set()
        for line in text.splitlines():
            node = NODE.match(line)
            for kind, fields in reprs_in(line):
                key = str(fields.get("id") or json.dumps([kind, fields], sort_keys=True, default=str))
                if key not in seen:
                    seen.add(key)
                    if kind == "AIMessage" and not fields.get("name") and node:
                        fields["name"] = node.group(1)  # the graph node that spoke
                    messages.append(lc_message(kind, fields))
        messages = drop_unanswered(messages)
        yield write(f"langgraph-docs-multi-agent-collaboration-{label}.json", messages, {
            "source_repo": "langchain-ai/langgraph", "source_path": f"{path}#cell{cell}", "commit": commit,
            "license": "MIT", "produced_by": "gpt-4 (per response metadata) via LangGraph",
            "kind": "multi-agent: Researcher (web search) + chart_generator (Python REPL), shared transcript",
            "notes": "messages read from the printed stream's reprs with ast (literals only); task from the "
                     "cell's HumanMessage; assistant messages carry the agent's name; no system prompts",
        })

CONVERTERS: dict[str, Callable[[str], Iterator[Row]]] = {
    "tau-bench": tau_bench,
    "openagentsafety": openagentsafety,
    "langgraph-docs": langgraph_docs,
    "langgraph-multi-agent": langgraph_multi_agent,
}


def main(argv: list[str]) -> int:
    if len(argv) < 2 or len(argv) % 2:
        print(__doc__, file=sys.stderr)
        return 2
    manifest = HERE / "MANIFEST.tsv"
    rows: dict[str, Row] = {}
    if manifest.exists():
        with manifest.open(encoding="utf-8") as f:
            rows = {r["filename"]: r for r in csv.DictReader(f, delimiter="\t")}
    for source, repo in zip(argv[::2], argv[1::2], strict=True):
        for row in CONVERTERS[source](repo):
            rows[row["filename"]] = row
            print(row["filename"], row["messages"], row["tool_calls"])
    with manifest.open("w", encoding="utf-8", newline="") as f:
        out = csv.DictWriter(f, COLUMNS, delimiter="\t", lineterminator="\n")
        out.writeheader()
        out.writerows(sorted(rows.values(), key=lambda r: r["filename"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
