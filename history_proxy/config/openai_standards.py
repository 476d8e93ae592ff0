"""What an upstream speaks of OpenAI's context standards: Responses compaction and cache breakpoints.

Two fields of every ``upstreams.<name>`` entry (:class:`OpenAIStandards`, a base of
:class:`~history_proxy.config.models.UpstreamConfig`), each ``auto`` by default:

``responses_compaction``
    ``native``: ``POST /v1/responses/compact`` and Responses ``context_management`` are forwarded (after
    the policies), and a ``compaction`` item goes upstream as it came. ``emulate``: the proxy answers
    ``/v1/responses/compact`` itself and applies ``context_management: [{type: compaction}]`` inline,
    with ``compaction`` items of its own (docs/surfaces.md); OpenAI's ``compaction`` items are never
    sent there. ``strip``: ``context_management`` and OpenAI's ``compaction`` items are removed,
    ``/v1/responses/compact`` is forwarded for the upstream to answer. ``auto``: ``native`` for
    ``api.openai.com`` and the built-in mock, ``emulate`` for every other upstream.

``cache_breakpoints``
    ``native``: the client's ``prompt_cache_breakpoint`` parts and ``prompt_cache_options`` go upstream as
    sent; with the ``cache_control`` slot configured the proxy adds breakpoints of its own (up to 4 in
    all) for models matching ``cache_breakpoint_models``, and sets ``prompt_cache_key`` per conversation
    when the client did not. ``forward``: the client's go upstream as sent, the proxy adds nothing.
    ``strip``: the client's are removed. ``auto``: ``native`` for ``api.openai.com`` (unless the built-in
    mock answers in its place), ``forward`` elsewhere.
"""

from __future__ import annotations

import functools
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field

from history_proxy.config.strict import StrictModel

CompactionMode = Literal["native", "emulate", "strip"]
BreakpointMode = Literal["native", "forward", "strip"]
OPENAI_HOSTS = frozenset({"api.openai.com"})
"""Hosts of OpenAI's own API (the ``auto`` modes' ``native``)."""
BREAKPOINT_MODELS = ("gpt-5.6*", "gpt-5.7*", "gpt-5.8*", "gpt-5.9*", "gpt-6*")
"""Models that take explicit ``prompt_cache_breakpoint`` parts (GPT-5.6 on)."""


class OpenAIStandards(StrictModel):
    """The OpenAI context standards one upstream speaks (fields of ``upstreams.<name>``)."""

    responses_compaction: Literal["auto", "native", "emulate", "strip"] = "auto"
    """Responses compaction (``/v1/responses/compact``, ``context_management``): ``native``, ``emulate``
    (the proxy compacts with its summaries), ``strip``; ``auto``: native for api.openai.com and the mock."""
    cache_breakpoints: Literal["auto", "native", "forward", "strip"] = "auto"
    """OpenAI ``prompt_cache_breakpoint`` parts: ``native`` (the proxy places its own too), ``forward``
    (the client's as sent), ``strip``; ``auto``: native for api.openai.com, else forward."""
    cache_breakpoint_models: list[str] = Field(default_factory=lambda: list(BREAKPOINT_MODELS))
    """Model globs the proxy places breakpoints for, in ``native`` mode (the client's pass for any model)."""


@functools.lru_cache(maxsize=256)  # asked on every request; a config names a few base URLs
def is_openai(base_url: str) -> bool:
    """Whether ``base_url`` is OpenAI's own API."""
    parts = urlsplit(base_url)
    return parts.scheme == "https" and parts.hostname in OPENAI_HOSTS


def compaction_mode(standards: OpenAIStandards, base_url: str, is_mock: bool) -> CompactionMode:
    """The Responses compaction mode ``auto`` stands for on an upstream at ``base_url``."""
    mode = standards.responses_compaction
    if mode != "auto":
        return mode
    return "native" if is_mock or is_openai(base_url) else "emulate"


def breakpoint_mode(standards: OpenAIStandards, base_url: str, is_mock: bool) -> BreakpointMode:
    """The cache breakpoint mode ``auto`` stands for on an upstream at ``base_url`` (the built-in mock
    answering in its place, with no key, caches nothing: ``forward``)."""
    mode = standards.cache_breakpoints
    if mode != "auto":
        return mode
    return "native" if is_openai(base_url) and not is_mock else "forward"
