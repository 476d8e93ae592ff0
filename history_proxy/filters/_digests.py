"""One-line digests of older messages for supervising agents (Plexus, seed 002): the shared line formats.

The line formats, stage tags and preview lengths are Plexus's; the numbers in brackets are indexes
into the request's ``messages``. Previews are made one line by collapsing whitespace.
"""

from __future__ import annotations

from history_proxy.core.messages import SYSTEM_ROLES, Message

STAGE_KEYWORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("HYPOTHESIS_STAGE", ("procedure", "hypothesis", "configuration", "yaml")),
    ("SYNTHESIS_STAGE", ("pattern", "root cause", "synthesis", "analysis shows")),
    ("EXPLORATION_STAGE", ("examining", "found feedback", "analyzing")),
)
"""Plexus's stage tags and the keywords (in an assistant's text) that set them; the first match wins."""


def one_line(text: str) -> str:
    """The text with every run of whitespace (newlines included) collapsed to one space."""
    return " ".join(text.split())


def preview(text: str, limit: int) -> str:
    """Plexus's preview: the first ``limit`` characters plus ``...`` when the text is longer."""
    return text[:limit] + "..." if len(text) > limit else text


def stage_tag(text: str) -> str:
    """`` [NAME_STAGE]`` for the first stage whose keyword occurs in the text, else ''."""
    lowered = text.lower()
    for tag, keywords in STAGE_KEYWORDS:
        if any(keyword in lowered for keyword in keywords):
            return f" [{tag}]"
    return ""


def label(message: Message) -> str:
    """How a digest line names the message's role."""
    role = str(message.get("role", ""))
    if role in SYSTEM_ROLES:
        return "System"
    if role == "tool":
        return "Tool Result"
    return {"user": "User", "assistant": "Assistant"}.get(role, role.capitalize() or "Message")


def system_message(text: str) -> Message:
    return {"role": "system", "content": text}
