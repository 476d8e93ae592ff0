"""Request bodies of real agent shape: seeded synthetic conversations and the shared corpus.

The synthetic conversations follow the corpus statistics (``tests/corpus/README.md``): a
system prompt of a few thousand characters, one user task, then assistant tool calls (thought text
on some, a few parallel calls) answered by tool results whose sizes range from a few characters to
~20 K (median a few hundred, a long tail of file dumps). No annotations: the proxy infers message
types as it does for ordinary clients. Every call with the same size returns the same body.
"""

from __future__ import annotations

import copy
import functools
import json
import random
import string
from pathlib import Path
from typing import Any

from history_proxy.core.messages import Message

CORPUS_DIR = Path(__file__).resolve().parents[1] / "tests" / "corpus"
SIZES = (20, 100, 400)

_VOCABULARY = (
    "the agent file line test error value return self config request response module import def class "
    "assert None True False result path data message token filter chain index list dict string count "
    "update check parse load write read open close status output input build run step cache proxy "
    "upstream stream header body limit user tool system assistant content role model history turn group"
)
_WORDS = _VOCABULARY.split()
_TOOLS = ("bash", "str_replace_editor", "view_file", "search_code", "run_tests", "browser_get_state")
_COMMANDS = (
    "ls -la src/",
    "grep -rn 'def parse' src/",
    "python -m pytest tests/ -x -q",
    "git diff",
    "cat setup.py",
)
# (share, min chars, max chars) of tool result sizes: many small, a tail of large dumps
_RESULT_SIZES = ((0.40, 10, 300), (0.35, 300, 2_000), (0.20, 2_000, 8_000), (0.05, 8_000, 20_000))
PARALLEL_SHARE = 0.06
THOUGHT_SHARE = 0.4


def _words(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(_WORDS)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)[:chars]


def _code_lines(rng: random.Random, chars: int) -> str:
    """Text that looks like file views and command output: numbered lines of code-ish words."""
    lines: list[str] = []
    size = 0
    number = rng.randint(1, 400)
    while size < chars:
        indent = " " * (4 * rng.randint(0, 3))
        line = f"{number:6d}\t{indent}{_words(rng, rng.randint(10, 70))}"
        lines.append(line)
        size += len(line) + 1
        number += 1
    return "\n".join(lines)[:chars]


def _result_size(rng: random.Random) -> int:
    pick = rng.random()
    for share, low, high in _RESULT_SIZES:
        if pick < share:
            return rng.randint(low, high)
        pick -= share
    return rng.randint(10, 300)


def _call_id(rng: random.Random) -> str:
    return "call_" + "".join(rng.choices(string.ascii_letters + string.digits, k=24))


def _call(rng: random.Random) -> dict[str, Any]:
    name = rng.choice(_TOOLS)
    if name == "bash":
        arguments: dict[str, Any] = {"command": rng.choice(_COMMANDS)}
    elif name == "str_replace_editor":
        arguments = {
            "command": "str_replace",
            "path": f"/repo/src/{rng.choice(_WORDS)}.py",
            "old_str": _words(rng, rng.randint(20, 120)),
            "new_str": _words(rng, rng.randint(20, 160)),
        }
    else:
        arguments = {"path": f"/repo/src/{rng.choice(_WORDS)}.py", "query": _words(rng, rng.randint(5, 40))}
    return {
        "id": _call_id(rng),
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


@functools.lru_cache(maxsize=8)
def _synthetic(count: int, seed: int) -> tuple[Message, ...]:
    rng = random.Random(seed)
    messages: list[Message] = [
        {"role": "system", "content": "You are a software engineering agent. " + _words(rng, 5_500)},
        {"role": "user", "content": "<task>\n" + _words(rng, 1_400) + "\n</task>"},
    ]
    while len(messages) < count:
        remaining = count - len(messages)
        if remaining == 1:  # only reachable for tiny sizes: close with a short answer
            messages.append({"role": "assistant", "content": _words(rng, 200)})
            break
        parallel = rng.random() < PARALLEL_SHARE
        calls = rng.randint(2, 5) if parallel else 1
        calls = min(calls, remaining - 1)
        if remaining - (calls + 1) == 1:
            calls += 1  # never leave exactly one slot, which no group fits
        thought = _words(rng, rng.randint(50, 600)) if rng.random() < THOUGHT_SHARE else None
        action = [_call(rng) for _ in range(calls)]
        messages.append({"role": "assistant", "content": thought, "tool_calls": action})
        for call in action:
            messages.append(
                {"role": "tool", "tool_call_id": call["id"], "content": _code_lines(rng, _result_size(rng))}
            )
    return tuple(messages)


def synthetic_messages(count: int, seed: int | None = None) -> list[Message]:
    """A deterministic agent conversation of exactly ``count`` messages (``count`` >= 2).

    The result is a fresh deep copy: callers may change it freely.
    """
    if count < 2:
        raise ValueError("a conversation needs at least a system prompt and a task (count >= 2)")
    return copy.deepcopy(list(_synthetic(count, 1_000 + count if seed is None else seed)))


def synthetic_body(count: int, *, stream: bool = False, model: str = "bench-model") -> dict[str, Any]:
    """A chat-completions body carrying :func:`synthetic_messages` of ``count`` messages."""
    body: dict[str, Any] = {"model": model, "messages": synthetic_messages(count)}
    if stream:
        body["stream"] = True
    return body


def encode(body: dict[str, Any]) -> bytes:
    """The body as a client SDK sends it (JSON, UTF-8)."""
    return json.dumps(body).encode()


def corpus_bodies(directory: Path = CORPUS_DIR) -> dict[str, dict[str, Any]]:
    """Every corpus conversation as a request body, by file stem (sorted)."""
    return {
        path.stem: json.loads(path.read_text(encoding="utf-8")) for path in sorted(directory.glob("*.json"))
    }


def replay_prefixes(messages: list[Message]) -> list[list[Message]]:
    """The requests an agent sent while growing ``messages``: every prefix that ends just before an
    assistant message (the request that produced it), then the whole conversation.

    Prefixes share their message objects with ``messages``, as the requests of a real replay share
    equal messages.
    """
    prefixes = [messages[:i] for i in range(1, len(messages)) if messages[i].get("role") == "assistant"]
    prefixes.append(list(messages))
    return prefixes


def describe(messages: list[Message]) -> dict[str, int]:
    """Size figures of a conversation: messages, tool messages, parallel actions, characters."""
    chars = 0
    for message in messages:
        content = message.get("content")
        chars += len(content) if isinstance(content, str) else len(json.dumps(content)) if content else 0
        for call in message.get("tool_calls") or []:
            chars += len(call["function"]["arguments"])
    return {
        "messages": len(messages),
        "tool_messages": sum(1 for m in messages if m.get("role") == "tool"),
        "parallel_actions": sum(1 for m in messages if len(m.get("tool_calls") or []) > 1),
        "chars": chars,
        "json_bytes": len(json.dumps(messages)),
    }
