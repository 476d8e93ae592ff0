#!/usr/bin/env python3
"""Record pydantic-ai's chat-completions requests: one agent with a tool, run twice, the second
run continuing the first through ``message_history=first.all_messages()``.

    python record_pydantic_ai.py [--base-url URL] [--out DIR]

Without ``--base-url`` an in-process recorder is started and the requests land in
``OUT/pydantic-ai-history.jsonl``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from openai import AsyncOpenAI  # noqa: E402
from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.models.openai import OpenAIChatModel  # noqa: E402
from pydantic_ai.providers.openai import OpenAIProvider  # noqa: E402

import scenarios  # noqa: E402
from recorder import Recorder  # noqa: E402


def run(base_url: str) -> None:
    client = AsyncOpenAI(base_url=base_url, api_key="sk-test",
                         default_headers={"X-Agent-Role": "worker", "X-Agent-Name": "city_assistant"})
    agent = Agent(OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(openai_client=client)),
                  system_prompt="[agent:pai-assistant] You answer questions about cities. Use the population tool.")

    # pydantic-ai is not installed in .venv (mypy sees Any); its tool_plain returns the function as is
    tool_plain: Callable[[Callable[[str], str]], Callable[[str], str]] = agent.tool_plain

    @tool_plain
    def population(city: str) -> str:
        """Look up the population of a city."""
        return scenarios.population(city)

    first = agent.run_sync(scenarios.PYDANTIC_TASK_1)
    second = agent.run_sync(scenarios.PYDANTIC_TASK_2, message_history=first.all_messages())
    print("pydantic-ai:", first.output, "|", second.output)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url")
    ap.add_argument("--out", default=str(HERE / "out"))
    args = ap.parse_args()
    rec = None
    base_url = args.base_url
    if not base_url:
        path = Path(args.out) / "pydantic-ai-history.jsonl"
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
