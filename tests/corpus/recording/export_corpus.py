#!/usr/bin/env python3
"""Turn the recordings (``out/*.jsonl``) into corpus files ``tests/corpus/fw-*.json`` and their
``MANIFEST.tsv`` rows (stdlib only).

For every scenario and every agent (by the ``X-Agent-Name`` it sent) the LAST request that agent
sent is exported -- the one with the longest history -- as the body exactly as sent (every key the
framework put in it; json with indent=1 like the rest of the corpus). The identity headers go into
the manifest's notes column, never into the body. Existing ``fw-*`` rows are replaced.

    python3 export_corpus.py [--recordings out] [--corpus ..]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

PYPI = {  # framework -> (source_repo, license)
    "autogen": ("pypi:autogen-agentchat==0.7.5 (autogen-ext[openai]==0.7.5)", "MIT"),
    "crewai": ("pypi:crewai==1.15.30", "MIT"),
    "langgraph": ("pypi:langgraph-supervisor==0.0.31 (langgraph==1.2.24, langchain-openai==1.7.4)", "MIT"),
    "openai-agents": ("pypi:openai-agents==0.24.0", "MIT"),
    "pydantic-ai": ("pypi:pydantic-ai-slim==2.68.0", "MIT"),
}

# recording file -> (framework, script, scenario arg, corpus stem, {X-Agent-Name: (file suffix, kind, what it shows)})
EXPORTS = [
    ("autogen-roundrobin.jsonl", "autogen", "record_autogen.py", "roundrobin", "fw-autogen-roundrobin", {
        "coder": ("coder", "multi-agent worker view (RoundRobinGroupChat)",
                  "task is the 1st user message (name=user); the peer reviewer's turns are user messages with "
                  "name=reviewer; own turns are assistant without name"),
        "reviewer": ("reviewer", "multi-agent worker view (RoundRobinGroupChat)",
                     "task is the 1st user message (name=user); the peer coder's turns are user messages with "
                     "name=coder; ends on a peer user message"),
    }),
    ("autogen-selector.jsonl", "autogen", "record_autogen.py", "selector", "fw-autogen-selector", {
        "planner": ("planner", "multi-agent manager view (SelectorGroupChat)",
                    "task is the 1st user message (name=user); workers' answers are user messages with their names"),
        "researcher": ("researcher", "multi-agent worker view with native tool calls (SelectorGroupChat)",
                       "task (name=user) then planner's plan as a user message (name=planner), then its own "
                       "parallel tool calls and results (reflect_on_tool_use)"),
        "writer": ("writer", "multi-agent worker view (SelectorGroupChat)",
                   "task (name=user), planner and researcher messages as user messages with their names; "
                   "the researcher's tool calls are not shared"),
    }),
    ("crewai-hierarchical.jsonl", "crewai", "record_crewai.py", "hierarchical", "fw-crewai-hierarchical", {
        "Crew-Manager": ("manager", "multi-agent manager view (delegate_work_to_coworker tool calls)",
                         "crew task in the 1st user message (Current Task: ...); each coworker's answer is a tool "
                         "result (tool messages carry name)"),
        "City-Researcher": ("researcher", "multi-agent worker view, native tool calls",
                            "delegated subtask as the only user message (Current Task: ...), not the crew task; "
                            "own tool call and result (tool message carries name)"),
        "Briefing-Writer": ("writer", "multi-agent worker view",
                            "delegated subtask with the manager's context as the only user message; no tools"),
    }),
    ("crewai-toolloop.jsonl", "crewai", "record_crewai.py", "toolloop", "fw-crewai-tool-loop", {
        "Data-Analyst": ("analyst", "single-agent task loop, native tool calls",
                         "task in the 1st user message; two tool rounds; no nudge messages in native mode; "
                         "tool messages carry name"),
    }),
    ("crewai-toolloop-text.jsonl", "crewai", "record_crewai.py", "toolloop-text", "fw-crewai-tool-loop-text", {
        "Data-Analyst": ("analyst", "single-agent task loop, text actions (ReAct: Thought/Action/Observation)",
                         "LLM with native function calling off: task in the 1st user message; each tool result is "
                         "appended to the assistant text as Observation, followed by the user nudge 'Analyze the "
                         "tool result...'"),
    }),
    ("langgraph-supervisor.jsonl", "langgraph", "record_langgraph.py", "", "fw-langgraph-supervisor", {
        "supervisor": ("supervisor", "multi-agent orchestrator view (transfer_to_* handoff tools)",
                       "task is the only user message; workers' answers are assistant messages with name=<worker>; "
                       "handoffs are tool calls with 'Successfully transferred' results"),
        "researcher": ("researcher", "multi-agent worker view, native tool calls",
                       "shared history: task (user), supervisor's handoff (assistant name=supervisor), then own "
                       "tool call and result"),
        "calculator": ("calculator", "multi-agent worker view, native tool calls",
                       "shared history: task, supervisor handoffs, the researcher's answer (assistant "
                       "name=researcher) and hand-back, then own tool call and result"),
    }),
    ("openai-agents-handoff.jsonl", "openai-agents", "record_openai_agents.py", "", "fw-openai-agents-handoff", {
        "triage": ("triage", "multi-agent orchestrator (handoff tool)",
                   "system + the user's request; offered transfer_to_billing_specialist"),
        "billing_specialist": ("billing", "multi-agent worker after a handoff, native tool calls",
                               "the user's request, the triage agent's transfer call and its result, then own "
                               "lookup_order call and result; the triage system prompt is replaced by its own"),
    }),
    ("pydantic-ai-history.jsonl", "pydantic-ai", "record_pydantic_ai.py", "", "fw-pydantic-ai-history", {
        "city_assistant": ("assistant", "single agent, two runs joined by message_history, native tool calls",
                           "first run (user, tool call, result, answer) replayed from message_history, then the "
                           "second user question and its tool round"),
    }),
]

# Held back from the corpus: the SelectorGroupChat's own speaker-selection call, a body whose only
# message is one `system` message (roles + the whole transcript as text). Valid for the API, but the
# suite's corpus-wide tests assume a user message (test_truncate, test_last_n_observations) and
# cache_control places no mark on it; it is written to recording/held-back/ instead.
HELD_BACK = [("autogen-selector.jsonl", "selector", "fw-autogen-selector-selector.json")]

COLUMNS = ["filename", "source_repo", "source_path", "commit", "license", "messages", "tool_calls", "total_chars",
           "tool_output_chars", "bytes", "produced_by", "kind", "notes"]
FRAMEWORK_NAMES = {"autogen": "AutoGen AgentChat", "crewai": "CrewAI", "langgraph": "LangGraph (langgraph-supervisor)",
                   "openai-agents": "the OpenAI Agents SDK", "pydantic-ai": "pydantic-ai"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recordings", default=str(HERE / "out"))
    ap.add_argument("--corpus", default=str(HERE.parent))
    args = ap.parse_args()
    corpus = Path(args.corpus)
    sys.path.insert(0, str(corpus))
    from validate import validate_body

    rows = []
    for rec_name, fw, script, scenario, stem, agents in EXPORTS:
        path = Path(args.recordings) / rec_name
        if not path.exists():
            print(f"skip {rec_name}: not recorded", file=sys.stderr)
            continue
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        last: dict[str, dict[str, Any]] = {}
        for r in records:
            last[r["headers"].get("X-Agent-Name", "?")] = r
        for agent, (suffix, kind, shows) in agents.items():
            r = last.get(agent)
            if r is None:
                print(f"skip {stem}-{suffix}: {agent} sent no request", file=sys.stderr)
                continue
            fname = f"{stem}-{suffix}.json"
            text = json.dumps(r["body"], indent=1, ensure_ascii=False) + "\n"
            (corpus / fname).write_text(text, encoding="utf-8")
            errors: list[str] = []
            st = validate_body(r["body"], errors, [])
            n_agent = sum(1 for x in records if x["headers"].get("X-Agent-Name") == agent)
            headers = " ".join(f"{k}={v}" for k, v in sorted(r["headers"].items(), reverse=True))
            rows.append({
                "filename": fname, "source_repo": PYPI[fw][0],
                "source_path": f"tests/corpus/recording/{script}" + (f" --scenario {scenario}" if scenario else "")
                               + f"#request {r['seq']} of {len(records)}",
                "commit": "-", "license": PYPI[fw][1],
                "messages": st["messages"], "tool_calls": st["tool_calls"], "total_chars": st["chars"],
                "tool_output_chars": st["tool_chars"], "bytes": len(text.encode("utf-8")),
                "produced_by": f"recorded from {FRAMEWORK_NAMES[fw]} against a scripted upstream",
                "kind": kind,
                "notes": f"headers: {headers}; the agent's last of {n_agent} requests; {shows}",
            })
            print(f"{fname}: {st['messages']} msgs, {st['tool_calls']} calls{', ERRORS ' + str(errors) if errors else ''}")

    for rec_name, agent, fname in HELD_BACK:
        path = Path(args.recordings) / rec_name
        if path.exists():
            records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
            mine = [r for r in records if r["headers"].get("X-Agent-Name") == agent]
            if mine:
                (HERE / "held-back").mkdir(exist_ok=True)
                (HERE / "held-back" / fname).write_text(json.dumps(mine[-1]["body"], indent=1, ensure_ascii=False) + "\n",
                                                        encoding="utf-8")
                print(f"held back: recording/held-back/{fname}")

    # rewrite MANIFEST.tsv line by line (keeping the other rows byte for byte), fw- rows replaced
    mpath = corpus / "MANIFEST.tsv"
    lines = [ln for ln in mpath.read_text(encoding="utf-8").splitlines() if not ln.startswith("fw-")]
    assert lines[0].split("\t") == COLUMNS, "unexpected MANIFEST.tsv header"
    for row in rows:
        cells = [str(row[c]) for c in COLUMNS]
        assert not any(ch in cell for cell in cells for ch in "\t\n"), row
        lines.append("\t".join(cells))
    mpath.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
