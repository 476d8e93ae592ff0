"""The Messages requests the adapter cannot read, refused as Anthropic refuses them (shape and wording).

Never stricter than the upstream: only what no view can be made of is refused, and then with the
message Anthropic's API gives for the same mistake (``messages: Field required``,
``messages.1.content: Input should be a valid list``), so clients that match on the wording (Claude
Code's fallbacks do) behave as they would against the API itself. Roles other than user and
assistant are not refused: :mod:`history_proxy.surfaces.messages_pinned` carries them through.

Chat completions have their own validator, :func:`history_proxy.core.validation.request_messages`, with
OpenAI's wording and OpenAI's rules (every message checked, an unknown role refused): the two differ
on purpose, each as strict as its provider and no stricter, and share no name.
"""

from __future__ import annotations

from typing import Any, NoReturn

from history_proxy.errors import InvalidRequestError


def anthropic_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``messages`` list of a Messages body, checked: 400s worded as Anthropic's for the first
    field at fault.

    Only what the adapter cannot read is refused (what Anthropic refuses too): ``messages`` missing,
    not a list or empty; a message that is not an object; a user or assistant message whose
    ``content`` is neither a string nor a list of blocks. Any other role passes
    (:mod:`history_proxy.surfaces.messages_pinned`), where the chat validator
    (:func:`history_proxy.core.validation.request_messages`) refuses roles OpenAI does not know: Anthropic's
    rules and wording here, OpenAI's there, neither stricter than its upstream.
    """
    messages = body.get("messages")
    if messages is None:
        raise InvalidRequestError("messages: Field required", param="messages")
    if not isinstance(messages, list):
        raise InvalidRequestError("messages: Input should be a valid list", param="messages")
    if not messages:
        raise InvalidRequestError("messages: at least one message is required", param="messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InvalidRequestError(
                f"messages.{i}: Input should be a valid dictionary or object to extract fields from",
                param=f"messages.{i}",
            )
        if message.get("role") not in ("user", "assistant"):
            continue
        content = message.get("content")
        if content is None and "content" not in message:
            raise InvalidRequestError(f"messages.{i}.content: Field required", param=f"messages.{i}.content")
        if not isinstance(content, str) and not isinstance(content, list):
            raise InvalidRequestError(
                f"messages.{i}.content: Input should be a valid list", param=f"messages.{i}.content"
            )
        for b, block in enumerate(content if isinstance(content, list) else ()):
            if not isinstance(block, dict):
                raise InvalidRequestError(
                    f"messages.{i}.content.{b}: Input should be a valid dictionary or object to extract "
                    "fields from",
                    param=f"messages.{i}.content.{b}",
                )
    return messages


def refuse_anthropic_messages(body: dict[str, Any]) -> NoReturn:
    """Raise the 400 naming the first message at fault (``body`` has one: the adapter met it)."""
    anthropic_messages(body)
    raise AssertionError("anthropic_messages found no fault")
