"""Evidence kept *with its context* (docs/cost.md): the stricter reading a list of bare tokens cannot meet.

Evidence is what ``history_proxy.core.evidence`` defines: the distinctive tokens an answer took from an
earlier observation. *Token anywhere* counts one kept when it is anywhere in the request sent. Here a
token counts only when the request also holds the place it stood in an observation it came from,
verbatim up to whitespace:

* its *context*: the observation's word holding the token with the ``words`` (3) words before and after
  it on the same line (the whole line when shorter), as in ``port: 8080`` or
  ``"flight_number": "HAT170", "date": "2024-05-22",``;
* a token alone on its line (a listing entry, an array item) is taken with the lines before and after it;
* whitespace is ignored on both sides, so minified JSON and re-indented code lose nothing; any other
  rewording is a loss (a digest must quote, not paraphrase);
* a token held in several observations is kept when one of their contexts is in the request (the
  newest first; up to 40 occurrences in each).

Every lost token gets a reason: ``notice`` (the token is still in the request, only without its
context: a notice's fact list), ``elided`` (the observation it came from is still there, rewritten or
shortened) or ``dropped`` (that observation is no longer in the request). Unfiltered keeps 100 %.

The rules are the reference measure's (``shared/tools/evidence_context.py``), token for token; pure,
no I/O. ``history_proxy.devtools.replay`` reports it per request, first among the evidence figures.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from history_proxy.core.evidence import evidence_of, message_text, observation_flags
from history_proxy.core.messages import Message

WORDS = 3
"""Words either side of a token on its line that make its context."""
MAX_OCCURRENCES = 40
"""Occurrences of a token in one observation whose contexts are tried."""
REASONS = ("elided", "notice", "dropped")
"""Why a token lost its context: its observation rewritten, only the bare token left, the observation gone."""

_BLANKS = re.compile(r"[ \t\f\v\u00a0]+")
_ALL_WS = re.compile(r"\s+")


def normalised(text: str) -> str:
    """Runs of blanks as one space, lines stripped, blank lines dropped: how contexts are cut."""
    lines = (_BLANKS.sub(" ", line).strip() for line in text.splitlines())
    return "\n".join(line for line in lines if line)


def _line_around(obs: str, start: int, end: int) -> str:
    """The line before ``obs[start:end]``, the line itself and the line after, blank ones left out."""
    before = obs[obs.rfind("\n", 0, start - 1) + 1 : start - 1] if start > 0 else ""
    after = ""
    if end < len(obs):
        next_end = obs.find("\n", end + 1)
        after = obs[end + 1 : len(obs) if next_end < 0 else next_end]
    return "\n".join(x for x in (before, obs[start:end], after) if x)


def _word_at(words: list[str], position: int) -> int:
    """The index of the word holding ``position`` of the line they make (tokens hold no blank)."""
    offset = 0
    for index, word in enumerate(words):
        if offset + len(word) >= position:
            return index
        offset += len(word) + 1
    return len(words) - 1


def contexts(token: str, obs: str, words: int = WORDS) -> list[str]:
    """The contexts of ``token`` in the normalised observation text ``obs``, one per occurrence, in order."""
    out: list[str] = []
    start = 0
    while len(out) < MAX_OCCURRENCES:
        at = obs.find(token, start)
        if at < 0:
            break
        start = at + 1
        line_start = obs.rfind("\n", 0, at) + 1
        line_end = obs.find("\n", at)
        line_end = len(obs) if line_end < 0 else line_end
        line_words = obs[line_start:line_end].split(" ")
        if len(line_words) == 1:  # alone on its line: where it stood in the listing
            out.append(_line_around(obs, line_start, line_end))
            continue
        index = _word_at(line_words, at - line_start)
        out.append(" ".join(line_words[max(0, index - words) : index + words + 1]))
    return list(dict.fromkeys(out))


@dataclass(frozen=True)
class ContextEvidence:
    """One request's evidence under the three readings, and why each token without its context was lost."""

    needed: tuple[str, ...]
    """The evidence tokens, sorted."""
    anywhere: frozenset[str] = frozenset()
    """Those still anywhere in the request (the token-anywhere reading)."""
    unchanged: frozenset[str] = frozenset()
    """Those in a message the chain left exactly as it was."""
    lost: tuple[tuple[str, str], ...] = ()
    """``(token, reason)`` for each token whose context the request no longer holds; reason in REASONS."""
    with_context: frozenset[str] = field(default_factory=frozenset)
    """Those kept with their context (the headline reading)."""


