"""``history_proxy_token_ratio``: the learned ratio of each upstream's input tokens to the proxy's count.

A gauge per (upstream, model family), read from :class:`~history_proxy.core.calibration.Calibration` when
``/metrics`` is scraped; fed by :func:`observe` from every answered request that reported its input
tokens (not those whose history the proxy edited after counting it: their count is not what was sent).
Under ``serve --workers N`` each worker learns its own ratios and the gauge shows the scraped worker's.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from history_proxy.core.calibration import Calibration
from history_proxy.observability.access import Exchange

UNCOUNTED_NOTE = "context_management:emulated"
"""A request whose body the proxy edited after the chain counted it: its count teaches nothing."""


class RatioCollector(Collector):
    """Exposes a :class:`Calibration`'s ratios at scrape time."""

    def __init__(self, calibration: Calibration) -> None:
        self.calibration = calibration

    def collect(self) -> Iterator[Metric]:
        gauge = GaugeMetricFamily(
            "history_proxy_token_ratio",
            "Upstream-reported input tokens per token the proxy counts, by upstream and model family",
            labels=["upstream", "family"],
        )
        for upstream, family, ratio in self.calibration.items():
            gauge.add_metric([upstream, family], ratio)
        yield gauge


def register(registry: CollectorRegistry, calibration: Calibration) -> None:
    """Expose ``calibration`` in ``registry``."""
    registry.register(RatioCollector(calibration))


def observe(calibration: Calibration, exchange: Exchange) -> None:
    """Learn from one finished request: the chain's count of what it sent against the reported usage."""
    result, usage, upstream = exchange.result, exchange.usage, exchange.upstream
    if result is None or usage is None or upstream is None or exchange.status != 200:
        return
    if UNCOUNTED_NOTE in (result.report.get("notes") or ()):
        return
    calibration.observe(upstream, exchange.model or "", result.tokens_after, usage.input_tokens)
