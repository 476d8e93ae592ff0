"""End to end: the real `history-proxy serve` and `mock-upstream` processes, driven by the openai SDK."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import cast

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.support.serve_process import Server, start

CHUNKS = 5
CHUNK_DELAY_MS = 300


@pytest.fixture(scope="module")
def mock_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("mock") / "mock.log"
    yield from start(
        "mock-upstream",
        "--chunks",
        str(CHUNKS),
        "--chunk-delay-ms",
        str(CHUNK_DELAY_MS),
        log=log,
        ready_path="/v1/models",
    )


@pytest.fixture(scope="module")
def proxy_server(mock_upstream: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("proxy")
    config = folder / "config.yaml"
    config.write_text(
        f"""
upstreams:
  mock: {{base_url: "{mock_upstream.url}/v1"}}
policies:
  roles:
    worker: [{{type: worker_view}}]
""",
        encoding="utf-8",
    )
    yield from start("serve", "--config", str(config), log=folder / "proxy.log", ready_path="/healthz")


@pytest.fixture(scope="module")
def default_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("default") / "proxy.log"
    yield from start("serve", "--mock", log=log, ready_path="/healthz")


def client(server: Server, role: str = "worker") -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{server.url}/v1",
        api_key="client-key",
        max_retries=0,
        timeout=60,
        default_headers={"X-Agent-Role": role, "X-Agent-Name": "w1"},
    )


# the last message carries the proxy's ``message_type`` annotation, a key the SDK's message TypedDicts
# do not declare; the SDK sends it as given
TWO_TURNS = cast(
    "list[ChatCompletionMessageParam]",
    [
        {"role": "system", "content": "You are a worker."},
        {"role": "user", "content": "First task: list the files."},
        {"role": "assistant", "content": "README.md setup.py"},
        {"role": "user", "content": "Second task: read setup.py", "message_type": "task"},
    ],
)


def test_completion_through_the_proxy_reaches_the_upstream_filtered(proxy_server: Server) -> None:
    with client(proxy_server) as sdk:
        completion = sdk.chat.completions.create(model="gpt-4o-mini", messages=TWO_TURNS)

    content = completion.choices[0].message.content or ""
    # worker_view keeps the system message and the current turn only (the annotated task starts it).
    assert content.startswith("mock: received 2 messages (system=1, user=1)")
    assert content.endswith('last user: "Second task: read setup.py"')
    assert completion.model == "gpt-4o-mini"


def test_first_streamed_chunk_reaches_the_client_before_the_upstream_has_finished(
    proxy_server: Server,
) -> None:
    arrivals: list[float] = []
    pieces: list[str] = []
    with client(proxy_server) as sdk:
        stream = sdk.chat.completions.create(model="gpt-4o-mini", messages=TWO_TURNS, stream=True)
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                arrivals.append(time.monotonic())
                pieces.append(chunk.choices[0].delta.content)

    assert "".join(pieces).startswith("mock: received 2 messages")
    assert len(pieces) == CHUNKS
    # The upstream waits CHUNK_DELAY_MS between pieces: a buffering proxy would deliver them together.
    assert arrivals[-1] - arrivals[0] >= (CHUNKS - 1) * CHUNK_DELAY_MS / 1000 / 2


def test_serve_mock_on_the_default_config_answers_through_the_built_in_mock(default_proxy: Server) -> None:
    with client(default_proxy, role="orchestrator") as sdk:
        raw = sdk.chat.completions.with_raw_response.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "Plan the release."}]
        )
    completion = raw.parse()

    assert completion.choices[0].message.content == (
        'mock: received 1 messages (user=1), ~11 tokens; last user: "Plan the release."'
    )
    assert raw.headers["x-history-role"] == "orchestrator"
    # L3: the mock's count is the proxy's own (x-history-tokens-after), and the mock says it is one
    assert raw.headers["x-history-tokens-after"] == "11"
    assert raw.headers["x-history-mock"] == "1"
