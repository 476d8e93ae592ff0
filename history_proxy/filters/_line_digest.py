"""Elision notices that keep an old output's facts *in place* (``last_n_observations`` with ``notice: digest``).

A fact list (``_facts``) keeps an elided output's ids, paths and numbers as bare tokens: the agent keeps
"8080" but not that it was the port. A digest quotes instead: the output's lines that hold a distinctive
token no earlier message holds, verbatim (line numbers included where the output had them), in the
output's order, up to a share of the output's characters:

    Old environment output: (86 lines omitted; 3 quoted)
      412	    def _serialize(self, value, attr, obj, **kwargs):
    …
      418	        return int(value.total_seconds() / base_unit.total_seconds())

Which lines go first: those of tokens holding a digit, a ``/`` or a ``.`` (ids, numbers, paths, dotted
names), then the other identifiers, each in first-appearance order. A token alone on its line (a
listing entry) is quoted with the lines around it; a line longer than ``LONG_LINE`` characters
(minified JSON, a log record) is quoted as the ``EXCERPT_WORDS`` words either side of the token. The
tokens the share leaves out are listed bare after the quotes (``facts: ...``), so every distinctive
token of the history stays in the request. The notice is a function of the output and the messages
before it only: the same on every request and replica (prompt-cache friendly).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from history_proxy.filters._facts import FACTS_LABEL
from history_proxy.filters._memo import BoundedMemo

LONG_LINE = 240
"""A line longer than this many characters is quoted as an excerpt around each of its tokens."""
EXCERPT_WORDS = 5
"""Words kept either side of a token quoted from a long line."""
GAP = "…"
"""Stands between quotes that were not adjacent in the output."""
_BLANKS = re.compile(r"[ \t]+")


def _priority(token: str) -> int:
    """0 for ids, numbers, paths and dotted names (a digit, ``/`` or ``.``), 1 for plain identifiers."""
    return 0 if any(c.isdigit() or c in "/." for c in token) else 1


def _around(line: str, token: str) -> str:
    """The characters of ``line`` around the first occurrence of ``token``, a quarter of LONG_LINE each side."""
    found = line.index(token)
    start, end = max(0, found - LONG_LINE // 4), found + len(token) + LONG_LINE // 4
    return ("… " if start else "") + line[start:end] + (" …" if end < len(line) else "")


def _excerpt(line: str, token: str) -> str:
    """The words of ``line`` around the first occurrence of ``token``, verbatim but for runs of blanks."""
    words = _BLANKS.split(line.strip())
    at = next((k for k, word in enumerate(words) if token in word), None)
    if at is None:  # the token spans a blank of another kind: the characters around it instead
        return _around(line, token)
    start, end = max(0, at - EXCERPT_WORDS), at + EXCERPT_WORDS + 1
    excerpt = " ".join(words[start:end])
    if len(excerpt) > LONG_LINE:  # long words (minified JSON): the characters around the token
        return _around(line, token)
    return ("… " if start else "") + excerpt + (" …" if end < len(words) else "")


Place = tuple[int, int]
"""Where a quote stood: its line number, and for an excerpt of a long line where in the line it starts."""


def _quotes_for(lines: list[str], token: str) -> list[tuple[Place, str]] | None:
    """The quotes that keep ``token`` in place, each with its place, or None when no line holds it."""
    for number, line in enumerate(lines):
        at = line.find(token)
        if at < 0:
            continue
        if len(line) > LONG_LINE:
            return [((number, at + 1), _excerpt(line, token))]
        if line.strip() == token:  # alone on its line: where it stood in the listing
            return [((k, 0), lines[k]) for k in range(max(0, number - 1), min(len(lines), number + 2))]
        return [((number, 0), line)]
    return None


def _pick(tokens: Sequence[str], lines: list[str], budget: int | None, picked: dict[Place, str]) -> list[str]:
    """Quote the lines keeping each of ``tokens`` into ``picked`` (place -> quote) while their
    characters stay within ``budget`` (None: no limit); the tokens left unquoted."""
    used = sum(len(q) + 1 for q in picked.values())
    left: list[str] = []
    for token in tokens:
        if any(token in quote for quote in picked.values()):
            continue
        quotes = _quotes_for(lines, token)
        cost = sum(len(q) + 1 for k, q in quotes if k not in picked) if quotes else 0
        if quotes is None or (budget is not None and used + cost > budget):
            left.append(token)
            continue
        picked.update((k, q) for k, q in quotes if k not in picked)
        used += cost
    return left


def line_digest(
    text: str, facts: Sequence[str], share: float, must: frozenset[str] = frozenset()
) -> tuple[list[str], list[str]]:
    """The digest of ``text``: the quoted lines (in the output's order, ``GAP`` between non-adjacent
    ones) and the facts left unquoted, for the new ``facts`` of that output within ``share`` of its
    characters; the facts in ``must`` (those a later step quoted: recall) first and whatever they cost."""
    if not facts:
        return [], []
    lines = text.splitlines()
    picked: dict[Place, str] = {}
    order = sorted(facts, key=_priority)  # stable: first-appearance order within each class
    left = _pick(order, lines, int(len(text) * share), picked)
    # then the facts a later step asked for: asking for one already quoted changes nothing
    unasked = _pick([t for t in left if t in must], lines, None, picked)
    left = [t for t in left if t not in must or t in unasked]
    out: list[str] = []
    previous = None
    for place in sorted(picked):
        if previous is not None and place[0] > previous + 1:
            out.append(GAP)
        out.append(picked[place])
        previous = place[0]
    return out, left


class DigestMemo(
    BoundedMemo[tuple[str, tuple[str, ...], float, frozenset[str]], tuple[list[str], list[str]]]
):
    """Digests already made, keyed by the output and what shaped them, so an old output is digested
    once rather than on every request that still carries it (bounded: :class:`BoundedMemo`)."""

    def __init__(self, *, max_entries: int = 4096, max_chars: int = 8_000_000) -> None:
        super().__init__(max_entries=max_entries, max_chars=max_chars)

    def digest(
        self, text: str, facts: Sequence[str], share: float, must: frozenset[str]
    ) -> tuple[list[str], list[str]]:
        """:func:`line_digest`, remembered."""
        key = (text, tuple(facts), share, must)
        return self.remembered(key, len(text), lambda: line_digest(text, facts, share, must))


def digest_notice(notice: str, quotes: Sequence[str], left: Sequence[str]) -> str:
    """``notice`` (``... (L lines omitted)``) with the digest: ``; N quoted`` and the quotes on the lines
    after it, then the unquoted facts."""
    if not quotes and not left:
        return notice
    head, _, tail = notice.partition(")")
    parts = [f"{len([q for q in quotes if q != GAP])} quoted"] if quotes else []
    if left:
        parts.append(FACTS_LABEL + " ".join(left))
    return "\n".join([f"{head}; {'; '.join(parts)}){tail}", *quotes])
