"""``sop_digest`` (Plexus's ``SOPAgentConversationFilter``, seed 002): older messages folded into one-line digests.

The newest group verbatim; every older message as one short line (``[3] User: ...``,
``[4] Assistant: Used tools: grep [EXPLORATION_STAGE]``, ``[5] Tool Result: <data returned>``), folded
into one system message after the leading system.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from history_proxy.core.messages import (
    SYSTEM_ROLES,
    Message,
    group_spans,
    leading_system_count,
    newest_user_index,
    text_of,
    tool_call_names,
)
from history_proxy.filters._digests import label, one_line, preview, stage_tag, system_message
from history_proxy.filters.base import Filter, FilterContext

SOP_HEADER = "📋 EARLIER CONVERSATION ({count} messages, one line each):"


def sop_line(index: int, message: Message, user_chars: int, assistant_chars: int) -> str:
    """One message as a line of the SOP digest (Plexus's ``_create_truncated_summary``)."""
    text = text_of(message.get("content"))
    names = tool_call_names(message)
    role = message.get("role")
    if role == "assistant" and names:
        return f"[{index}] Assistant: Used tools: {', '.join(names)}{stage_tag(text)}"
    if not text.strip():
        return f"[{index}] {label(message)}: <empty>"
    if role in SYSTEM_ROLES:
        return f"[{index}] System: Initial setup and role definition"
    if role == "user":
        return f"[{index}] User: {preview(one_line(text), user_chars)}"
    if role == "assistant":
        return f"[{index}] Assistant: {preview(one_line(text), assistant_chars)}{stage_tag(text)}"
    if role == "tool":
        return f"[{index}] Tool Result: <data returned>"
    return f"[{index}] {label(message)}: <content>"


class SopDigest(Filter):
    """The newest group verbatim; every older message folded into one system message of one-line digests.

    After the leading system messages comes one system message with a line per older message in
    Plexus's format and stage tags, then the newest group (an action with all its results, or one
    message). The newest user message, when it is older than the newest group, is kept verbatim
    between the digest and the newest group instead of being digested.

    ```yaml
    sop: [{type: sop_digest, user_chars: 60, assistant_chars: 40}]
    ```
    """

    type: Literal["sop_digest"]
    user_chars: int = Field(default=60, ge=1)
    """Characters of a user message shown in its digest line (Plexus: 60)."""
    assistant_chars: int = Field(default=40, ge=1)
    """Characters of an assistant's text shown in its digest line (Plexus: 40)."""
    cache_friendly = "no: the digest right after the leading system messages changes on every request"

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        lead = leading_system_count(messages)
        spans = group_spans(messages, lead)
        if not spans:
            return list(messages)
        newest_start = spans[-1][0]
        newest_user = newest_user_index(messages)
        kept_user = [newest_user] if newest_user is not None and newest_user < newest_start else []
        older = [i for i in range(lead, newest_start) if i not in kept_user]
        if not older:
            return list(messages)
        lines = [SOP_HEADER.format(count=len(older))]
        lines += [sop_line(i, messages[i], self.user_chars, self.assistant_chars) for i in older]
        return [
            *messages[:lead],
            system_message("\n".join(lines)),
            *(messages[i] for i in kept_user),
            *messages[newest_start:],
        ]
