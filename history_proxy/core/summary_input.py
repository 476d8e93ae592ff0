"""What a summary call may carry: plain chat messages, never a surface view's internals.

A surface adapter's view (``history_proxy.surfaces._view``) marks each view message with :data:`VIEW_REF`
(its native unit) and stands for an image by a placeholder part that keeps the native block under
:data:`NATIVE_PART`. A summary call is sent to a model as a chat completion, so
:func:`summary_messages` writes those messages back as the native content says: images as the
native image (a ``data:`` URL or the native URL), other native blocks as a short text naming them,
and no internal key.
"""

from __future__ import annotations

from typing import Any

from history_proxy.core.messages import Message

SUMMARY_PURPOSE = "summary"
"""``x-history-purpose`` of the proxy's own summary requests (the built-in mock answers them with a summary)."""

VIEW_REF = "history_ref"
"""The view message's key holding the index of its native unit (internal: never sent anywhere)."""
NATIVE_PART = "history_native"
"""The key of a view's placeholder part holding the native block it stands for (internal)."""
PLACEHOLDER_URL = "native"


def summary_messages(messages: list[Message]) -> list[Message]:
    """``messages`` as a summary model may read them: no internal key, images as sent natively."""
    return [_message(message) for message in messages]


def _message(message: Message) -> Message:
    content = message.get("content")
    if VIEW_REF not in message and not isinstance(content, list):
        return message
    out = {key: value for key, value in message.items() if key != VIEW_REF}
    if isinstance(content, list):
        out["content"] = [_part(part) for part in content]
    return out


def _part(part: Any) -> Any:
    if not isinstance(part, dict):
        return part
    native = part.get(NATIVE_PART)
    image = part.get("image_url")
    if isinstance(image, dict) and image.get("url") == PLACEHOLDER_URL:
        url = native_image_url(native)
        return (
            {"type": "image_url", "image_url": {"url": url}} if url else {"type": "text", "text": "[image]"}
        )
    if part.get("type") not in ("text", "image_url", "refusal") or NATIVE_PART in part:
        return {"type": "text", "text": f"[{part.get('type')}]"}
    return part


def native_image_url(block: Any) -> str | None:
    """The URL (or ``data:`` URL) of a native image block: Messages ``image`` or Responses ``input_image``."""
    if not isinstance(block, dict):
        return None
    url = block.get("image_url")
    if isinstance(url, dict):
        url = url.get("url")
    if isinstance(url, str) and url:
        return url
    source = block.get("source")
    if not isinstance(source, dict):
        return None
    if source.get("type") == "base64" and isinstance(source.get("data"), str):
        return f"data:{source.get('media_type') or 'image/png'};base64,{source['data']}"
    if source.get("type") == "url" and isinstance(source.get("url"), str):
        return str(source["url"])
    return None
