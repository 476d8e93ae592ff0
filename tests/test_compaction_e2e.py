"""Codex's remote compaction through the real `history-proxy serve`, against a Responses upstream that has
compaction and one that lacks it (issue 33, item 3).

Two mocks behind recorders: ``has`` serves ``/v1/responses/compact`` and seals its ``compaction`` items
(OpenAI's behaviour), ``lacks`` refuses all of it as a Responses server without compaction does
(:mod:`history_proxy.mock.compaction`). The proxy runs ``config/default.yaml`` (its global secret filter)
with ``gpt-*`` on ``has`` (``responses_compaction: native``) and ``local-*`` on ``lacks`` (``auto``, so
emulated), two proxy keys for two tenants. Clients are the official openai SDK, as Codex's requests.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml

from history_proxy.mock.compaction import SEALED
from history_proxy.surfaces.compaction import HANDLE_PREFIX, SUMMARY_HEAD, UNAVAILABLE
from tests.support.recorder import Recorder, serve_in_thread
from tests.support.redis_server import PREFIX, RedisServer
from tests.support.serve_process import Server, start

REPO = Path(__file__).resolve().parents[1]
SECRET = "sk-" + "Kp3Lm4Nb5V" * 3
KEYS = {"team-a": "key-team-a", "team-b": "key-team-b"}


@pytest.fixture(scope="module")
def has() -> Iterator[tuple[Recorder, str]]:
    app = Recorder(compaction=True)
    for url in serve_in_thread(app):
        yield app, url


@pytest.fixture(scope="module")
def lacks() -> Iterator[tuple[Recorder, str]]:
    app = Recorder(compaction=False)
    for url in serve_in_thread(app):
        yield app, url


@pytest.fixture(scope="module")
def proxy(
    has: tuple[Recorder, str], lacks: tuple[Recorder, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("compaction")
    raw = yaml.safe_load((REPO / "config" / "default.yaml").read_text(encoding="utf-8"))
    raw["upstreams"] = {
        "openai": {"base_url": has[1], "responses_compaction": "native"},
        "local": {"base_url": lacks[1]},  # auto: a Responses server that is not OpenAI's is emulated
    }
    raw["routes"] = [{"model": "local-*", "upstream": "local"}]
    raw["auth"] = {"keys": [{"key": key, "tenant": tenant} for tenant, key in KEYS.items()]}
    config = folder / "config.yaml"
    config.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    yield from start("serve", "--config", str(config), log=folder / "proxy.log", ready_path="/healthz")


OPEN: list[openai.OpenAI] = []


@pytest.fixture(autouse=True)
def close_clients() -> Iterator[None]:
    yield
    while OPEN:
        OPEN.pop().close()


def client(proxy: Server, tenant: str = "team-a") -> openai.OpenAI:
    made = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=KEYS[tenant], max_retries=0)
    OPEN.append(made)
    return made


def history(task: str = "fix the build") -> list[Any]:
    return [
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": f"{task} with {SECRET}"}],
        },
        {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": '{"cmd": "make"}'},
        {"type": "function_call_output", "call_id": "c1", "output": f"error: token {SECRET} rejected"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "the token is bad"}],
        },
    ]


def user(text: str) -> Any:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def plain(items: list[Any]) -> list[Any]:
    return [item.model_dump(exclude_none=True, warnings=False) for item in items]


def test_native_compaction_is_forwarded_filtered_and_its_sealed_item_goes_back_verbatim(
    proxy: Server, has: tuple[Recorder, str]
) -> None:
    oai = client(proxy)
    compacted = oai.responses.compact(model="gpt-5", input=history())
    sent = has[0].last("/v1/responses/compact")["body"]
    assert SECRET not in json.dumps(sent)
    item = plain(compacted.output)[-1]
    assert item["type"] == "compaction" and item["encrypted_content"].startswith(SEALED)
    answer = oai.responses.create(model="gpt-5", input=[*plain(compacted.output), user("go on")])
    assert answer.status == "completed"  # the mock refuses content it did not seal
    assert has[0].last("/v1/responses")["body"]["input"][-2] == item


def test_without_compaction_upstream_the_proxy_answers_compact_itself_in_openai_shape(
    proxy: Server, lacks: tuple[Recorder, str]
) -> None:
    before = len(lacks[0].seen)
    compacted = client(proxy).responses.compact(model="local-model", input=history())
    assert compacted.object == "response.compaction"
    assert compacted.usage.input_tokens > 0
    output = plain(compacted.output)
    users, item = output[:-1], output[-1]
    assert item["type"] == "compaction" and item["encrypted_content"].startswith(HANDLE_PREFIX)
    assert [u["role"] for u in users] == ["user"]  # the user's messages kept, secret filtered
    assert SECRET not in json.dumps(users)
    calls = lacks[0].seen[before:]
    assert [c["path"] for c in calls] == ["/v1/chat/completions"]  # one summary call, no /compact
    assert calls[0]["headers"]["x-history-purpose"] == "summary"
    assert SECRET not in json.dumps(calls[0]["body"])  # the compacted history passed the secret filter


def test_a_proxy_compaction_item_is_expanded_into_its_summary_on_the_next_request(
    proxy: Server, lacks: tuple[Recorder, str]
) -> None:
    oai = client(proxy)
    compacted = oai.responses.compact(model="local-model", input=history("ship release 7.4"))
    answer = oai.responses.create(model="local-model", input=[*plain(compacted.output), user("go on")])
    assert answer.status == "completed"  # the upstream without compaction never saw a compaction item
    sent = lacks[0].last("/v1/responses")["body"]["input"]
    assert [item.get("type") for item in sent] == ["message", "message", "message"]
    summary = sent[1]["content"][0]["text"]
    assert sent[1]["role"] == "developer" and summary.startswith(SUMMARY_HEAD)
    assert "ship release 7.4" in summary  # the mock's summary of what was compacted


def test_a_handle_is_the_tenants_own(proxy: Server, lacks: tuple[Recorder, str]) -> None:
    compacted = client(proxy, "team-a").responses.compact(model="local-model", input=history("tenant a task"))
    client(proxy, "team-b").responses.create(
        model="local-model", input=[*plain(compacted.output), user("hi")]
    )
    sent = lacks[0].last("/v1/responses")["body"]["input"]
    assert sent[1]["content"][0]["text"] == UNAVAILABLE  # team b cannot read team a's summary
    assert "tenant a task" not in json.dumps(sent[1:])


def test_an_openai_compaction_item_never_reaches_another_provider(
    proxy: Server, lacks: tuple[Recorder, str]
) -> None:
    foreign: Any = {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAAB-openai-ciphertext"}
    raw = client(proxy).responses.with_raw_response.create(
        model="local-model", input=[user("a"), foreign, user("b")]
    )
    assert raw.parse().status == "completed"
    assert "gAAAAB" not in json.dumps(lacks[0].last("/v1/responses")["body"])
    assert "responses_compaction:foreign_item_dropped" in raw.headers["x-history-notes"]


def test_inline_context_management_is_emulated_past_its_threshold(
    proxy: Server, lacks: tuple[Recorder, str]
) -> None:
    oai = client(proxy)
    items = [*history("inline task"), user("continue")]
    answer = oai.responses.create(
        model="local-model",
        input=items,
        extra_body={"context_management": [{"type": "compaction", "compact_threshold": 20}]},
    )
    sent = lacks[0].last("/v1/responses")["body"]
    assert "context_management" not in sent
    assert [i["role"] for i in sent["input"]] == ["user", "user", "developer"]  # compacted before it went
    first = plain(answer.output)[0]
    assert first["type"] == "compaction" and first["encrypted_content"].startswith(HANDLE_PREFIX)
    later = oai.responses.create(model="local-model", input=[*items, *plain(answer.output), user("more")])
    assert later.status == "completed"
    again = lacks[0].last("/v1/responses")["body"]["input"]
    assert not any(i.get("type") == "function_call" for i in again)  # what the handle summarized is left out


def test_a_streamed_inline_compaction_streams_the_item_first(
    proxy: Server, lacks: tuple[Recorder, str]
) -> None:
    oai = client(proxy)
    items = [*history("streamed inline task"), user("continue")]
    with oai.responses.stream(
        model="local-model",
        input=items,
        extra_body={"context_management": [{"type": "compaction", "compact_threshold": 20}]},
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    sent = lacks[0].last("/v1/responses")["body"]
    assert [i["role"] for i in sent["input"]] == ["user", "user", "developer"]  # compacted before it went
    done = [
        e.item.model_dump(exclude_none=True, warnings=False)
        for e in events
        if e.type == "response.output_item.done"
    ]
    assert done[0]["type"] == "compaction" and done[0]["encrypted_content"].startswith(HANDLE_PREFIX)
    assert [e.output_index for e in events if e.type == "response.output_item.done"] == list(range(len(done)))
    numbers = [e.sequence_number for e in events]
    assert numbers == sorted(set(numbers))  # still strictly increasing with the two events added
    output = plain(final.output)
    assert output[0] == done[0] and output[1]["type"] == "message"
    later = oai.responses.create(model="local-model", input=[*items, *output, user("more")])
    assert later.status == "completed"
    assert not any(i.get("type") == "function_call" for i in lacks[0].last("/v1/responses")["body"]["input"])


def test_inline_context_management_below_its_threshold_only_leaves_the_field_out(
    proxy: Server, lacks: tuple[Recorder, str]
) -> None:
    items = history()
    answer = client(proxy).responses.create(
        model="local-model",
        input=items,
        extra_body={"context_management": [{"type": "compaction", "compact_threshold": 100000}]},
    )
    assert answer.output[0].type == "message"
    sent = lacks[0].last("/v1/responses")["body"]
    assert "context_management" not in sent and len(sent["input"]) == len(items)


def test_native_context_management_is_forwarded(proxy: Server, has: tuple[Recorder, str]) -> None:
    asked = [{"type": "compaction", "compact_threshold": 1000}]
    client(proxy).responses.create(model="gpt-5", input="hi", extra_body={"context_management": asked})
    assert has[0].last("/v1/responses")["body"]["context_management"] == asked


def test_a_proxy_handle_sent_to_openai_goes_as_its_summary(proxy: Server, has: tuple[Recorder, str]) -> None:
    oai = client(proxy)
    compacted = oai.responses.compact(model="local-model", input=history("move to openai"))
    answer = oai.responses.create(model="gpt-5", input=[*plain(compacted.output), user("go on")])
    assert answer.status == "completed"  # OpenAI would refuse a handle it cannot decrypt; it never sees one
    sent = has[0].last("/v1/responses")["body"]["input"]
    assert HANDLE_PREFIX not in json.dumps(sent)
    assert sent[1]["content"][0]["text"].startswith(SUMMARY_HEAD)


def test_a_handle_written_by_one_replica_is_expanded_by_another_through_redis(
    lacks: tuple[Recorder, str], redis_server: RedisServer, tmp_path: Path
) -> None:
    raw = yaml.safe_load((REPO / "config" / "default.yaml").read_text(encoding="utf-8"))
    raw["upstreams"] = {"local": {"base_url": lacks[1]}}
    raw["routes"] = []  # every model to the one local upstream
    raw["summary_cache"] = {"backend": "redis", "url": redis_server.url, "key_prefix": PREFIX}
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    args = ("serve", "--config", str(config))
    for first in start(*args, log=tmp_path / "a.log", ready_path="/healthz"):
        with openai.OpenAI(base_url=f"{first.url}/v1", api_key="k", max_retries=0) as a:
            compacted = a.responses.compact(model="local-model", input=history("replicated task"))
    keys = redis_server.summary_keys()
    assert any("compaction:" in key for key in keys), keys  # the summary went to Redis
    for second in start(
        *args, log=tmp_path / "b.log", ready_path="/healthz"
    ):  # a fresh process: empty memory
        with openai.OpenAI(base_url=f"{second.url}/v1", api_key="k", max_retries=0) as b:
            b.responses.create(model="local-model", input=[*plain(compacted.output), user("go on")])
    sent = lacks[0].last("/v1/responses")["body"]["input"]
    assert sent[1]["content"][0]["text"].startswith(SUMMARY_HEAD)
    assert "replicated task" in sent[1]["content"][0]["text"]
