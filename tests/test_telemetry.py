"""OpenTelemetry GenAI spans (issue 28) through the real `history-proxy serve`, with the official SDKs.

An in-process OTLP/HTTP receiver (:mod:`tests.otlp_receiver`) decodes what the proxy exports; the
upstream is the built-in mock behind a recorder, so each test also sees the ``traceparent`` the
upstream received. The client's own span is made with the OpenTelemetry SDK and injected the way
an instrumented client does.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from unittest import mock

import anthropic
import httpx
import openai
import pytest
from anthropic.types import MessageParam
from openai.types.chat import ChatCompletionMessageParam
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as semconv

from history_proxy.config.loading import ConfigError, json_schema, parse_config
from history_proxy.observability import genai
from tests.otlp_receiver import ReceivedSpan, Receiver
from tests.support.client_spans import client_span, root_trace
from tests.support.recorder import UPSTREAM_KEY, Recorder, recorder  # noqa: F401 (fixture)
from tests.support.serve_process import Server, free_port, start

CLIENT_KEY = "sk-client-key-never-exported-1234567890"
SECRET_TEXT = "the-password-is-tangerine-42"
FAST_EXPORT = {"OTEL_BSP_SCHEDULE_DELAY": "50", "OTEL_EXPORTER_OTLP_TIMEOUT": "2"}


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    found = Receiver().start()
    yield found
    found.stop()


def serve(folder: Path, upstream_url: str, telemetry: str, more_policies: str = "") -> Iterator[Server]:
    config = folder / "config.yaml"
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    config.write_text(
        f"""
upstreams:
  openai: {{base_url: "{upstream_url}"}}
  claude: {{base_url: "{upstream_url}", api: anthropic, api_key: "{UPSTREAM_KEY}", cache_control: true}}
  down: {{base_url: "{dead}", retries: 1}}
routes:
  - {{model: "claude-*", upstream: claude}}
  - {{model: "flaky-*", upstream: down, fallbacks: [openai]}}
  - {{model: "gone-*", upstream: down}}
telemetry: {telemetry}
policies:{more_policies}
  roles:
    trimmer: [{{type: tool_call_filter, exclude: [ls]}}]
    planner:
      - {{type: summarize, keep_recent: 1, step: 1, model: gpt-4o-mini, upstream: openai}}
