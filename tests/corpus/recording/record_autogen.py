#!/usr/bin/env python3
"""Record AutoGen AgentChat 0.7 teams' chat-completions requests.

Scenarios: ``roundrobin`` (RoundRobinGroupChat, coder + reviewer, MaxMessageTermination(6)) and
``selector`` (SelectorGroupChat: planner + researcher with a tool + writer; the selector's own
model client is the orchestrator).

    python record_autogen.py [--scenario roundrobin|selector|all] [--base-url URL] [--out DIR]

Without ``--base-url`` an in-process recorder (recorder.py + scenarios.py) is started and the
requests land in ``OUT/autogen-<scenario>.jsonl``; with ``--base-url`` (e.g. history-proxy in front
of a recorder) the requests go there and nothing is written here.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import scenarios
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination, TextMentionTermination
from autogen_agentchat.teams import RoundRobinGroupChat, SelectorGroupChat
from autogen_ext.models.openai import OpenAIChatCompletionClient
from recorder import Recorder


def client(base_url: str, role: str, name: str) -> OpenAIChatCompletionClient:
    return OpenAIChatCompletionClient(
        model="gpt-4o-mini", base_url=base_url, api_key="sk-test",
        default_headers={"X-Agent-Role": role, "X-Agent-Name": name},
    )


async def roundrobin(base_url: str) -> None:
    coder = AssistantAgent(
        "coder", model_client=client(base_url, "worker", "coder"),
        system_message="[agent:autogen-rr-coder] You are coder, a Python developer on a two-person team. "
                       "Write the code the team is asked for and revise it after each review.",
    )
    reviewer = AssistantAgent(
        "reviewer", model_client=client(base_url, "worker", "reviewer"),
        system_message="[agent:autogen-rr-reviewer] You are reviewer. Review the coder's latest code against "
                       "the task and list concrete fixes; say APPROVED when it is correct.",
    )
    team = RoundRobinGroupChat([coder, reviewer], termination_condition=MaxMessageTermination(6))
    result = await team.run(task=scenarios.AUTOGEN_RR_TASK)
    print("roundrobin:", len(result.messages), "messages;", result.stop_reason)


def lookup_population(city: str) -> str:
    """Look up the population of a city."""
    return scenarios.population(city)


async def selector(base_url: str) -> None:
    planner = AssistantAgent(
        "planner", model_client=client(base_url, "manager", "planner"),
        description="Plans the work and decides when the task is done.",
        system_message="[agent:autogen-sel-planner] You are planner. Break the task into steps for researcher "
                       "and writer. When the writer has delivered the answer, reply TERMINATE.",
    )
    researcher = AssistantAgent(
        "researcher", model_client=client(base_url, "worker", "researcher"),
        description="Looks up facts with the lookup_population tool.",
        tools=[lookup_population], reflect_on_tool_use=True,
        system_message="[agent:autogen-sel-researcher] You are researcher. Use lookup_population for figures.",
    )
    writer = AssistantAgent(
        "writer", model_client=client(base_url, "worker", "writer"),
        description="Writes the final answer from the researcher's figures.",
        system_message="[agent:autogen-sel-writer] You are writer. Write the answer the task asks for from the "
                       "figures in the conversation.",
    )
    team = SelectorGroupChat(
        [planner, researcher, writer], model_client=client(base_url, "orchestrator", "selector"),
        termination_condition=TextMentionTermination("TERMINATE") | MaxMessageTermination(10),
    )
    result = await team.run(task=scenarios.AUTOGEN_SELECTOR_TASK)
    print("selector:", len(result.messages), "messages;", result.stop_reason)


RUNS = {"roundrobin": roundrobin, "selector": selector}


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
            path = Path(args.out) / f"autogen-{name}.jsonl"
            path.unlink(missing_ok=True)
            rec = Recorder(path, scenarios.respond)
            base_url = rec.start()
        try:
            asyncio.run(asyncio.wait_for(RUNS[name](base_url), timeout=120))
        finally:
            if rec:
                rec.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
