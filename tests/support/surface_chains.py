"""Chains run over Responses and Messages requests in the surface property suites: one pipeline per chain."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import settings

from history_proxy.config.models import Config
from history_proxy.core.identity import Identity
from history_proxy.filters import Filter
from history_proxy.pipeline.run import Pipeline
from tests.strategies import PROPERTY_SETTINGS, SHARED_TOKENS, FakeSummarizer

IDENTITY = Identity(role="r", agent="alice", phase="1")
SETTINGS = settings(PROPERTY_SETTINGS, max_examples=min(PROPERTY_SETTINGS.max_examples, 25))
_PIPELINES: dict[str, Pipeline] = {}


def pipeline_for(chain: list[Filter]) -> Pipeline:
    dumped = [f.model_dump(mode="json") for f in chain]
    key = json.dumps(dumped, sort_keys=True)
    if key not in _PIPELINES:
        config = Config.model_validate(
            {"upstreams": {"u": {"base_url": "mock://"}}, "policies": {"roles": {"r": dumped}}}
        )
        _PIPELINES[key] = Pipeline(config, SHARED_TOKENS, summarizer=FakeSummarizer())
    return _PIPELINES[key]


def in_order(sent: list[Any], original: list[Any]) -> bool:
    """Every sent item that the client sent too appears in the client's order."""
    at = 0
    for item in sent:
        for k in range(at, len(original)):
            if original[k] == item:
                at = k + 1
                break
    return all(item in original for item in sent if item in original)
