#!/usr/bin/env python3
"""Record a LangGraph supervisor team's chat-completions requests (langgraph-supervisor).

A supervisor (``create_supervisor``) hands off with its ``transfer_to_*`` tools to a researcher
(a ``create_react_agent`` with a population tool) and a calculator (with a divide tool); each
worker hands back automatically.

    python record_langgraph.py [--base-url URL] [--out DIR]

Without ``--base-url`` an in-process recorder is started and the requests land in
``OUT/langgraph-supervisor.jsonl``.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
warnings.filterwarnings("ignore")

from langchain_openai import ChatOpenAI  # noqa: E402
from langgraph.prebuilt import create_react_agent  # noqa: E402
from langgraph_supervisor import create_supervisor  # noqa: E402

import scenarios  # noqa: E402
from recorder import Recorder  # noqa: E402


def model(base_url: str, role: str, name: str) -> ChatOpenAI:
    return ChatOpenAI(model="gpt-4o-mini", base_url=base_url, api_key="sk-test",
                      default_headers={"X-Agent-Role": role, "X-Agent-Name": name})


def lookup_population(city: str) -> str:
    """Look up the population of a city."""
    return scenarios.population(city)


def divide(a: float, b: float) -> float:
    """Divide a by b."""
    return a / b


def run(base_url: str) -> None:
    researcher = create_react_agent(
        model(base_url, "worker", "researcher"), tools=[lookup_population], name="researcher",
        prompt="[agent:lg-researcher] You are a researcher. Look facts up with your tools; do no math.")
    calculator = create_react_agent(
        model(base_url, "worker", "calculator"), tools=[divide], name="calculator",
        prompt="[agent:lg-calculator] You are a calculator. Use your tools for arithmetic.")
    supervisor = create_supervisor(
        [researcher, calculator], model=model(base_url, "orchestrator", "supervisor"),
        prompt="[agent:lg-supervisor] You are a supervisor managing a researcher and a calculator. "
               "Hand facts to find to the researcher and arithmetic to the calculator; answer when done.",
    ).compile()
    result = supervisor.invoke({"messages": [{"role": "user", "content": scenarios.LANGGRAPH_TASK}]},
                               {"recursion_limit": 30})
    print("langgraph supervisor:", result["messages"][-1].content)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url")
    ap.add_argument("--out", default=str(HERE / "out"))
    args = ap.parse_args()
    rec = None
    base_url = args.base_url
    if not base_url:
        path = Path(args.out) / "langgraph-supervisor.jsonl"
        path.unlink(missing_ok=True)
        rec = Recorder(path, scenarios.respond)
        base_url = rec.start()
    try:
        run(base_url)
    finally:
        if rec:
            rec.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
