"""``remove_regex``: delete text matching regexes from older messages (SWE-agent's RemoveRegex, seed 003)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, PrivateAttr, field_validator

from history_proxy.core.invariants import empty_assistant_errors
from history_proxy.core.messages import Message, map_text
from history_proxy.filters.base import Filter, FilterContext

PLACEHOLDER = "(removed by history-proxy)"
"""The text an assistant message keeps when removing its matches would leave it empty (the words of
the Messages adapter's ``REMOVED``)."""


class RemoveRegex(Filter):
    """Delete every match of each pattern (``re.DOTALL``, in order) from the text of every message
    except the newest ``keep_last``.

    Only text is touched: a string content, or the text parts of a list content. An assistant
    message that would be left with neither text nor tool calls has :data:`PLACEHOLDER` in place of
    each text its matches emptied, so the text is still removed and the message keeps content
    (invariant 3).

    ```yaml
    global: [{type: remove_regex, remove: ["<diff>.*</diff>"], keep_last: 2}]
    ```
    """

    type: Literal["remove_regex"]
    remove: list[str] = Field(default_factory=lambda: ["<diff>.*</diff>"])
    """Regular expressions (Python syntax, DOTALL) whose matches are deleted, applied in this order."""
    keep_last: int = Field(default=0, ge=0)
    """How many of the newest messages (all roles) are left unchanged."""
    cache_friendly = (
        "yes with keep_last 0: every message is rewritten the same way on every request, so the prefix "
        "is stable; keep_last > 0 rewrites a message once it leaves the newest keep_last, changing the prefix"
    )
    _patterns: list[re.Pattern[str]] = PrivateAttr(default_factory=list)

    @field_validator("remove")
    @classmethod
    def _patterns_compile(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                re.compile(pattern, re.DOTALL)
            except re.error as exc:
                raise ValueError(f"invalid regex {pattern!r}: {exc}") from None
        return patterns

    def model_post_init(self, context: object, /) -> None:
        self._patterns = [re.compile(pattern, re.DOTALL) for pattern in self.remove]

    def cleaned(self, text: str) -> str:
        """``text`` with every pattern's matches deleted, pattern after pattern."""
        for pattern in self.private("_patterns"):
            text = pattern.sub("", text)
        return text

    def idle_reason(self, tokens: int, ctx: FilterContext) -> str:
        return "no match"

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        result = list(messages)
        for i in range(len(messages) - self.keep_last):
            message = messages[i]
            content = message.get("content")
            new_content = map_text(content, self.cleaned)
            if new_content == content:
                continue
            changed = {**message, "content": new_content}
            if empty_assistant_errors([changed]) and not empty_assistant_errors([message]):
                changed["content"] = map_text(content, self._placeheld)
            result[i] = changed
        return result

    def _placeheld(self, text: str) -> str:
        """``text`` cleaned, or :data:`PLACEHOLDER` when cleaning leaves a non-blank text blank."""
        cleaned = self.cleaned(text)
        return PLACEHOLDER if text.strip() and not cleaned.strip() else cleaned
