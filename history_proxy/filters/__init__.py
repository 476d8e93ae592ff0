"""The filter library: one module per ``type`` tag, each with its pydantic config beside its logic.

``FILTER_CLASSES`` lists every filter explicitly (the config's union in
:mod:`history_proxy.config.policies` is built from the same names); ``FILTER_TYPES`` maps each ``type`` tag
to its class, sorted by name. Modules whose name starts with ``_`` hold helpers several filters share.
"""

from __future__ import annotations

import typing

from history_proxy.filters.base import Filter, FilterContext, Summarizer
from history_proxy.filters.cache_control import CacheControl
from history_proxy.filters.custom import Custom
from history_proxy.filters.last_n_observations import LastNObservations
from history_proxy.filters.manager_digest import ManagerDigest
from history_proxy.filters.manager_view import ManagerView
from history_proxy.filters.orchestrator_view import OrchestratorView
from history_proxy.filters.passthrough import Passthrough
from history_proxy.filters.remove_regex import RemoveRegex
from history_proxy.filters.sliding_window import SlidingWindow
from history_proxy.filters.sop_digest import SopDigest
from history_proxy.filters.summarize import Summarize
from history_proxy.filters.tag_tool_call_observations import TagToolCallObservations
from history_proxy.filters.token_limiter import TokenLimiter
from history_proxy.filters.tool_call_filter import ToolCallFilter
from history_proxy.filters.tool_result_truncation import ToolResultTruncation
from history_proxy.filters.truncate import Truncate
from history_proxy.filters.worker_compaction import WorkerCompaction
from history_proxy.filters.worker_view import WorkerView

__all__ = [
    "FILTER_CLASSES",
    "FILTER_TYPES",
    "CacheControl",
    "Custom",
    "Filter",
    "FilterContext",
    "LastNObservations",
    "ManagerDigest",
    "ManagerView",
    "OrchestratorView",
    "Passthrough",
    "RemoveRegex",
    "SlidingWindow",
    "SopDigest",
    "Summarize",
    "Summarizer",
    "TagToolCallObservations",
    "TokenLimiter",
    "ToolCallFilter",
    "ToolResultTruncation",
    "Truncate",
    "WorkerCompaction",
    "WorkerView",
    "type_tag",
]

FILTER_CLASSES: tuple[type[Filter], ...] = (
    CacheControl,
    Custom,
    LastNObservations,
    ManagerDigest,
    ManagerView,
    OrchestratorView,
    Passthrough,
    RemoveRegex,
    SlidingWindow,
    SopDigest,
    Summarize,
    TagToolCallObservations,
    TokenLimiter,
    ToolCallFilter,
    ToolResultTruncation,
    Truncate,
    WorkerCompaction,
    WorkerView,
)


def type_tag(cls: type[Filter]) -> str:
    """The ``type`` literal a filter class declares (``LastNObservations`` -> ``last_n_observations``)."""
    (tag,) = typing.get_args(cls.model_fields["type"].annotation)
    return str(tag)


FILTER_TYPES: dict[str, type[Filter]] = dict(sorted((type_tag(cls), cls) for cls in FILTER_CLASSES))
