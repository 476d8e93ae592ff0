"""One native request shaped by a chain without a server, and a Messages body shaped like Claude Code's."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import yaml

from history_proxy.config.models import Config
from history_proxy.core.identity import Identity
from history_proxy.core.tokens import TokenCounters
from history_proxy.pipeline.run import Pipeline
from history_proxy.surfaces.shape import shape

REPO = Path(__file__).resolve().parents[2]
NO_NETWORK_ROLES = ("orchestrator", "manager", "worker", "default")
"""The default config's roles whose chains need no model call (``planner`` summarizes)."""


def default_config(**extra: Any) -> Config:
    """``config/default.yaml`` with its upstream the in-process mock."""
    raw = yaml.safe_load((REPO / "config" / "default.yaml").read_text(encoding="utf-8"))
    raw["upstreams"] = {"mock": {"base_url": "mock://", **extra}}
    raw["routes"] = []  # its claude-* route names the anthropic upstream replaced here
    return Config.model_validate(raw)


def pipeline(
    chain: list[dict[str, Any]], *, marks: bool = False, slot: dict[str, Any] | None = None
) -> Pipeline:
    config = Config.model_validate(
        {
            "upstreams": {"u": {"base_url": "mock://", "cache_control": marks}},
            "policies": {"roles": {"r": chain}},
            **({"cache_control": slot} if slot else {}),
        }
    )
    return Pipeline(config, TokenCounters())


def run(surface: str, chain: list[dict[str, Any]], body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    shaped = asyncio.run(shape(surface, pipeline(chain, **kwargs), body, Identity(role="r"), "u"))
    return shaped.body


THINKING = {"type": "thinking", "thinking": "Let me look.", "signature": "EqQBCkYIBxgCKkA="}


def claude_code_body() -> dict[str, Any]:
    """The shape Claude Code sends: cached system blocks, tool results with a reminder text beside them."""
    return {
        "model": "claude-opus-4-1",
        "max_tokens": 32000,
        "system": [
            {"type": "text", "text": "You are Claude Code."},
            {"type": "text", "text": "Tools...", "cache_control": {"type": "ephemeral"}},
        ],
        "tools": [
            {"name": "Bash", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}}
        ],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "fix the test"}]},
            {
                "role": "assistant",
                "content": [
                    THINKING,
                    {"type": "text", "text": "Running it."},
                    {"type": "tool_use", "id": "tu1", "name": "Bash", "input": {"command": "pytest"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "tu1", "content": "1 failed\n" * 20},
                    {"type": "text", "text": "<system-reminder>todo list</system-reminder>"},
                ],
            },
            {
                "role": "assistant",
                "content": [{"type": "redacted_thinking", "data": "abc"}, {"type": "text", "text": "Fixed."}],
            },
            {"role": "user", "content": "thanks"},
        ],
    }


def in_place(sent: list[dict[str, Any]], original: list[dict[str, Any]]) -> bool:
    """Every sent message that came from the request keeps the request's relative order."""
    positions = [next(i for i, m in enumerate(original) if m == s) for s in sent if s in original]
    return positions == sorted(positions)


CHAINS: dict[str, list[dict[str, Any]]] = {
    "worker_view": [{"type": "worker_view", "turns": "first_user"}],
    "worker_view_every_user": [{"type": "worker_view"}],
    "orchestrator_view": [{"type": "orchestrator_view", "max_conversation_turns": 1}],
    "manager_view": [{"type": "manager_view", "turns": "first_user"}],
    "sop_digest": [{"type": "sop_digest"}],
    "manager_digest": [{"type": "manager_digest", "system_prompt": "You manage.", "recent": 2}],
    "sliding_window": [{"type": "sliding_window", "window_size": 1}],
    "truncate": [{"type": "truncate", "max_tokens": 50}],
    "token_limiter": [{"type": "token_limiter", "limit": 10, "tokenizer": "approximate"}],
    "token_limiter_no_system": [
        {"type": "token_limiter", "limit": 10, "tokenizer": "approximate", "keep_system": False}
    ],
    "summarize": [{"type": "summarize", "keep_recent": 1, "step": 1}],
    "worker_compaction": [{"type": "worker_compaction", "keep_recent": 0, "max_chars": 5}],
    "last_n_observations": [{"type": "last_n_observations", "n": 1}],
    "tool_call_filter": [{"type": "tool_call_filter"}],
    "remove_regex": [{"type": "remove_regex", "remove": ["SYS", "task"]}],
}


TEXT_REPLACED = frozenset({"manager_digest", "token_limiter_no_system", "remove_regex"})
"""Chains whose definition touches the text instructions: a system_prompt, keep_system: false, a regex."""
