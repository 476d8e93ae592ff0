#!/usr/bin/env python3
"""Record CrewAI's chat-completions requests.

Scenarios: ``hierarchical`` (Process.hierarchical: CrewAI's own "Crew Manager" delegates with its
coworker tools to a City Researcher, who runs a population tool, and a Briefing Writer) and
``toolloop`` (one Data Analyst agent calling a population tool twice with native tool calls) and
``toolloop-text`` (the same agent on an LLM without native function calling: CrewAI's text tool
format, where it adds its "Analyze the tool result..." nudge as a user message after each result).

    python record_crewai.py [--scenario hierarchical|toolloop|toolloop-text|all] [--base-url URL] [--out DIR]

Without ``--base-url`` an in-process recorder (recorder.py + scenarios.py) is started and the
requests land in ``OUT/crewai-<scenario>.jsonl``; with ``--base-url`` (e.g. history-proxy in front
of a recorder) the requests go there and nothing is written here.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
os.environ.setdefault("OTEL_SDK_DISABLED", "true")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import scenarios
from crewai import LLM, Agent, Crew, Process, Task
from crewai.tools import tool
from recorder import Recorder


def llm(base_url: str, role: str, name: str) -> LLM:
    return LLM(model="gpt-4o-mini", base_url=base_url, api_key="sk-test",
               default_headers={"X-Agent-Role": role, "X-Agent-Name": name})


# crewai is not installed in .venv, so mypy sees `tool` as Any: this is how it is used here
crewai_tool: Callable[[str], Callable[[Callable[[str], str]], object]] = tool


@crewai_tool("population")
def population(city: str) -> str:
    """Look up the current population of a city."""
    return scenarios.population(city)


def hierarchical(base_url: str) -> None:
    researcher = Agent(
        role="City Researcher", goal="Find accurate, current facts about cities.",
        backstory="[agent:crewai-researcher] You research cities for travel briefings.",
        llm=llm(base_url, "worker", "City-Researcher"), tools=[population], max_iter=5,
    )
    writer = Agent(
        role="Briefing Writer", goal="Write short, practical briefings.",
        backstory="[agent:crewai-writer] You turn research notes into crisp bullet points.",
        llm=llm(base_url, "worker", "Briefing-Writer"), max_iter=5,
    )
    task = Task(description=scenarios.CREWAI_HIER_TASK, expected_output="Three bullet points.")
    crew = Crew(agents=[researcher, writer], tasks=[task], process=Process.hierarchical,
                manager_llm=llm(base_url, "manager", "Crew-Manager"))
    print("hierarchical:", crew.kickoff())


def toolloop(base_url: str) -> None:
    analyst = Agent(
        role="Data Analyst", goal="Answer questions with figures from your tools.",
        backstory="[agent:crewai-analyst] You compare cities using official statistics.",
        llm=llm(base_url, "worker", "Data-Analyst"), tools=[population], max_iter=6,
    )
    task = Task(description=scenarios.CREWAI_TOOL_TASK, expected_output="One sentence naming the larger city.",
                agent=analyst)
    print("toolloop:", Crew(agents=[analyst], tasks=[task]).kickoff())


def toolloop_text(base_url: str) -> None:
    """The same agent on an LLM that reports no native function calling (as many local models do):
    CrewAI then uses its text tool format (Thought / Action / Action Input, results as Observation)."""
    native = llm(base_url, "worker", "Data-Analyst")

    # the OpenAI provider class, with native function calling off (picked by crewai at run time, so a
    # dynamic base that mypy cannot check)
    class TextToolsLLM(type(native)):  # type: ignore[misc]
        def supports_function_calling(self) -> bool:
            return False

    text_llm = TextToolsLLM(model="gpt-4o-mini", base_url=base_url, api_key="sk-test",
                            default_headers={"X-Agent-Role": "worker", "X-Agent-Name": "Data-Analyst"})
    analyst = Agent(
        role="Data Analyst", goal="Answer questions with figures from your tools.",
        backstory="[agent:crewai-analyst] You compare cities using official statistics.",
        llm=text_llm, tools=[population], max_iter=6,
    )
    task = Task(description=scenarios.CREWAI_TOOL_TASK, expected_output="One sentence naming the larger city.",
                agent=analyst)
    print("toolloop-text:", Crew(agents=[analyst], tasks=[task]).kickoff())


RUNS = {"hierarchical": hierarchical, "toolloop": toolloop, "toolloop-text": toolloop_text}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", choices=[*RUNS, "all"], default="all")
    ap.add_argument("--base-url")
    ap.add_argument("--out", default=str(HERE / "out"))
    args = ap.parse_args()
    for name in RUNS if args.scenario == "all" else [args.scenario]:
        rec = None
        base_url = args.base_url
        if not base_url:
            path = Path(args.out) / f"crewai-{name}.jsonl"
            path.unlink(missing_ok=True)
            rec = Recorder(path, scenarios.respond)
            base_url = rec.start()
        try:
            RUNS[name](base_url)
        finally:
            if rec:
                rec.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
