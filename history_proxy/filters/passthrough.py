"""``passthrough``: the message list unchanged (all five sources have this default)."""

from __future__ import annotations

from typing import Literal

from history_proxy.core.messages import Message
from history_proxy.filters.base import Filter, FilterContext


class Passthrough(Filter):
    """Forward the history unchanged.

    ```yaml
    - type: passthrough
    ```
    """

    type: Literal["passthrough"] = "passthrough"
    cache_friendly = "yes: nothing changes"

    def idle_reason(self, tokens: int, ctx: FilterContext) -> str:
        return "forwards the history unchanged, by design"

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        return list(messages)
