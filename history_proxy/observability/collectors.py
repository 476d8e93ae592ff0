"""What every collector family of :class:`~history_proxy.observability.metrics.Metrics` shares: the label
for "not known" and a child cache per label set."""

from __future__ import annotations

from typing import Generic, TypeVar

from prometheus_client import Counter, Histogram

NO_LABEL = "none"
"""The ``role`` before the caller is known, the ``upstream`` of a request that reached none."""
CHILDREN_KEPT = 1024
"""Label sets :class:`Children` remembers per collector (the labels are bounded; this is a backstop)."""

Collector = TypeVar("Collector", Counter, Histogram)


class Children(Generic[Collector]):
    """A collector's child per label values, found by a dict lookup instead of ``labels()`` each time.

    The children are prometheus-client's own (it keeps every one it makes), so values and exposition
    are those of ``collector.labels(...)``, multiprocess mode included.
    """

    __slots__ = ("_known", "collector")

    def __init__(self, collector: Collector) -> None:
        self.collector: Collector = collector
        self._known: dict[tuple[str, ...], Collector] = {}

    def __call__(self, *values: str) -> Collector:
        child = self._known.get(values)
        if child is None:
            child = self.collector.labels(*values)
            if len(self._known) < CHILDREN_KEPT:
                self._known[values] = child
        return child
