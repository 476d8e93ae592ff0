"""The ``summary_cache`` config block (where ``summarize`` keeps summaries) and URL redaction.

A leaf: pydantic only, so loading a config never imports the Redis client.
"""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator


def redacted_url(url: str) -> str:
    """``url`` with any password (in the authority or the query) replaced by ``***``."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password is not None:
        userinfo, _, host = netloc.rpartition("@")
        netloc = f"{userinfo.partition(':')[0]}:***@{host}"
    query = re.sub(r"(?i)(password=)[^&]*", r"\1***", parts.query)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


class SummaryCacheConfig(BaseModel):
    """Where ``summarize`` keeps its summaries: this process's memory, or Redis shared by every replica."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: Literal["memory", "redis"] = "memory"
    """``memory``: an LRU in each process; ``redis``: shared through Redis, with the memory LRU in front."""
    url: SecretStr | None = None
    """Redis URL (``redis://[:password@]host:6379/0``, ``rediss://``, ``unix://``); required for redis."""
    max_entries: int = Field(default=1024, ge=1)
    """Summaries kept in each process's memory (least recently used go first)."""
    max_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    """The most those summaries may hold in each process's memory, in bytes of their text."""
    ttl_s: int | None = Field(default=7 * 24 * 3600, ge=1)
    """How long Redis keeps a summary (none: until Redis evicts it)."""
    key_prefix: str = "history-proxy:"
    """Prefix of every Redis key, so several deployments can share one Redis."""
    timeout_s: float = Field(default=0.5, gt=0)
    """Redis connect and command timeout; past it the proxy serves from its memory cache."""

    @model_validator(mode="after")
    def _redis_needs_a_url(self) -> SummaryCacheConfig:
        url = self.url.get_secret_value() if self.url is not None else ""
        if self.backend == "redis" and not url:
            raise ValueError("url is required when backend is redis, e.g. redis://localhost:6379/0")
        if url and not re.match(r"^(rediss?|unix)://", url):
            raise ValueError("url must start with redis://, rediss:// or unix://")
        return self

    def describe(self) -> str:
        """One line, password redacted."""
        if self.backend == "redis" and self.url is not None:
            return f"redis at {redacted_url(self.url.get_secret_value())}"
        return f"memory ({self.max_entries} entries)"
