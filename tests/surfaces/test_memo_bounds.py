"""The view memo bounded in bytes, forgetting idle conversations, and sealed per tenant."""

from __future__ import annotations

from typing import Any

import pytest

from history_proxy.core.tokens import TokenCounters
from history_proxy.surfaces import messages, responses
from history_proxy.surfaces.memo import ViewMemo, conversation_key

COUNTER = TokenCounters().get(model="claude-x")


def body(i: int, text: str = "x" * 10_000) -> dict[str, Any]:
    return {
        "model": "claude-x",
        "messages": [
            {"role": "user", "content": f"task {i}"},
            {"role": "assistant", "content": text},
            {"role": "user", "content": "next"},
        ],
    }


def test_the_memo_never_holds_more_than_its_byte_bound() -> None:
    memo = ViewMemo(1_000_000, max_bytes=200_000)
    for i in range(100):
        messages.to_view(body(i), COUNTER, memo)
        assert 0 < memo.held_bytes <= 200_000
    assert 1 < len(memo) < 100


def test_a_conversation_larger_than_the_bound_is_not_remembered() -> None:
    memo = ViewMemo(1_000_000, max_bytes=10_000)
    messages.to_view(body(0, "y" * 50_000), COUNTER, memo)
    assert len(memo) == 0 and memo.held_bytes == 0


def test_idle_conversations_are_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr("history_proxy.surfaces.memo.time.monotonic", lambda: now[0])
    memo = ViewMemo(1_000_000, idle_s=60)
    messages.to_view(body(0), COUNTER, memo)
    now[0] += 30
    messages.to_view(body(1), COUNTER, memo)
    assert len(memo) == 2
    now[0] += 40  # the first is idle for 70 s, the second for 40 s
    assert memo.held_bytes > 0 and len(memo) == 1
    now[0] += 61
    assert memo.held_bytes == 0 and len(memo) == 0


def test_one_tenant_never_reuses_another_tenants_conversation() -> None:
    memo = ViewMemo(1_000_000)
    messages.to_view(body(0), COUNTER, memo.for_tenant("a"))
    assert messages.to_view(body(0), COUNTER, memo.for_tenant("b")).reused == 0
    assert messages.to_view(body(0), COUNTER, memo.for_tenant("a")).reused == 3


@pytest.mark.parametrize("surface", ["messages", "responses"])
def test_the_bound_counts_the_opening_its_entries_hold(surface: str) -> None:
    """A 1 MB system prompt (or instructions) counts in the memo's bytes, and the key is a digest."""
    memo = ViewMemo(1_000_000, max_bytes=5_000_000)
    for i in range(20):
        system = f"{i} " + "s" * 1_000_000
        short = [{"role": "user", "content": "hi"}]
        if surface == "messages":
            messages.to_view({"model": "claude-x", "system": system, "messages": short}, COUNTER, memo)
        else:
            responses.to_view({"model": "gpt-4o", "instructions": system, "input": short}, COUNTER, memo)
        assert memo.held_bytes >= 2_000_000 * min(len(memo), 1)  # each entry holds its opening
        assert memo.held_bytes <= 5_000_000
    assert 1 <= len(memo) <= 2  # 20 openings of 1 MB never all held under a 5 MB bound
    key = conversation_key(surface, "s" * 1_000_000, [{"role": "user", "content": "hi"}])
    assert key is not None and len(key.key) < 64 and key.opening_bytes > 1_000_000
