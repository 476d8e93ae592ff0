"""Hypothesis strategies: valid chat-completions conversations and the filter contexts they meet.

Every conversation drawn from :func:`conversations` satisfies the invariants of docs/architecture.md
(``history_proxy.core.messages.invariant_errors(...) == {}``), and covers what real agents send: leading
system/developer messages, turns opened by user messages, assistant text, actions with 1-4 parallel
calls answered (sometimes out of order) by tool messages, tool-call ids reused across turns, string
or text-part content, null content on actions, ``name`` fields, vendor keys, message annotations,
system messages mid-conversation, completion-tool calls and an optional trailing unanswered action.

The settings profile comes from ``HYPOTHESIS_PROFILE``: ``dev`` (default, 60 examples), ``ci``
(20) or ``thorough`` (500, for a bug hunt). Property tests decorate with :data:`PROPERTY_SETTINGS`.
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from history_proxy.core.messages import Message
from history_proxy.core.tokens import TokenCounters
from history_proxy.filters.base import FilterContext

AGENTS = ("alice", "bob", "carol")
ROLES = ("default", "orchestrator", "manager", "worker")
TOOLS = ("bash", "search", "view_file", "edit_file")
COMPLETION_TOOLS = ("final_answer", "submit")
MODELS = ("gpt-4o", "gpt-4", "claude-x")
PHASES = ("0", "1", "2", "3")
TAGS = ("keep_output", "remove_output")
SECRET = "sk-" + "A1b2C3d4E5f6G7h8I9j0K1l2"
"""A string shaped like an API key, so redaction filters have something to remove."""

settings.register_profile(
    "dev",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "ci",
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "thorough",
    max_examples=500,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
_PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "dev")
PROPERTY_SETTINGS = settings.get_profile(_PROFILE if _PROFILE in ("dev", "ci", "thorough") else "dev")

SHARED_TOKENS = TokenCounters()
"""One counter cache for every drawn context, so repeated strings are tokenized once per test run."""


class FakeSummarizer:
    """A deterministic stand-in for the model that writes summaries (no I/O)."""

    async def summarize(
        self, messages: list[Message], *, model: str, upstream: str | None, prompt: str, timeout_s: float
    ) -> str:
        roles = ", ".join(str(m.get("role")) for m in messages)
        return f"{len(messages)} earlier messages ({roles})."


class FailingSummarizer:
    """A summarizer whose model call always fails, so filters take their fallback path."""

    async def summarize(
        self, messages: list[Message], *, model: str, upstream: str | None, prompt: str, timeout_s: float
    ) -> str:
        raise ConnectionError("the summary upstream is unreachable")


_WORDS = (
    "the build failed",
    "run the tests",
    "look at config.py",
    "error: file not found",
    "patch applied",
    "flight UA123 is booked",
    "refund approved",
    "checking the logs",
    SECRET,
    "ok",
    "näive café 🙂",
)


def _line(seed: int, index: int) -> str:
    """A deterministic line of one to four phrases, chosen by ``seed`` and ``index``."""
    count = 1 + (seed + index) % 4
    return " ".join(_WORDS[(seed * 7 + index * 3 + k * 5) % len(_WORDS)] for k in range(count))


def _text(label: str, lines: int, seed: int) -> str:
    return f"[{label}] " + "\n".join(_line(seed, i) for i in range(lines))


_IMAGE_PART = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}

# Strategies are built once: building them inside every draw costs more than the drawing itself.
_SHORT_SHAPE = st.tuples(st.integers(0, 2), st.integers(1, 3), st.integers(1, 4), st.integers(0, 1000))
_LONG_SHAPE = st.tuples(st.integers(0, 2), st.integers(1, 3), st.integers(1, 40), st.integers(0, 1000))
_MAYBE_AGENT = st.none() | st.sampled_from(AGENTS)
_TAG_LISTS = st.lists(st.sampled_from(TAGS), min_size=1, max_size=2, unique=True)


@st.composite
def _content(draw: st.DrawFn, label: str, *, long: bool = False, images: bool = False) -> Any:
    """A string (two times in three), or a list of 1-3 text parts (plus an image part now and then).

    Texts are built from a few integers rather than drawn word by word: generation stays cheap and
    shrinking still reaches one short line.
    """
    kind, parts, lines, seed = draw(_LONG_SHAPE if long else _SHORT_SHAPE)
    if kind < 2:
        return _text(label, lines, seed)
    content: list[dict[str, Any]] = [
        {"type": "text", "text": _text(label, max(1, lines // parts), seed + p)} for p in range(parts)
    ]
    if images and draw(st.booleans()):
        content.append(dict(_IMAGE_PART))
    return content


@st.composite
def _annotations(
    draw: st.DrawFn, kinds: tuple[str | None, ...], agent: str | None, annotate: bool
) -> dict[str, Any]:
    if not annotate:
        return {}
    found: dict[str, Any] = {}
    kind = kinds[draw(st.integers(0, len(kinds) - 1))]
    if kind is not None:
        found["message_type"] = kind
    if agent is not None:
        found["agent"] = agent
    if draw(st.integers(0, 3)) == 0:
        found["tags"] = draw(_TAG_LISTS)
    return found


@st.composite
def _vendor_keys(draw: st.DrawFn, role: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    if role in ("user", "assistant") and draw(st.integers(0, 4)) == 0:
        found["name"] = AGENTS[draw(st.integers(0, len(AGENTS) - 1))]
    if role == "assistant" and draw(st.integers(0, 3)) == 0:
        found["reasoning_content"] = _text("reasoning", 1, draw(st.integers(0, 1000)))
    return found


@st.composite
def _action(
    draw: st.DrawFn, label: str, *, annotate: bool, answered: bool = True, completion: bool = False
) -> list[Message]:
    """An assistant message with 1-4 calls, then (when ``answered``) one tool message per call."""
    count = draw(st.integers(1, 4))
    first_id = draw(st.integers(0, 6))  # a small id space, so ids repeat across turns as some clients do
    names = [TOOLS[draw(st.integers(0, len(TOOLS) - 1))] for _ in range(count)]
    if completion:
        names[draw(st.integers(0, count - 1))] = COMPLETION_TOOLS[
            draw(st.integers(0, len(COMPLETION_TOOLS) - 1))
        ]
    calls: list[dict[str, Any]] = [
        {
            "id": f"call_{first_id + k}",
            "type": "function",
            "function": {"name": name, "arguments": f'{{"step": "{label}.{k}"}}'},
        }
        for k, name in enumerate(names)
    ]
    agent = draw(_MAYBE_AGENT)
    content_kind = draw(st.integers(0, 3))  # null content most often, as the SDKs send actions
    content = None if content_kind < 2 else "" if content_kind == 2 else draw(_content(label))
    action: Message = {"role": "assistant", "content": content, "tool_calls": calls}
    action.update(draw(_vendor_keys("assistant")))
    action.update(draw(_annotations((None, "final" if completion else "action"), agent, annotate)))
    if not answered:
        return [action]
    results: list[Message] = []
    result_kinds = (None, "final") if completion else (None, "observation", "global_observation")
    for k, call in enumerate(calls):
        result: Message = {
            "role": "tool",
            "tool_call_id": call["id"],
            "content": draw(_content(f"{label}.{k} output", long=True)),
        }
        if draw(st.integers(0, 4)) == 0:
            result["name"] = call["function"]["name"]
        result.update(draw(_annotations(result_kinds, agent, annotate)))
        results.append(result)
    if count > 1 and draw(st.booleans()):
        results = draw(st.permutations(results))
    return [action, *results]


_STEP_KINDS = ("text", "action", "action", "action", "system", "final", "synthesis")


@st.composite
def _step(draw: st.DrawFn, label: str, annotate: bool) -> list[Message]:
    kind = _STEP_KINDS[draw(st.integers(0, len(_STEP_KINDS) - 1))]
    if kind == "action":
        return draw(_action(label, annotate=annotate))
    if kind == "final":
        return draw(_action(label, annotate=annotate, completion=True))
    if kind == "system":
        return [{"role": "system", "content": draw(_content(f"{label} note"))}]
    message: Message = {"role": "assistant", "content": draw(_content(label))}
    message.update(draw(_vendor_keys("assistant")))
    agent = draw(_MAYBE_AGENT)
    if kind == "synthesis" and annotate:
        phase = draw(st.integers(0, 3))
        message.update(
            {"message_type": "synthesis", "phase_id": phase if draw(st.booleans()) else str(phase)}
        )
        if agent is not None:
            message["agent"] = agent
    else:
        message.update(draw(_annotations((None, "final"), agent, annotate)))
    return [message]


@st.composite
def conversations(draw: st.DrawFn, max_turns: int = 4, max_steps: int = 4) -> list[Message]:
    """A valid ``messages`` list (every invariant of docs/architecture.md holds)."""
    annotate = draw(st.booleans())
    messages: list[Message] = []
    for i in range(draw(st.integers(0, 2))):
        role = ("system", "developer")[draw(st.integers(0, 1))] if i else "system"
        messages.append({"role": role, "content": draw(_content(f"system {i}"))})
    for turn in range(draw(st.integers(1, max_turns))):
        # user messages carry no `agent`: a task is addressed to the agent, not produced by another one
        task: Message = {"role": "user", "content": draw(_content(f"task {turn}", images=True))}
        task.update(draw(_vendor_keys("user")))
        if annotate and draw(st.booleans()):
            task["message_type"] = "task"
        if annotate and draw(st.integers(0, 4)) == 0:
            task["tags"] = [TAGS[draw(st.integers(0, 1))]]
        messages.append(task)
        for step in range(draw(st.integers(0, max_steps))):
            messages.extend(draw(_step(f"t{turn}s{step}", annotate)))
    if draw(st.integers(0, 5)) == 0:
        messages.extend(draw(_action("pending", annotate=annotate, answered=False)))
    return messages


def filter_contexts() -> st.SearchStrategy[FilterContext]:
    """Request contexts: any role, agent among :data:`AGENTS` or none, phase 0-3 or none, three models,
    and a summarizer that answers, one that fails, or none."""
    return st.builds(
        FilterContext,
        role=st.sampled_from(ROLES),
        agent=st.none() | st.sampled_from(AGENTS),
        phase=st.none() | st.sampled_from(PHASES),
        model=st.sampled_from(MODELS),
        tokens=st.just(SHARED_TOKENS),
        summarizer=st.sampled_from([FakeSummarizer(), FakeSummarizer(), FailingSummarizer(), None]),
        upstream=st.just("mock"),
    )