""",
        encoding="utf-8",
    )
    with mock.patch.dict(os.environ, FAST_EXPORT):
        yield from start("serve", "--config", str(config), log=folder / "proxy.log", ready_path="/healthz")


@pytest.fixture(scope="module")
def proxy(
    recorder: tuple[Recorder, str],  # noqa: F811
    receiver: Receiver,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Server]:
    telemetry = f'{{enabled: true, endpoint: "{receiver.endpoint}", service_name: proxy-under-test}}'
    yield from serve(tmp_path_factory.mktemp("telemetry"), recorder[1], telemetry)


def proxy_span(receiver: Receiver, trace_id: str) -> ReceivedSpan:
    found = receiver.wait_for(lambda s: s.trace_id == trace_id and s.name.startswith("chat"))
    assert found, f"no proxy span in trace {trace_id}; received {[s.name for s in receiver.spans]}"
    return found[0]


def upstream_parent(seen: dict[str, Any], trace_id: str) -> str:
    """The span id the upstream's traceparent names (and that it carries the client's trace id)."""
    traceparent: str = seen["headers"]["traceparent"]
    version, trace, parent, flags = traceparent.split("-")
    assert (version, trace) == ("00", trace_id)
    assert int(flags, 16) & 1  # sampled
    return parent


def check_chain_of_spans(
    receiver: Receiver, trace_id: str, client_span_id: str, sent_to: str
) -> ReceivedSpan:
    """client span -> proxy span -> attempt span, whose id the upstream saw."""
    root = proxy_span(receiver, trace_id)
    assert root.parent_span_id == client_span_id
    assert root.kind == 2  # SERVER
    attempts = receiver.wait_for(lambda s: s.trace_id == trace_id and s.name.startswith("upstream "))
    assert [a.parent_span_id for a in attempts] == [root.span_id]
    assert attempts[0].span_id == sent_to
    assert attempts[0].kind == 3  # CLIENT
    assert attempts[0].attributes["http.response.status_code"] == 200
    return root


SDKClient = TypeVar("SDKClient", openai.OpenAI, anthropic.Anthropic)
OPEN: list[openai.OpenAI | anthropic.Anthropic] = []
"""The SDK clients a test made, closed after it (an unclosed socket warns later, in another test)."""


def opened(client: SDKClient) -> SDKClient:
    OPEN.append(client)
    return client


@pytest.fixture(autouse=True)
def close_clients() -> Iterator[None]:
    yield
    while OPEN:
        OPEN.pop().close()


@dataclass
class Rig:
    """The proxy under test, the collector it exports to and the upstream recorder behind it."""

    proxy: Server
    receiver: Receiver
    recorder: Recorder

    def openai(self) -> openai.OpenAI:
        return opened(openai.OpenAI(base_url=f"{self.proxy.url}/v1", api_key=CLIENT_KEY, max_retries=0))

    def root(self, span: Any, path: str) -> ReceivedSpan:
        """The proxy's span under the client's ``span``, checked on to the upstream that got ``path``."""
        context = span.get_span_context()
        trace_id = f"{context.trace_id:032x}"
        sent_to = upstream_parent(self.recorder.last(path), trace_id)
        return check_chain_of_spans(self.receiver, trace_id, f"{context.span_id:016x}", sent_to)


@pytest.fixture
def rig(proxy: Server, receiver: Receiver, recorder: tuple[Recorder, str]) -> Rig:  # noqa: F811
    return Rig(proxy, receiver, recorder[0])


def test_chat_completion_continues_the_clients_trace_to_the_upstream(rig: Rig) -> None:
    span, headers = client_span()
    raw = rig.openai().chat.completions.with_raw_response.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": f"remember {SECRET_TEXT}"}],
        max_tokens=50,
        temperature=0.2,
        extra_headers={
            **headers,
            "X-Agent-Role": "trimmer",
            "X-Agent-Name": "coder#1",
            "X-Conversation-Id": "conv-7",
        },
    )
    span.end()
    answer, trace_id = raw.parse(), root_trace(span)
    root = rig.root(span, "/v1/chat/completions")
    assert rig.recorder.last("/v1/chat/completions")["headers"]["tracestate"] == "vendor=abc"  # carried on
    attributes = root.attributes
    assert root.name == "chat gpt-4o-mini"
    assert attributes[semconv.GEN_AI_OPERATION_NAME] == "chat"
    assert attributes[semconv.GEN_AI_PROVIDER_NAME] == "openai"
    assert attributes[semconv.GEN_AI_REQUEST_MODEL] == "gpt-4o-mini"
    assert attributes[semconv.GEN_AI_RESPONSE_MODEL] == answer.model
    assert attributes[semconv.GEN_AI_RESPONSE_ID] == answer.id
    assert attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == [answer.choices[0].finish_reason]
    assert answer.usage is not None
    assert attributes[semconv.GEN_AI_USAGE_INPUT_TOKENS] == answer.usage.prompt_tokens
    assert attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == answer.usage.completion_tokens
    assert attributes[semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 0
    assert attributes[semconv.GEN_AI_REQUEST_MAX_TOKENS] == 50
    assert attributes[semconv.GEN_AI_REQUEST_TEMPERATURE] == 0.2
    assert attributes[semconv.GEN_AI_AGENT_NAME] == "coder#1"
    assert attributes[semconv.GEN_AI_CONVERSATION_ID] == "conv-7"
    assert attributes["history_proxy.role"] == "trimmer"
    assert attributes["history_proxy.surface"] == "chat"
    assert attributes["history_proxy.chain"] == ["tool_call_filter"]
    assert attributes["history_proxy.tokens_before"] == int(raw.headers["x-history-tokens-before"])
    assert attributes["history_proxy.tokens_after"] == int(raw.headers["x-history-tokens-after"])
    assert attributes["history_proxy.upstreams_tried"] == ["openai"]
    assert attributes["history_proxy.fallbacks"] == 0
    assert attributes["history_proxy.cost.unfiltered"] == attributes["history_proxy.tokens_before"]
    assert "history_proxy.cost.input" in attributes
    assert root.resource["service.name"] == "proxy-under-test"
    shape = rig.receiver.wait_for(lambda s: s.trace_id == trace_id and s.name == "history_proxy.shape")
    assert [s.parent_span_id for s in shape] == [root.span_id]
    events = shape[0].events
    assert [e["name"] for e in events] == ["filter tool_call_filter"]
    assert events[0]["history_proxy.filter.messages_removed"] == 0
    assert events[0]["history_proxy.filter.at"] == "policies.roles.trimmer[0]"
    access = [line for line in rig.proxy.output().splitlines() if trace_id in line]
    assert access and json.loads(access[-1][access[-1].index("{") :])["trace_id"] == trace_id


def test_streamed_chat_completion_reports_usage_and_finish_reason(rig: Rig) -> None:
    span, headers = client_span()
    chunks = list(
        rig.openai().chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
            extra_headers=headers,
        )
    )
    span.end()
    root = rig.root(span, "/v1/chat/completions")
    usage = chunks[-1].usage
    assert usage is not None
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert root.attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == reasons
    assert root.attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == usage.completion_tokens
    assert root.attributes[semconv.GEN_AI_RESPONSE_ID] == chunks[0].id
    assert root.attributes[semconv.GEN_AI_REQUEST_STREAM] is True


def test_responses_call_is_a_span_with_the_conversation_it_names(rig: Rig) -> None:
    span, headers = client_span()
    answer = rig.openai().responses.create(
        model="gpt-4o-mini",
        input=f"hello {SECRET_TEXT}",
        extra_headers={**headers, "X-Agent-Name": "researcher"},
        extra_body={"conversation": "conv_abc"},
    )
    span.end()
    attributes = rig.root(span, "/v1/responses").attributes
    assert attributes["history_proxy.surface"] == "responses"
    assert attributes[semconv.GEN_AI_CONVERSATION_ID] == "conv_abc"
    assert attributes[semconv.GEN_AI_AGENT_NAME] == "researcher"
    assert attributes[semconv.GEN_AI_RESPONSE_ID] == answer.id
    assert attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == [answer.status]
    assert answer.usage is not None
    assert attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == answer.usage.output_tokens


def test_messages_call_streamed_is_a_span_with_anthropics_figures(rig: Rig) -> None:
    span, headers = client_span()
    client = opened(anthropic.Anthropic(base_url=rig.proxy.url, api_key=CLIENT_KEY, max_retries=0))
    with client.messages.stream(
        model="claude-test-model",
        max_tokens=100,
        system="Be brief.",
        messages=[{"role": "user", "content": f"hi {SECRET_TEXT}"}],
        extra_headers={**headers, "X-Agent-Name": "writer"},
    ) as stream:
        final = stream.get_final_message()
    span.end()
    root = rig.root(span, "/v1/messages")
    attributes = root.attributes
    assert root.name == "chat claude-test-model"
    assert attributes[semconv.GEN_AI_PROVIDER_NAME] == "anthropic"
    assert attributes["history_proxy.surface"] == "messages"
    assert attributes[semconv.GEN_AI_RESPONSE_ID] == final.id
    assert attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == [final.stop_reason]
    assert attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == final.usage.output_tokens
    usage = final.usage
    total = (
        usage.input_tokens + (usage.cache_read_input_tokens or 0) + (usage.cache_creation_input_tokens or 0)
    )
    assert attributes[semconv.GEN_AI_USAGE_INPUT_TOKENS] == total
    assert attributes[semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == (usage.cache_read_input_tokens or 0)
    assert attributes[semconv.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS] == (
        usage.cache_creation_input_tokens or 0
    )


def test_a_request_without_traceparent_starts_a_new_trace(rig: Rig) -> None:
    rig.openai().chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "alone"}],
        extra_headers={"X-Request-Id": "solo-1"},
    )
    _, trace_id, parent, _ = rig.recorder.last("/v1/chat/completions")["headers"]["traceparent"].split("-")
    root = proxy_span(rig.receiver, trace_id)
    assert root.parent_span_id == ""
    assert root.attributes["history_proxy.request_id"] == "solo-1"
    assert rig.receiver.wait_for(lambda s: s.span_id == parent)[0].parent_span_id == root.span_id


def test_a_summary_call_is_a_span_under_the_request(rig: Rig) -> None:
    span, headers = client_span()
    history: Any = [
        {"role": "user", "content": "step one"},
        {"role": "assistant", "content": "done one"},
        {"role": "user", "content": "step two"},
        {"role": "assistant", "content": "done two"},
        {"role": "user", "content": "step three"},
    ]
    rig.openai().chat.completions.create(
        model="gpt-4o-mini", messages=history, extra_headers={**headers, "X-Agent-Role": "planner"}
    )
    span.end()
    trace_id = root_trace(span)
    root = proxy_span(rig.receiver, trace_id)
    summaries = rig.receiver.wait_for(lambda s: s.trace_id == trace_id and s.name.startswith("summary "))
    assert [(s.name, s.parent_span_id) for s in summaries] == [("summary gpt-4o-mini", root.span_id)]
    assert summaries[0].attributes["history_proxy.summary.outcome"] == "ok"


def test_no_message_text_and_no_key_in_any_exported_span(rig: Rig) -> None:
    span, headers = client_span()
    said: list[ChatCompletionMessageParam] = [{"role": "user", "content": f"remember {SECRET_TEXT}"}]
    told: list[MessageParam] = [{"role": "user", "content": f"remember {SECRET_TEXT}"}]
    rig.openai().chat.completions.create(model="gpt-4o-mini", messages=said, extra_headers=headers)
    rig.openai().responses.create(model="gpt-4o-mini", input=SECRET_TEXT, extra_headers=headers)
    client = opened(anthropic.Anthropic(base_url=rig.proxy.url, api_key=CLIENT_KEY, max_retries=0))
    client.messages.create(model="claude-x", max_tokens=9, messages=told, extra_headers=headers)
    span.end()
    spans = rig.receiver.wait_for(lambda s: s.trace_id == root_trace(span) and s.name.startswith("chat"))
    while len(spans) < 3:
        time.sleep(0.05)
        spans = [
            s for s in rig.receiver.spans if s.trace_id == root_trace(span) and s.name.startswith("chat")
        ]
    exported = b"".join(rig.receiver.raw)  # everything this module's proxy exported so far
    for secret in (SECRET_TEXT, CLIENT_KEY, UPSTREAM_KEY, "step one", "done two"):
        assert secret.encode() not in exported
    assert not any(genai.INPUT_MESSAGES in s.attributes for s in rig.receiver.spans)


def test_every_attribute_exported_is_in_docs_telemetry(rig: Rig) -> None:
    """Docs that cannot rot: each attribute and event attribute the spans carried has its row."""
    docs = (Path(__file__).resolve().parents[1] / "docs" / "telemetry.md").read_text(encoding="utf-8")
    span, headers = client_span()
    for model in ("gpt-4o-mini", "flaky-model"):  # a fallback too
        rig.openai().chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "x"}],
            max_tokens=5,
            temperature=0.5,
            top_p=0.9,
            extra_headers={
                **headers,
                "X-Agent-Role": "trimmer",
                "X-Agent-Name": "a",
                "X-Conversation-Id": "c",
            },
        )
    assert rig.receiver.wait_for(
        lambda s: (
            s.trace_id == root_trace(span)
            and "history_proxy.fallbacks" in s.attributes
            and s.attributes["history_proxy.fallbacks"] == 1
        )
    )
    names = {key for s in rig.receiver.spans for key in s.attributes}
    names |= {key for s in rig.receiver.spans for event in s.events for key in event if key != "name"}
    names -= {"gen_ai.system"}  # the deprecated duplicate, documented with OTEL_SEMCONV_STABILITY_OPT_IN
    undocumented = sorted(
        name for name in names if f"`{name}`" not in docs and f"`.{name.rsplit('.', 1)[1]}`" not in docs
    )
    assert undocumented == []


def test_retries_fallbacks_and_errors_are_attempt_spans_with_their_error_type(rig: Rig) -> None:
    span, headers = client_span()
    rig.openai().chat.completions.create(
        model="flaky-model", messages=[{"role": "user", "content": "x"}], extra_headers=headers
    )
    root = proxy_span(rig.receiver, root_trace(span))
    attempts = rig.receiver.wait_for(lambda s: s.trace_id == root.trace_id and s.name.startswith("upstream "))
    attempts.sort(key=lambda s: s.attributes["history_proxy.attempt"])
    assert [
        (a.name, a.attributes.get("error.type"), a.attributes["history_proxy.fallback"]) for a in attempts
    ] == [
        ("upstream down", "ConnectError", False),
        ("upstream down", "ConnectError", False),  # the retry
        ("upstream openai", None, True),
    ]
    assert [a.status_code for a in attempts] == [2, 2, 0]  # ERROR, ERROR, UNSET
    assert root.attributes["history_proxy.upstreams_tried"] == ["down", "openai"]
    assert root.attributes["history_proxy.fallbacks"] == 1
    assert root.attributes["history_proxy.attempts"] == 3
    assert "error.type" not in root.attributes

    span, headers = client_span()
    with pytest.raises(openai.APIStatusError) as refused:
        rig.openai().chat.completions.create(
            model="gone-model", messages=[{"role": "user", "content": "x"}], extra_headers=headers
        )
    assert refused.value.status_code == 502
    root = proxy_span(rig.receiver, root_trace(span))
    assert root.attributes["error.type"] == "502"
    assert root.status_code == 2


def test_message_text_is_exported_only_when_asked_and_after_the_global_chain(
    recorder: tuple[Recorder, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    receiver = Receiver().start()  # its own: the module's receiver must stay free of message text
    telemetry = f'{{enabled: true, endpoint: "{receiver.endpoint}", capture_content: true}}'
    strip = f"""
  global: [{{type: remove_regex, remove: ["{SECRET_TEXT}"]}}]"""
    for server in serve(tmp_path, recorder[1], telemetry, strip):
        span, headers = client_span()
        client = opened(openai.OpenAI(base_url=f"{server.url}/v1", api_key=CLIENT_KEY, max_retries=0))
        client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": f"remember {SECRET_TEXT} and {UPSTREAM_KEY}"},
            ],
            extra_headers=headers,
        )
        root = proxy_span(receiver, root_trace(span))
        messages = json.loads(root.attributes[genai.INPUT_MESSAGES])
        assert messages[0] == {"role": "system", "parts": [{"type": "text", "content": "Be brief."}]}
        assert messages[1]["role"] == "user"
        text = messages[1]["parts"][0]["content"]
        assert text.startswith("remember ")
        assert SECRET_TEXT not in text and UPSTREAM_KEY not in text  # the global chain, then redaction
    receiver.stop()


def dropped(server: Server, reason: str) -> float:
    text = httpx.get(f"{server.url}/metrics").text
    match = re.search(rf'history_proxy_telemetry_spans_dropped_total{{reason="{reason}"}} (\S+)', text)
    return float(match.group(1)) if match else 0.0


def test_a_dead_collector_costs_dropped_spans_counted_in_metrics(
    recorder: tuple[Recorder, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1/traces"  # nothing listens there
    small_queue = {"OTEL_BSP_MAX_QUEUE_SIZE": "4", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "2"}
    with mock.patch.dict(os.environ, small_queue):
        for server in serve(tmp_path, recorder[1], f'{{enabled: true, endpoint: "{dead}"}}'):
            client = opened(openai.OpenAI(base_url=f"{server.url}/v1", api_key=CLIENT_KEY, max_retries=0))
            for _ in range(6):  # 3 spans each: the first batch waits on the dead collector, the queue fills
                answer = client.chat.completions.create(
                    model="gpt-4o-mini", messages=[{"role": "user", "content": "x"}]
                )
                assert answer.choices[0].message.content
            deadline = time.monotonic() + 20
            while dropped(server, "export_failed") < 2 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert dropped(server, "export_failed") >= 2  # the first batch, after the exporter's retries
            assert dropped(server, "queue_full") >= 6
            assert "Queue full" not in server.output()


def test_sample_ratio_zero_records_only_what_the_client_sampled(
    recorder: tuple[Recorder, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    receiver = Receiver().start()
    telemetry = f'{{enabled: true, endpoint: "{receiver.endpoint}", sample_ratio: 0}}'
    for server in serve(tmp_path, recorder[1], telemetry):
        client = opened(openai.OpenAI(base_url=f"{server.url}/v1", api_key=CLIENT_KEY, max_retries=0))
        said: Any = [{"role": "user", "content": "x"}]
        client.chat.completions.create(model="gpt-4o-mini", messages=said)
        _, unsampled, _, flags = recorder[0].last("/v1/chat/completions")["headers"]["traceparent"].split("-")
        assert int(flags, 16) & 1 == 0  # the context goes on, marked not sampled
        span, headers = client_span()  # the client sampled its trace: parent-based, the proxy records too
        client.chat.completions.create(model="gpt-4o-mini", messages=said, extra_headers=headers)
        assert proxy_span(receiver, root_trace(span))
        assert not [s for s in receiver.spans if s.trace_id == unsampled]
        assert f'"trace_id":"{unsampled}"' in server.output()  # the access line has it all the same
    receiver.stop()


def test_telemetry_off_by_default_leaves_the_clients_traceparent_alone(
    recorder: tuple[Recorder, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    for server in serve(tmp_path, recorder[1], "{}"):
        _, headers = client_span()
        client = opened(openai.OpenAI(base_url=f"{server.url}/v1", api_key=CLIENT_KEY, max_retries=0))
        client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "x"}], extra_headers=headers
        )
        assert recorder[0].last("/v1/chat/completions")["headers"]["traceparent"] == headers["traceparent"]
        assert "history_proxy_telemetry" not in httpx.get(f"{server.url}/metrics").text


def test_the_telemetry_section_is_strict_and_in_the_schema() -> None:
    upstreams = {"mock": {"base_url": "mock://"}}
    with pytest.raises(ConfigError) as refused:
        parse_config({"upstreams": upstreams, "telemetry": {"enabled": True, "sampler": "always_on"}}, env={})
    assert "telemetry.sampler" in str(refused.value.errors)
    with pytest.raises(ConfigError):
        parse_config({"upstreams": upstreams, "telemetry": {"sample_ratio": 2}}, env={})
    properties = json_schema()["$defs"]["TelemetryConfig"]["properties"]
    assert set(properties) == {
        "enabled",
        "endpoint",
        "service_name",
        "sample_ratio",
        "capture_content",
        "capture_content_chars",
        "max_queue_bytes",
    }
    assert parse_config({"upstreams": upstreams}, env={}).telemetry.enabled is False


def test_our_names_are_those_of_the_pinned_semantic_conventions() -> None:
    pinned = {value for name, value in vars(semconv).items() if name.startswith("GEN_AI_")}
    ours = {
        value for name, value in vars(genai).items() if isinstance(value, str) and value.startswith("gen_ai.")
    }
    assert ours <= pinned
    assert genai.PROVIDER == semconv.GEN_AI_PROVIDER_NAME
    assert genai.latest_only("http,gen_ai_latest_experimental") and not genai.latest_only(None)
