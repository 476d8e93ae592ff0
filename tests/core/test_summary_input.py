"""Summary calls carry plain chat messages: no view internals, images as the native image."""

from __future__ import annotations

from history_proxy.core.summary_input import summary_messages
from history_proxy.surfaces import messages, responses


def test_a_messages_view_becomes_plain_chat_with_the_native_image() -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "AAAA"}}
    body = {
        "model": "claude-x",
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "look"}, image, {"type": "document", "source": {}}],
            }
        ],
    }
    plain = summary_messages(messages.to_view(body).messages)
    assert "history_ref" not in str(plain)
    assert {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AAAA"}} in plain[0]["content"]
    assert {"type": "text", "text": "[document]"} in plain[0]["content"]


def test_a_responses_image_keeps_its_url() -> None:
    body = {
        "model": "gpt-4o",
        "input": [{"role": "user", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]}],
    }
    plain = summary_messages(responses.to_view(body).messages)
    assert plain[0]["content"] == [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]
    assert "history_ref" not in plain[0]
