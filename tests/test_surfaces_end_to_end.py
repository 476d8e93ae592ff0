"""Every surface through the real `history-proxy serve`, driven by the official SDKs (openai, anthropic).

The upstream is the built-in mock behind a recorder (run in this process), so each test checks what
the upstream received as well as what the SDK parsed.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.support.recorder import UPSTREAM_KEY, Recorder
from tests.support.serve_process import Server, start


@pytest.fixture(scope="module")
def proxy(recorder: tuple[Recorder, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("surfaces")
    config = folder / "config.yaml"
    url = recorder[1]
    config.write_text(
        f"""
upstreams:
  openai: {{base_url: "{url}"}}
  claude: {{base_url: "{url}", api: anthropic, api_key: "{UPSTREAM_KEY}", cache_control: true}}
routes:
  - {{model: "claude-*", upstream: claude}}
cache_control: {{last_n_messages: 2}}
policies:
  roles:
    trimmer: [{{type: tool_call_filter, exclude: [ls]}}]
    short: [{{type: tool_result_truncation, keep_recent: 1, max_chars: 10}}]
""",
        encoding="utf-8",
    )
    yield from start("serve", "--config", str(config), log=folder / "proxy.log", ready_path="/healthz")


OPENED: list[openai.OpenAI | anthropic.Anthropic] = []
"""The SDK clients a test made, closed when it ends (an open pool's sockets would warn at a later GC)."""


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while OPENED:
        OPENED.pop().close()


def oai(server: Server, role: str = "default") -> openai.OpenAI:
    client = openai.OpenAI(
        base_url=f"{server.url}/v1",
        api_key="client-key",
        max_retries=0,
        default_headers={"X-Agent-Role": role},
    )
    OPENED.append(client)
    return client


def claude(server: Server, role: str = "default") -> anthropic.Anthropic:
    client = anthropic.Anthropic(
        base_url=server.url, api_key="client-key", max_retries=0, default_headers={"X-Agent-Role": role}
    )
    OPENED.append(client)
    return client


# --- Responses ---------------------------------------------------------------------------------


def test_responses_create_plain(proxy: Server, recorder: tuple[Recorder, str]) -> None:
    raw = oai(proxy).responses.with_raw_response.create(
        model="gpt-4o-mini", instructions="Be brief.", input="hello"
    )
    response = raw.parse()
    assert response.output_text.startswith("mock: received 2 messages (system=1, user=1)")
    assert raw.headers["x-history-role"] == "default"
    seen = recorder[0].last("/v1/responses")
    assert seen["body"]["input"] == "hello"
    assert seen["body"]["instructions"] == "Be brief."


def test_responses_streamed(proxy: Server) -> None:
    events = list(oai(proxy).responses.create(model="gpt-4o-mini", input="hello there", stream=True))
    kinds = [event.type for event in events]
    assert kinds[0] == "response.created"
    assert kinds[-1] == "response.completed"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text.startswith("mock: received 1 messages (user=1)")
    completed = events[-1]
    assert completed.type == "response.completed"
    assert completed.response.output_text == text


def test_responses_tool_round_trip_is_filtered_by_the_role_chain(
    proxy: Server, recorder: tuple[Recorder, str]
) -> None:
    client = oai(proxy, role="trimmer")
    tools: Any = [
        {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}
    ]
    history: list[Any] = [
        {"role": "user", "content": "list the files"},
        {"type": "function_call", "call_id": "c_ls", "name": "ls", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c_ls", "output": "a.txt b.txt"},
        {"role": "user", "content": "now use the weather tool"},
    ]
    first = client.responses.create(model="gpt-4o-mini", input=history, tools=tools)
    calls = [item for item in first.output if item.type == "function_call"]
    assert [call.name for call in calls] == ["get_weather"]
    sent = recorder[0].last("/v1/responses")["body"]["input"]
    assert sent == [history[0], history[3]]  # the ls call and its output removed, the rest verbatim
    round_trip = [
        *history,
        *[item.model_dump(exclude_none=True) for item in first.output],
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny"},
    ]
    second = client.responses.create(model="gpt-4o-mini", input=round_trip, tools=tools)
    assert second.output_text.startswith("mock: received 4 messages (user=2, assistant=1, tool=1)")
    sent = recorder[0].last("/v1/responses")["body"]["input"]
    assert sent == [history[0], history[3], *round_trip[4:]]


def test_responses_with_previous_response_id_go_unfiltered_with_a_note(
    proxy: Server, recorder: tuple[Recorder, str]
) -> None:
    body: Any = [
        {"type": "function_call", "call_id": "c_ls", "name": "ls", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c_ls", "output": "a.txt"},
    ]
    raw = oai(proxy, role="trimmer").responses.with_raw_response.create(
        model="gpt-4o-mini", input=body, previous_response_id="resp_1"
    )
    assert raw.headers["x-history-notes"] == "history_at_provider:previous_response_id"
    assert raw.headers["x-history-filters"] == ""  # not counted as filtered
    assert recorder[0].last("/v1/responses")["body"]["input"] == body


# --- Messages ----------------------------------------------------------------------------------


def test_messages_create_authenticates_upstream_with_its_own_key(
    proxy: Server, recorder: tuple[Recorder, str]
) -> None:
    message = claude(proxy).messages.create(
        model="claude-test-model",
        max_tokens=100,
        system="Be brief.",
        messages=[{"role": "user", "content": "hi"}],
    )
    assert message.content[0].type == "text"
    assert message.content[0].text.startswith("mock: received 2 messages (system=1, user=1)")
    seen = recorder[0].last("/v1/messages")
    assert seen["headers"]["x-api-key"] == UPSTREAM_KEY
    assert "authorization" not in seen["headers"]
    assert seen["headers"]["anthropic-version"]
    assert seen["body"]["system"] == "Be brief."


def test_messages_stream(proxy: Server) -> None:
    with claude(proxy).messages.stream(
        model="claude-test-model", max_tokens=100, messages=[{"role": "user", "content": "hello"}]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text.startswith("mock: received 1 messages (user=1)")
    assert final.stop_reason == "end_turn"


IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
THINKING = {"type": "thinking", "thinking": "I should list files.", "signature": "c2lnbmVk"}


def agent_history() -> list[Any]:
    """Claude Code's kind of history, as JSON the tests index into (``Any``: also the SDK's argument)."""
    return [
        {"role": "user", "content": [{"type": "text", "text": "look at this"}, IMAGE]},
        {
            "role": "assistant",
            "content": [
                THINKING,
                {"type": "tool_use", "id": "tu_ls", "name": "ls", "input": {}},
                {"type": "tool_use", "id": "tu_cat", "name": "cat", "input": {"path": "a.txt"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "tu_ls", "content": "a.txt b.txt"},
                {"type": "tool_result", "tool_use_id": "tu_cat", "content": "hello world, this is a.txt"},
            ],
        },
        {
            "role": "assistant",
            "content": [{"type": "redacted_thinking", "data": "abc"}, {"type": "text", "text": "Done."}],
        },
        {"role": "user", "content": "now use the tool"},
    ]


def test_messages_tools_thinking_and_images_keep_their_blocks(
    proxy: Server, recorder: tuple[Recorder, str]
) -> None:
    tools: Any = [{"name": "get_weather", "description": "w", "input_schema": {"type": "object"}}]
    history = agent_history()
    message = claude(proxy, role="trimmer").messages.create(
        model="claude-test-model",
        max_tokens=100,
        messages=history,
        tools=tools,
    )
    assert message.stop_reason == "tool_use"
    assert message.content[0].type == "tool_use"
    sent = recorder[0].last("/v1/messages")["body"]["messages"]
    assert sent[0]["content"][0] == history[0]["content"][0]
    assert sent[0]["content"][1] == IMAGE
    assert sent[1]["content"] == [THINKING, history[1]["content"][2]]  # ls removed, thinking untouched
    assert [b["tool_use_id"] for b in sent[2]["content"]] == ["tu_cat"]
    assert sent[3] == history[3]
    # the cache slot marked the two newest user messages (tool results and the task), natively
    assert sent[4]["content"] == [
        {"type": "text", "text": "now use the tool", "cache_control": {"type": "ephemeral"}}
    ]
    assert sent[2]["content"][-1]["cache_control"] == {"type": "ephemeral"}


def test_messages_tool_results_are_truncated_in_place(proxy: Server, recorder: tuple[Recorder, str]) -> None:
    history = agent_history()
    claude(proxy, role="short").messages.create(model="claude-test-model", max_tokens=100, messages=history)
    sent = recorder[0].last("/v1/messages")["body"]["messages"]
    results = sent[2]["content"]
    assert results[0]["content"].startswith("a.txt b.tx")
    assert "TRUNCATED" in results[0]["content"]
    assert sent[1] == history[1]


def memo_counter(server: Server, outcome: str) -> float:
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    found = re.search(
        rf'history_proxy_surface_memo_messages_total{{outcome="{outcome}",surface="messages"}} ([0-9.e+]+)',
        text,
    )
    return float(found.group(1)) if found else 0.0


def test_an_agents_next_turn_converts_only_its_new_messages_and_is_sent_as_without_the_memo(
    proxy: Server, recorder: tuple[Recorder, str], tmp_path: Path
) -> None:
    history = agent_history()
    history[0] = {**history[0], "content": [{"type": "text", "text": "a conversation of its own"}, IMAGE]}
    agent = claude(proxy, role="short")
    agent.messages.create(model="claude-test-model", max_tokens=100, messages=history[:3])
    reused, converted = memo_counter(proxy, "reused"), memo_counter(proxy, "converted")
    agent.messages.create(model="claude-test-model", max_tokens=100, messages=history)
    assert memo_counter(proxy, "reused") - reused == 3, "the three messages of the first turn kept their view"
    assert memo_counter(proxy, "converted") - converted == 2, "only the two new messages were converted"
    with_memo = recorder[0].last("/v1/messages")["body"]

    config = tmp_path / "config.yaml"
    config.write_text(
        f"""
upstreams:
  claude: {{base_url: "{recorder[1]}", api: anthropic, api_key: "{UPSTREAM_KEY}", cache_control: true}}
routes:
  - {{model: "claude-*", upstream: claude}}
cache_control: {{last_n_messages: 2}}
limits: {{surface_memo_messages: 0}}
policies:
  roles:
    short: [{{type: tool_result_truncation, keep_recent: 1, max_chars: 10}}]
""",
        encoding="utf-8",
    )
    for server in start("serve", "--config", str(config), log=tmp_path / "proxy.log", ready_path="/healthz"):
        claude(server, role="short").messages.create(
            model="claude-test-model", max_tokens=100, messages=history
        )
        assert memo_counter(server, "converted") == 0, "no memo, nothing counted"
    assert recorder[0].last("/v1/messages")["body"] == with_memo


def test_count_tokens_counts_what_the_chain_sends(proxy: Server, recorder: tuple[Recorder, str]) -> None:
    history = agent_history()
    counted = claude(proxy, role="trimmer").messages.count_tokens(model="claude-test-model", messages=history)
    assert counted.input_tokens > 0
    sent = recorder[0].last("/v1/messages/count_tokens")["body"]["messages"]
    assert [b["tool_use_id"] for b in sent[2]["content"]] == ["tu_cat"]


def test_messages_errors_come_in_anthropics_shape(proxy: Server) -> None:
    unknown_role: list[Any] = [{"role": "tool", "content": "x"}]  # a role the SDK's types refuse
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude(proxy).messages.create(model="claude-test-model", max_tokens=10, messages=unknown_role)
    body: Any = caught.value.body
    assert body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    # the proxy forwards roles it does not know (never stricter); the upstream (the mock) refuses it
    assert body["error"]["message"] == "messages.0.role: Input should be 'user' or 'assistant'"


def test_a_surface_routed_to_an_upstream_that_does_not_speak_it_is_a_clear_400(proxy: Server) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude(proxy).messages.create(
            model="gpt-4o-mini", max_tokens=10, messages=[{"role": "user", "content": "x"}]
        )
    assert "does not serve it" in str(caught.value)


def test_proxy_keys_are_read_from_x_api_key(recorder: tuple[Recorder, str], tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        f"""
upstreams:
  claude: {{base_url: "{recorder[1]}", api: anthropic}}
auth: {{keys: [{{key: proxy-key-a, tenant: team-a}}]}}
""",
        encoding="utf-8",
    )
    for server in start("serve", "--config", str(config), log=tmp_path / "proxy.log", ready_path="/healthz"):
        with anthropic.Anthropic(base_url=server.url, api_key="proxy-key-a", max_retries=0) as client:
            client.messages.create(
                model="claude-x", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
            )
        assert "x-api-key" not in recorder[0].last("/v1/messages")["headers"]  # the proxy key never leaves
        with (
            anthropic.Anthropic(base_url=server.url, api_key="wrong", max_retries=0) as wrong,
            pytest.raises(anthropic.AuthenticationError),
        ):
            wrong.messages.create(
                model="claude-x", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
            )


def test_the_default_config_demos_every_surface_offline(tmp_path: Path) -> None:
    for server in start("serve", "--mock", log=tmp_path / "proxy.log", ready_path="/healthz"):
        answer = oai(server, role="worker").responses.create(model="gpt-4o-mini", input="hello")
        assert answer.output_text.startswith("mock: received 1 messages (user=1)")
        with claude(server, role="worker").messages.stream(
            model="claude-test-model", max_tokens=50, messages=[{"role": "user", "content": "hello"}]
        ) as stream:
            assert "".join(stream.text_stream).startswith("mock: received 1 messages (user=1)")


def test_the_openai_agents_sdk_runs_a_tool_loop_through_the_proxy(
    proxy: Server, recorder: tuple[Recorder, str]
) -> None:
    from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)  # no trace upload: nothing leaves the machine
    calls: list[str] = []

    @function_tool
    def get_weather() -> str:
        """The weather."""
        calls.append("get_weather")
        return "sunny"

    client = openai.AsyncOpenAI(
        base_url=f"{proxy.url}/v1",
        api_key="client-key",
        max_retries=0,
        default_headers={"X-Agent-Role": "trimmer"},
    )
    agent = Agent(
        name="forecaster",
        instructions="Answer about the weather.",
        tools=[get_weather],
        model=OpenAIResponsesModel(model="gpt-4o-mini", openai_client=client),
    )
    before = len(recorder[0].seen)

    async def run() -> Any:
        try:
            return await Runner.run(agent, "use the weather tool")
        finally:
            await client.close()  # its connections belong to this event loop

    result = asyncio.run(run())
    assert calls == ["get_weather"]
    assert str(result.final_output).startswith(
        "mock: received 4 messages (system=1, user=1, assistant=1, tool=1)"
    )
    sent = [r for r in recorder[0].seen[before:] if r["path"] == "/v1/responses"]
    assert len(sent) == 2
    assert sent[0]["body"]["instructions"] == "Answer about the weather."
    kinds = [item.get("type", "message") for item in sent[1]["body"]["input"]]
    assert kinds == ["message", "function_call", "function_call_output"]
