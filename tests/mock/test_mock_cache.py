"""The built-in mock's prompt cache: it reports cached tokens the way providers do (issue 18)."""

from __future__ import annotations

import json
from typing import Any

from history_proxy.core.messages import Message
from history_proxy.mock.cache import PromptCache
from history_proxy.mock.common import approximate_tokens, cache_report
from history_proxy.mock.upstream import create_mock_app
from tests.factories import assistant, system, user
from tests.support.mock_client import send

LOG = "line of output\n" * 400
"""About 1,500 tokens by the mock's count: over the 1,024 a prompt cache starts at."""


def growing() -> tuple[list[Message], list[Message]]:
    first = [system(), user("read the log\n" + LOG)]
    return first, [*first, assistant("done reading"), user("now fix it")]


def blocks(messages: list[Message]) -> int:
    return approximate_tokens(messages) // 128 * 128


def test_a_request_reads_the_longest_prefix_of_whole_messages_an_earlier_one_sent_in_128_token_blocks() -> (
    None
):
    cache = PromptCache()
    first, second = growing()
    one = cache_report(cache, "m", first)
    assert (one.cached_tokens, one.written_tokens) == (0, one.prompt_tokens)
    two = cache_report(cache, "m", second)
    assert two.cached_tokens == blocks(first) > 1024
    assert two.written_tokens == two.prompt_tokens - two.cached_tokens


def test_a_request_under_1024_tokens_is_neither_read_nor_written() -> None:
    cache = PromptCache()
    short = [system(), user("hello")]
    cache_report(cache, "m", short)
    report = cache_report(cache, "m", short)
    assert (report.cached_tokens, report.written_tokens) == (0, 0)


def test_a_changed_early_message_ends_the_prefix_and_another_model_has_its_own_cache() -> None:
    cache = PromptCache()
    first, second = growing()
    cache_report(cache, "m", first)
    assert cache_report(cache, "m", [system("other rules"), *second[1:]]).cached_tokens == 0
    assert cache_report(cache, "other-model", second).cached_tokens == 0


def test_cache_control_marks_do_not_change_the_prefix() -> None:
    cache = PromptCache()
    first, second = growing()
    cache_report(cache, "m", first)
    marked = [{**second[0], "cache_control": {"type": "ephemeral"}}, *second[1:]]
    assert cache_report(cache, "m", marked).cached_tokens == blocks(first)


def test_memory_is_bounded_and_the_least_recently_used_prefixes_go_first() -> None:
    cache = PromptCache(capacity=3)
    first, second = growing()
    cache_report(cache, "m", first)
    for k in range(3):
        cache_report(cache, "m", [system(f"other {k}"), user(LOG)])
    assert cache_report(cache, "m", second).cached_tokens == 0


def test_the_same_sequence_of_requests_gives_the_same_figures() -> None:
    def run() -> list[tuple[int, int, int]]:
        cache = PromptCache()
        first, second = growing()
        return [
            (r.prompt_tokens, r.cached_tokens, r.written_tokens)
            for r in (cache_report(cache, "m", m) for m in (first, second, first))
        ]

    assert run() == run()


def test_chat_completions_report_cached_tokens_in_json_and_in_the_streams_usage_chunk() -> None:
    app = create_mock_app()
    first, second = growing()
    send(app, "POST", "/v1/chat/completions", json={"model": "m", "messages": first})
    answer = send(app, "POST", "/v1/chat/completions", json={"model": "m", "messages": second}).json()
    assert answer["usage"]["prompt_tokens_details"] == {"cached_tokens": blocks(first)}
    streamed = send(
        app,
        "POST",
        "/v1/chat/completions",
        json={"model": "m", "messages": second, "stream": True, "stream_options": {"include_usage": True}},
    )
    events = [line.removeprefix("data: ") for line in streamed.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["usage"]["prompt_tokens_details"] == {"cached_tokens": blocks(second)}


def anthropic_body(messages: list[Message], **extra: Any) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 100,
        "messages": messages[1:],
        "system": "rules",
        **extra,
    }


def input_total(usage: dict[str, Any]) -> int:
    return int(
        usage["input_tokens"] + usage["cache_read_input_tokens"] + usage["cache_creation_input_tokens"]
    )


def test_messages_report_cache_reads_and_writes_in_json_and_in_message_start() -> None:
    app = create_mock_app()
    first, second = growing()
    one = send(app, "POST", "/v1/messages", json=anthropic_body(first)).json()["usage"]
    assert (
        one["cache_read_input_tokens"] == 0 and one["cache_creation_input_tokens"] == input_total(one) > 1024
    )
    two = send(app, "POST", "/v1/messages", json=anthropic_body(second)).json()["usage"]
    assert two["cache_read_input_tokens"] == input_total(one) // 128 * 128
    assert two["cache_creation_input_tokens"] == input_total(two) - two["cache_read_input_tokens"]
    streamed = send(app, "POST", "/v1/messages", json=anthropic_body(second, stream=True))
    start = next(json.loads(line[6:]) for line in streamed.text.splitlines() if '"message_start"' in line)
    assert start["message"]["usage"]["cache_read_input_tokens"] == input_total(two) // 128 * 128


def test_responses_report_cached_tokens_in_json_and_in_response_completed() -> None:
    app = create_mock_app()
    log = "read the log\n" + LOG
    send(app, "POST", "/v1/responses", json={"model": "gpt-4o", "input": log})
    body = {
        "model": "gpt-4o",
        "input": [{"role": "user", "content": log}, {"role": "user", "content": "now fix it"}],
    }
    usage = send(app, "POST", "/v1/responses", json=body).json()["usage"]
    assert usage["input_tokens_details"]["cached_tokens"] > 1024
    streamed = send(app, "POST", "/v1/responses", json={**body, "stream": True})
    done = next(json.loads(line[6:]) for line in streamed.text.splitlines() if '"response.completed"' in line)
    assert (
        done["response"]["usage"]["input_tokens_details"]["cached_tokens"]
        == usage["input_tokens"] // 128 * 128
    )
