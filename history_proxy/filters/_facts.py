"""Elision notices that keep an old output's facts (``last_n_observations`` with ``notice: facts``).

An agent goes on to use what it read: a reservation id, a path, a line number, a function name. A
notice that says only ``(L lines omitted)`` hides them; this one lists the output's distinctive tokens
(``history_proxy.core.evidence.DISTINCTIVE``: paths and dotted names, identifiers of 6+ characters, numbers
of 4+ digits) that no earlier message of the request holds, in the order they first appear:

    Old environment output: (120 lines omitted; facts: src/app.py handle_request 4417 ...)

Every distinctive token of the history then stays somewhere in the request: in a message kept as it
was, or in the notice of the first elided output that held it. The notice is a function of the
output and the messages before it only, so it is the same on every request and every replica, and a
kept prefix stays byte-identical between advances (prompt-cache friendly).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

from history_proxy.core.evidence import DISTINCTIVE, message_text
from history_proxy.core.messages import Message
from history_proxy.filters._memo import BoundedMemo

FACTS_LABEL = "facts: "


class FactsMemo(BoundedMemo[str, tuple[str, ...]]):
    """The distinctive tokens of texts already read, in first-appearance order, so an old message is
    scanned once rather than on every request that still carries it (bounded: :class:`BoundedMemo`)."""

    def __init__(self, *, max_entries: int = 8192, max_chars: int = 16_000_000) -> None:
        super().__init__(max_entries=max_entries, max_chars=max_chars)

    def tokens(self, text: str) -> tuple[str, ...]:
        """The distinct distinctive tokens of ``text``, in the order they first appear."""
        return self.remembered(text, len(text), lambda: tuple(dict.fromkeys(DISTINCTIVE.findall(text))))


def new_facts(messages: Sequence[Message], positions: Sequence[int], memo: FactsMemo) -> dict[int, list[str]]:
    """For each message at ``positions``: its distinctive tokens that no earlier message holds."""
    wanted = set(positions)
    last = max(positions, default=-1)
    seen: set[str] = set()
    out: dict[int, list[str]] = {}
    for i in range(last + 1):
        tokens = memo.tokens(message_text(messages[i]))
        if i in wanted:
            out[i] = [t for t in tokens if t not in seen]
        seen.update(tokens)
    return out


def with_facts(notice: str, facts: Sequence[str]) -> str:
    """``Old environment output: (L lines omitted; facts: a b c)``, or the notice alone without facts."""
    if not facts or not notice.endswith(")"):
        return notice
    head, _, tail = notice.partition(")")
    return f"{head}; {FACTS_LABEL}{' '.join(facts)}){tail}"


def quoted_by_recent_steps(
    messages: Sequence[Message],
    outputs: Sequence[int],
    memo: FactsMemo,
    recent: int,
    facts: dict[int, list[str]] | None = None,
) -> Callable[[int, int], bool]:
    """``quoted(k, end)``: whether one of the ``recent`` newest assistant messages before ``end`` quotes a
    fact of the output at ``outputs[k]`` (a distinctive token of it that no message before it holds);
    ``facts``: :func:`new_facts` of those outputs, when already known."""
    facts = facts if facts is not None else new_facts(messages, outputs, memo)
    owner = {token: k for k, i in enumerate(outputs) for token in facts[i]}
    steps: list[int] = []  # the assistant messages, in order
    quotes: list[set[int]] = []  # for each, the outputs whose facts it quotes
    for i, message in enumerate(messages):
        if message.get("role") == "assistant":
            steps.append(i)
            quotes.append({owner[t] for t in memo.tokens(message_text(message)) if t in owner})

    def quoted(k: int, end: int) -> bool:
        last = bisect.bisect_left(steps, end)
        return any(k in quotes[j] for j in range(max(0, last - recent), last))

    return quoted