@dataclass
class ContextMemo:
    """Per-conversation caches: normalised observation texts and each token's contexts in them.
    The answers never depend on it; one replay passes the same memo to every request."""

    normalised: dict[str, str] = field(default_factory=dict)
    contexts: dict[tuple[str, str], list[str]] = field(default_factory=dict)

    def blind_contexts(self, token: str, text: str, words: int) -> list[str]:
        key = (token, text)
        if key not in self.contexts:
            if text not in self.normalised:
                self.normalised[text] = normalised(text)
            found = contexts(token, self.normalised[text], words)
            self.contexts[key] = [_ALL_WS.sub("", c) for c in found]
        return self.contexts[key]


def _tool_match(prior: Sequence[Message], sent: Sequence[Message]) -> set[int]:
    """Indexes of ``prior``'s tool messages still answered in ``sent``: the next unmatched tool message
    with the same ``tool_call_id`` (ids repeat in some recordings; a chain keeps the order)."""
    queues: dict[object, list[int]] = {}
    for j, m in enumerate(prior):
        if m.get("role") == "tool":
            queues.setdefault(m.get("tool_call_id"), []).append(j)
    kept: set[int] = set()
    for m in sent:
        queue = queues.get(m.get("tool_call_id")) if m.get("role") == "tool" else None
        if queue:
            kept.add(queue.pop(0))
    return kept


def _still_there(prior: Sequence[Message], sent: Sequence[Message], role: object) -> set[int]:
    """Indexes of ``prior``'s messages of ``role`` the request still holds, as they were or rewritten. With
    no id to follow (a text-action agent's observations are user messages), the two lists are walked in
    order: a message equal to the next sent one is kept; else it was rewritten when as many remain on both
    sides, dropped when the request holds fewer."""
    ours = [j for j, m in enumerate(prior) if m.get("role") == role]
    theirs = [message_text(m) for m in sent if m.get("role") == role]
    kept: set[int] = set()
    at = 0
    for n, j in enumerate(ours):
        if at < len(theirs) and (theirs[at] == message_text(prior[j]) or len(ours) - n == len(theirs) - at):
            kept.add(j)
            at += 1
    return kept


def _reason(
    source: int,
    prior: Sequence[Message],
    sent: Sequence[Message],
    anywhere: bool,
    kept_tools: set[int],
) -> str:
    """Why a token last seen in ``prior[source]`` has no context in the request: see REASONS."""
    if anywhere:
        return "notice"
    message = prior[source]
    if message.get("role") == "tool":
        return "elided" if source in kept_tools else "dropped"
    return "elided" if source in _still_there(prior, sent, message.get("role")) else "dropped"


def measure_context(
    prior: Sequence[Message],
    answer: Message,
    sent: Sequence[Message],
    words: int = WORDS,
    memo: ContextMemo | None = None,
) -> ContextEvidence:
    """The evidence of ``answer`` given the history ``prior``, read three ways in the request ``sent``:
    token anywhere, in an unchanged message, with its context; each token without its context with why."""
    needed = sorted(evidence_of(prior, answer))
    if not needed:
        return ContextEvidence(())
    memo = memo if memo is not None else ContextMemo()
    sent_texts = [message_text(m) for m in sent]
    flat = " ".join(sent_texts)
    blind = _ALL_WS.sub("", "".join(sent_texts))
    original = {message_text(m) for m in prior}
    verbatim = " ".join(t for t in sent_texts if t in original)
    observations = [j for j, obs in enumerate(observation_flags(prior)) if obs]
    texts = {j: message_text(prior[j]) for j in observations}
    kept_tools = _tool_match(prior, sent)
    anywhere = frozenset(t for t in needed if t in flat)
    with_context: set[str] = set()
    lost: list[tuple[str, str]] = []
    for token in needed:
        sources = [j for j in observations if token in texts[j]]
        if any(c in blind for j in reversed(sources) for c in memo.blind_contexts(token, texts[j], words)):
            with_context.add(token)
        else:
            reason = _reason(sources[-1], prior, sent, token in anywhere, kept_tools)
            lost.append((token, reason))
    return ContextEvidence(
        needed=tuple(needed),
        anywhere=anywhere,
        unchanged=frozenset(t for t in needed if t in verbatim),
        lost=tuple(lost),
        with_context=frozenset(with_context),
    )
