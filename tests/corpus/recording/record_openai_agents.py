#!/usr/bin/env python3
"""Record the OpenAI Agents SDK's chat-completions requests (handoffs, chat-completions mode).

A triage agent hands off (``transfer_to_billing_specialist``) to a billing specialist, which calls
a function tool ``lookup_order`` and answers. Each agent uses ``OpenAIChatCompletionsModel`` with
its own ``AsyncOpenAI`` client carrying its identity headers; tracing is disabled.

    python record_openai_agents.py [--base-url URL] [--out DIR]

Without ``--base-url`` an in-process recorder is started and the requests land in
``OUT/openai-agents-handoff.jsonl``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402

import scenarios  # noqa: E402
from recorder import Recorder  # noqa: E402


def model(base_url: str, role: str, name: str) -> OpenAIChatCompletionsModel:
    client = AsyncOpenAI(base_url=base_url, api_key="sk-test",
                         default_headers={"X-Agent-Role": role, "X-Agent-Name": name})
    return OpenAIChatCompletionsModel(model="gpt-4o-mini", openai_client=client)


@function_tool
def lookup_order(order_id: str) -> str:
    """Look up an order's payment record."""
    return scenarios.lookup_order(order_id)


async def run(base_url: str) -> None:
    set_tracing_disabled(True)
    billing = Agent(
        name="Billing specialist", model=model(base_url, "worker", "billing_specialist"),
        handoff_description="Handles charges, refunds and payment questions.",
        instructions="[agent:sdk-billing] You are a billing specialist. Look the order up before answering.",
        tools=[lookup_order],
    )
    triage = Agent(
        name="Triage agent", model=model(base_url, "orchestrator", "triage"),
        instructions="[agent:sdk-triage] You are the front desk. Hand billing questions to the billing specialist.",
        handoffs=[billing],
    )
    result = await Runner.run(triage, scenarios.AGENTS_SDK_TASK, max_turns=8)
    print("openai-agents:", result.final_output)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url")
    ap.add_argument("--out", default=str(HERE / "out"))
    args = ap.parse_args()
    rec = None
    base_url = args.base_url
    if not base_url:
        path = Path(args.out) / "openai-agents-handoff.jsonl"
        path.unlink(missing_ok=True)
        rec = Recorder(path, scenarios.respond)
        base_url = rec.start()
    try:
        asyncio.run(asyncio.wait_for(run(base_url), timeout=120))
    finally:
        if rec:
            rec.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
