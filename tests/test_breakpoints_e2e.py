"""OpenAI cache breakpoints through the real `history-proxy serve` (issue 33, item 4).

``config/default.yaml`` (its ``cache_control`` slot: the 2 newest user/tool messages) with three upstreams
on one recorder: ``openai`` with ``cache_breakpoints: native``, ``stripping`` (``strip``) for ``strip-*``
models and ``plain`` (``forward``) for ``fwd-*`` models. The official openai SDK sends chat completions
and Responses requests; the tests read what the upstream received.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml

from history_proxy.surfaces.breakpoints import BREAKPOINT, KEY_PREFIX
from tests.support.recorder import Recorder, recorder  # noqa: F401 - the fixture
from tests.support.serve_process import Server, start

REPO = Path(__file__).resolve().parents[1]
MARK = {"mode": "explicit"}


@pytest.fixture(scope="module")
def proxy(recorder: tuple[Recorder, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:  # noqa: F811
    folder = tmp_path_factory.mktemp("breakpoints")
    raw = yaml.safe_load((REPO / "config" / "default.yaml").read_text(encoding="utf-8"))
    url = recorder[1]
    raw["upstreams"] = {
        "openai": {"base_url": url, "cache_breakpoints": "native"},
        "stripping": {"base_url": url, "cache_breakpoints": "strip"},
        "plain": {"base_url": url, "cache_breakpoints": "forward"},
    }
    raw["routes"] = [{"model": "strip-*", "upstream": "stripping"}, {"model": "fwd-*", "upstream": "plain"}]
    config = folder / "config.yaml"
    config.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    yield from start("serve", "--config", str(config), log=folder / "proxy.log", ready_path="/healthz")


@pytest.fixture
def upstream(recorder: tuple[Recorder, str]) -> Recorder:  # noqa: F811
    return recorder[0]


@pytest.fixture
def oai(proxy: Server) -> Iterator[openai.OpenAI]:
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="k", max_retries=0)
    yield client
    client.close()


def chat(marks: int = 0) -> list[Any]:
    """system, then user/assistant turns; the first ``marks`` user messages carry the client's breakpoint."""
    messages: list[Any] = [{"role": "system", "content": "you are terse"}]
    for n in range(4):
        part: dict[str, Any] = {"type": "text", "text": f"question {n}"}
        if n < marks:
            part[BREAKPOINT] = dict(MARK)
        messages += [{"role": "user", "content": [part]}, {"role": "assistant", "content": f"answer {n}"}]
    return [*messages, {"role": "user", "content": "last question"}]


def marked(messages: list[Any]) -> list[int]:
    return [
        n
        for n, m in enumerate(messages)
        if isinstance(m.get("content"), list) and any(BREAKPOINT in p for p in m["content"])
    ]


def test_native_breakpoints_go_on_the_newest_user_messages_with_a_conversation_key(
    oai: openai.OpenAI, upstream: Recorder
) -> None:
    oai.chat.completions.create(model="gpt-5.6-sol", messages=chat())
    sent = upstream.last("/v1/chat/completions")["body"]
    assert marked(sent["messages"]) == [7, 9]
    assert sent["messages"][9]["content"] == [{"type": "text", "text": "last question", BREAKPOINT: MARK}]
    assert sent["prompt_cache_key"].startswith(KEY_PREFIX)
    oai.chat.completions.create(
        model="gpt-5.6-sol", messages=[*chat(), {"role": "assistant", "content": "x"}]
    )
    assert upstream.last("/v1/chat/completions")["body"]["prompt_cache_key"] == sent["prompt_cache_key"]


def test_the_clients_breakpoints_count_toward_the_limit_and_stay_where_they_are(
    oai: openai.OpenAI, upstream: Recorder
) -> None:
    oai.chat.completions.create(model="gpt-5.6-sol", messages=chat(marks=3))
    sent = upstream.last("/v1/chat/completions")["body"]["messages"]
    assert marked(sent) == [1, 3, 5]  # 3 of the client's + the implicit one: 4 writes, none added


def test_a_model_before_gpt_5_6_gets_no_breakpoint_but_the_clients_key_is_kept(
    oai: openai.OpenAI, upstream: Recorder
) -> None:
    oai.chat.completions.create(model="gpt-4o", messages=chat(), prompt_cache_key="mine")
    sent = upstream.last("/v1/chat/completions")["body"]
    assert marked(sent["messages"]) == [] and sent["prompt_cache_key"] == "mine"


def test_responses_get_breakpoints_in_input_text_parts(oai: openai.OpenAI, upstream: Recorder) -> None:
    items: Any = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "first"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
        {"type": "message", "role": "user", "content": "second"},
    ]
    oai.responses.create(model="gpt-5.6-sol", input=items, instructions="be brief")
    sent = upstream.last("/v1/responses")["body"]
    assert sent["input"][0]["content"][0][BREAKPOINT] == MARK
    assert sent["input"][2]["content"] == [{"type": "input_text", "text": "second", BREAKPOINT: MARK}]
    assert sent["input"][1] == items[1]
    assert sent["prompt_cache_key"].startswith(KEY_PREFIX)


def test_strip_removes_the_clients_breakpoints_and_options(oai: openai.OpenAI, upstream: Recorder) -> None:
    oai.chat.completions.create(
        model="strip-model", messages=chat(marks=2), extra_body={"prompt_cache_options": {"mode": "explicit"}}
    )
    sent = upstream.last("/v1/chat/completions")["body"]
    assert BREAKPOINT not in json.dumps(sent) and "prompt_cache_options" not in sent
    assert "prompt_cache_key" not in sent


def test_forward_leaves_the_request_as_sent(oai: openai.OpenAI, upstream: Recorder) -> None:
    messages = chat(marks=2)
    oai.chat.completions.create(model="fwd-model", messages=messages)
    sent = upstream.last("/v1/chat/completions")["body"]
    assert sent["messages"] == messages and "prompt_cache_key" not in sent
