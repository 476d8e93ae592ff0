"""Token counts that match the provider's: the ratio of an upstream's reported input tokens to ours.

The proxy counts every model's tokens with a tiktoken encoding; Claude's tokenizer counts the same
text as more tokens (a production report measured 1.63x). Per upstream and model family
(:func:`family_of`), :class:`Calibration` learns the ratio of the input tokens the upstream reports
in its answers' ``usage`` to the proxy's own count of the request it sent, as an exponentially
smoothed mean (``SMOOTHING`` of each new observation), bounded to ``[MIN_RATIO, MAX_RATIO]``, and
starting from the config's ``upstreams.<name>.token_ratios`` (so a restart starts where the config
says, not from 1; a seed for ``claude`` covers ``claude-opus`` until it has a ratio of its own).
Token triggers and budgets divide their limit by the ratio (:func:`calibrated_limit`): a 100k
budget on an upstream that bills 1.6x fires at 62.5k counted tokens. ``count_tokens`` answers are
the provider's own and are never calibrated.

The table is bounded: at most ``MAX_ENTRIES`` (upstream, family) pairs, families being a handful of
words per upstream; further pairs are not learned (ratio 1, or their seed).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping

from history_proxy.core.windows import calibrated_limit

__all__ = ["Calibration", "calibrated_limit", "family_of"]

MIN_RATIO = 0.5
MAX_RATIO = 3.0
SMOOTHING = 0.2
"""Weight of each new observation in the smoothed ratio."""
MIN_COUNTED = 64
"""Requests the proxy counted under this many tokens teach nothing (fixed overheads dominate)."""
MAX_ENTRIES = 256


def family_of(model: str) -> str:
    """A model's family: its leading alphabetic words (``claude-opus-4-6`` -> ``claude-opus``,
    ``gpt-4o-mini`` -> ``gpt``), or its first word when none is alphabetic (``o3-mini`` -> ``o3``)."""
    words = model.lower().rpartition("/")[2].split("-")
    n = 0
    for word in words:
        if not (word.isalpha() and word.isascii()):
            break
        n += 1
    return "-".join(words[:n]) if n else (words[0] or "unknown")


def _bounded(ratio: float) -> float:
    return min(MAX_RATIO, max(MIN_RATIO, ratio))


class Calibration:
    """Learned ratios, per (upstream, model family), shared by every request of the process."""

    def __init__(self, seeds: Mapping[str, Mapping[str, float]] | None = None) -> None:
        self._ratios: dict[tuple[str, str], float] = {}
        self._seeds: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()
        self.seed(seeds or {})

    def seed(self, seeds: Mapping[str, Mapping[str, float]]) -> None:
        """Take a (reloaded) config's starting ratios; learned ratios of the same pairs are kept."""
        self._seeds = {
            (upstream, family): _bounded(ratio)
            for upstream, families in seeds.items()
            for family, ratio in families.items()
        }

    def ratio(self, upstream: str | None, model: str) -> float:
        """The ratio for a request to ``upstream`` with ``model`` (1.0 when nothing is known)."""
        if upstream is None or not (self._ratios or self._seeds):
            return 1.0  # nothing learned or seeded yet: no family to work out
        family = family_of(model)
        found = self._ratios.get((upstream, family))
        return found if found is not None else self._seed(upstream, family, 1.0)

    def _seed(self, upstream: str, family: str, default: float) -> float:
        """The configured ratio of ``family`` or of the nearest shorter family (``claude`` for
        ``claude-opus``), else ``default``."""
        while True:
            seeded = self._seeds.get((upstream, family))
            if seeded is not None:
                return seeded
            family, dash, _ = family.rpartition("-")
            if not dash:
                return default

    def observe(self, upstream: str, model: str, counted: int, reported: int) -> None:
        """One answer: the proxy counted ``counted`` input tokens, the upstream reported ``reported``."""
        if counted < MIN_COUNTED or reported <= 0:
            return
        key = (upstream, family_of(model))
        sample = _bounded(reported / counted)
        with self._lock:
            current = self._ratios.get(key)
            if current is None:
                if len(self._ratios) >= MAX_ENTRIES:
                    return
                current = self._seed(upstream, key[1], sample)
            self._ratios[key] = _bounded(current + SMOOTHING * (sample - current))

    def items(self) -> Iterator[tuple[str, str, float]]:
        """Every (upstream, family, ratio) known, seeded or learned (the /metrics gauge)."""
        known = {**self._seeds, **self._ratios}
        for (upstream, family), ratio in sorted(known.items()):
            yield upstream, family, ratio
