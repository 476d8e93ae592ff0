"""Evidence kept (docs/cost.md): what of an agent's next answer it could only have read in an observation.

For a request (the history before a model answer), the *evidence* of that answer is the set of
distinctive tokens in it (its text and its tool calls' names and arguments: paths and dotted names,
identifiers of 6+ characters, numbers of 4+ digits) that occur in some earlier observation and in no
earlier non-observation message. Observations are tool messages and, in text-action conversations, the
user messages after the first that carry no ``name``. *Evidence kept* is the share of those tokens
present anywhere in the request a chain sends. Occurrence is substring containment over the messages'
text joined, as in the reference measure (``shared/tools/evidence_kept.py``), so a path read as
``/repo/src/a.py`` is evidence for an answer naming ``src/a.py``.

Pure: no I/O. The replay (``history_proxy.devtools.replay``) measures it per request; filters use
:data:`DISTINCTIVE` to keep an elided output's facts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from history_proxy.core.messages import Message, tool_calls

DISTINCTIVE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:[./][A-Za-z0-9_]+)+|[A-Za-z_][A-Za-z0-9_]{5,}|\d{4,}")
"""A distinctive token: a path or dotted name, an identifier of 6+ characters, a number of 4+ digits."""


def message_text(message: Message) -> str:
    """The text the measure reads in a message: its content's text, then each tool call's name and arguments."""
    content = message.get("content")
    out = [content] if isinstance(content, str) else []
    if isinstance(content, list):  # every part's text, whatever its type (as the reference reads it)
        out += [p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
    for call in tool_calls(message):
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            out += [str(function.get("name", "")), str(function.get("arguments", ""))]
    return "\n".join(out)


def observation_flags(messages: Sequence[Message]) -> list[bool]:
    """Which messages are observations: tool messages, and user messages after the first without a ``name``."""
    first_user = next((i for i, m in enumerate(messages) if m.get("role") == "user"), None)
    return [
        m.get("role") == "tool" or (m.get("role") == "user" and i != first_user and not m.get("name"))
        for i, m in enumerate(messages)
    ]


def evidence_of(prior: Sequence[Message], answer: Message) -> set[str]:
    """The distinctive tokens of ``answer`` read in an observation of ``prior`` and nowhere else in it."""
    used = set(DISTINCTIVE.findall(message_text(answer)))
    if not used:
        return set()
    flags = observation_flags(prior)
    seen_obs = " ".join(message_text(m) for m, obs in zip(prior, flags, strict=True) if obs)
    seen_other = " ".join(message_text(m) for m, obs in zip(prior, flags, strict=True) if not obs)
    return {t for t in used if t in seen_obs and t not in seen_other}


@dataclass(frozen=True)
class Evidence:
    """One request's evidence: the tokens the answer needed, those the sent request lost, and those it
    holds only outside their context (in no message the chain left as it was: a digest, a notice)."""

    needed: tuple[str, ...]
    lost: tuple[str, ...]
    out_of_context: tuple[str, ...] = ()

    @property
    def kept(self) -> int:
        return len(self.needed) - len(self.lost)

    @property
    def in_context(self) -> int:
        return len(self.needed) - len(self.lost) - len(self.out_of_context)


def measure(prior: Sequence[Message], answer: Message, sent: Sequence[Message]) -> Evidence:
    """The evidence of ``answer`` given the history ``prior``, what of it ``sent`` no longer holds, and
    what it holds only in messages the chain changed (a stricter reading: the token without its context)."""
    needed = evidence_of(prior, answer)
    if not needed:
        return Evidence((), ())
    texts = [message_text(m) for m in sent]
    text = " ".join(texts)
    lost = {t for t in needed if t not in text}
    unchanged = {message_text(m) for m in prior}
    verbatim = " ".join(t for t in texts if t in unchanged)
    outside = {t for t in needed - lost if t not in verbatim}
    return Evidence(tuple(sorted(needed)), tuple(sorted(lost)), tuple(sorted(outside)))


def kept_share(kept: int, needed: int) -> float:
    """``kept / needed``, 1.0 when nothing was needed."""
    return kept / needed if needed else 1.0
