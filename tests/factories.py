"""Message builders for tests: short, readable conversations in OpenAI's shape."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from history_proxy.config.models import Config
from history_proxy.core.messages import Message
from history_proxy.filters.base import Filter

CORPUS_DIR = Path(__file__).resolve().parent / "corpus"
_ids = itertools.count(1)
Content = str | list[dict[str, Any]]  # a message's content: text, or a list of parts


def system(text: Content = "You are a helpful agent.", **extra: Any) -> Message:
    return {"role": "system", "content": text, **extra}


def user(text: Content = "Do the task.", **extra: Any) -> Message:
    return {"role": "user", "content": text, **extra}


def assistant(text: Content | None = "Done.", **extra: Any) -> Message:
    return {"role": "assistant", "content": text, **extra}


def call(
    name: str = "bash", arguments: dict[str, Any] | str | None = None, call_id: str | None = None
) -> dict[str, Any]:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return {
        "id": call_id or f"call_{next(_ids)}",
        "type": "function",
        "function": {"name": name, "arguments": args},
    }


def action(*calls: dict[str, Any], text: str | None = None, **extra: Any) -> Message:
    """An assistant message carrying tool calls (one ``bash`` call when none is given)."""
    return {"role": "assistant", "content": text, "tool_calls": list(calls or (call(),)), **extra}


def result(of: dict[str, Any] | Message, content: str = "ok", **extra: Any) -> Message:
    """The tool message answering a call (or the first call of an action message)."""
    the_call = of["tool_calls"][0] if "tool_calls" in of else of
    return {"role": "tool", "tool_call_id": the_call["id"], "content": content, **extra}


def exchange(name: str = "bash", output: str = "ok", text: str | None = None, **extra: Any) -> list[Message]:
    """An action with one call and its result."""
    act = action(call(name), text=text, **extra)
    return [act, result(act, output)]


def parallel(*names: str, outputs: list[str] | None = None) -> list[Message]:
    """One action with several calls and all their results."""
    calls = [call(n) for n in names]
    act = action(*calls)
    outs = outputs or [f"{n} output" for n in names]
    return [act, *(result(c, o) for c, o in zip(calls, outs, strict=True))]


def role_filters(config: Config) -> list[Filter]:
    """Every filter of every role's policy, whichever form it takes (a chain or a ``{mode, filters}`` mapping)."""
    policies = config.policies
    return [f for role in policies.roles for _, f in policies.located("roles", role)[1]]


def corpus_files() -> list[Path]:
    """Every corpus conversation; raises, naming the directory, when there is none (never zero cases)."""
    files = sorted(CORPUS_DIR.glob("*.json"))
    if not files:
        raise FileNotFoundError(
            f"no corpus conversations in {CORPUS_DIR}: the corpus ships with the repository"
        )
    return files


def corpus_body(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((CORPUS_DIR / name).read_text(encoding="utf-8"))
    return body
