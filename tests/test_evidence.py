"""Evidence kept (docs/cost.md, issue 23): what of an agent's next answer it could only have read in an
observation, and whether the request a chain sends still holds it."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from history_proxy.config.loading import load_config
from history_proxy.config.models import Config
from history_proxy.core.cost import ANTHROPIC, OPENAI
from history_proxy.core.evidence import evidence_of, measure
from history_proxy.core.identity import Identity
from history_proxy.core.messages import Message
from history_proxy.core.tokens import TokenCounters
from history_proxy.devtools.replay import replay
from history_proxy.devtools.replay_compare import chat_bodies, is_tool_loop, replay_files
from history_proxy.devtools.replay_render import many_totals
from history_proxy.pipeline.run import Pipeline
from tests.factories import CORPUS_DIR, action, assistant, call, corpus_files, result, system, user

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = REPO / "config" / "default.yaml"
RESERVATION = "Reservation ZFA04Y: flight HAT1234 on 2024-05-17, paid with credit_card_2929732.\n" * 3


def lookup(output: str = RESERVATION, name: str = "get_reservation") -> list[Message]:
    act = action(call(name, {"reservation_id": "ZFA04Y"}))
    return [act, result(act, output)]


def booking(task: str = "Change my flight.") -> list[Message]:
    """A task, a tool read, two more steps, and an answer that uses what the read showed."""
    return [
        system(),
        user(task),
        *lookup(),
        *lookup("Flights: HAT0001 HAT0002, nothing else of note.", "search_flights"),
        *lookup("Done, the seat map is unchanged for every flight listed.", "get_seats"),
        assistant("I will refund credit_card_2929732 for flight HAT1234."),
    ]


def test_a_fact_read_in_a_tool_output_and_used_later_is_evidence() -> None:
    messages = booking()
    assert evidence_of(messages[:-1], messages[-1]) == {"credit_card_2929732", "HAT1234"}


def test_a_fact_the_user_also_stated_is_not_evidence() -> None:
    messages = booking("Change flight HAT1234, please.")
    assert evidence_of(messages[:-1], messages[-1]) == {"credit_card_2929732"}


def test_tool_call_arguments_and_short_tokens_count_as_the_definition_says() -> None:
    messages = [user("go"), *lookup("see /repo/src/app.py line 4417 in handle_request; id 42 and foo")]
    answer = action(call("open", {"path": "src/app.py", "line": 4417, "fn": "handle_request", "id": 42}))
    # paths match inside longer paths; numbers need 4 digits, names 6 characters
    assert evidence_of(messages, answer) == {"src/app.py", "4417", "handle_request"}


def test_eliding_the_output_lowers_the_figure_and_its_facts_notice_keeps_it() -> None:
    messages = booking()
    prior, answer = messages[:-1], messages[-1]
    assert measure(prior, answer, prior).lost == ()
    lines, facts = (
        asyncio.run(chain_output(f"{{type: last_n_observations, n: 1, notice: {notice}}}", prior))
        for notice in ("lines", "facts")
    )
    assert "HAT1234" not in json.dumps(lines)
    assert measure(prior, answer, lines).lost == ("HAT1234", "credit_card_2929732")
    assert measure(prior, answer, facts).lost == ()
    # kept, but only in a notice: not in the context the agent read them in
    assert measure(prior, answer, facts).out_of_context == ("HAT1234", "credit_card_2929732")
    assert measure(prior, answer, prior).out_of_context == ()
    # ZFA04Y is in the call that asked for it: already in the request, not repeated
    assert "(3 lines omitted; facts: Reservation HAT1234 2024 credit_card_2929732)" in json.dumps(facts)


async def chain_output(filter_yaml: str, messages: list[Message]) -> list[Message]:
    config = config_with(f"policies: {{roles: {{worker: [{filter_yaml}]}}}}")
    outcome = await Pipeline(config, TokenCounters()).run(
        {"model": "gpt-4o", "messages": messages}, Identity(role="worker"), "mock"
    )
    return outcome.filtered_messages


def config_with(text: str) -> Config:
    import yaml

    return Config.model_validate({"upstreams": {"mock": {"base_url": "mock://"}}, **yaml.safe_load(text)})


def test_replay_reports_evidence_per_request_and_in_total() -> None:
    body = {"model": "gpt-4o", "messages": booking()}
    config = config_with("policies: {roles: {worker: [{type: last_n_observations, n: 1}]}}")
    outcome = asyncio.run(replay(Pipeline(config, TokenCounters()), body, Identity(role="worker")))
    last = outcome.steps[-1]
    assert (last.evidence_needed, last.evidence_lost) == (2, ("HAT1234", "credit_card_2929732"))
    assert outcome.totals["evidence_needed"] == 2 and outcome.totals["evidence_share"] == 0.0
    assert outcome.to_json()["steps"][-1]["evidence_lost"] == ["HAT1234", "credit_card_2929732"]


# --- the default worker chain on the corpus (issue 23's bar) ------------------------------------------


def tool_loops() -> dict[str, dict[str, Any]]:
    """Every corpus conversation with a tool loop, as its chat view (a Responses or Messages body too)."""
    bodies = {path.name: json.loads(path.read_text(encoding="utf-8")) for path in corpus_files()}
    return chat_bodies(bodies, None, 12)


def chat_shaped(body: Any) -> bool:
    """A chat-completions body as recorded (what the reference measure reads)."""
    return isinstance(body, dict) and is_tool_loop(body.get("messages"), 12)


@pytest.mark.skipif(not CORPUS_DIR.exists(), reason="corpus not available")
def test_the_default_worker_chain_keeps_the_evidence_for_at_most_0_6_of_the_cost() -> None:
    config = load_config(DEFAULT_CONFIG)
    bodies = tool_loops()
    assert len(bodies) >= 10
    for pricing in (ANTHROPIC, OPENAI):
        results = replay_files(
            bodies, lambda: Pipeline(config, TokenCounters()), Identity(role="worker"), pricing
        )
        totals = many_totals(results)
        assert totals["evidence_share"] >= 0.97, totals["least_evidence"]
        assert totals["cost_ratio"] <= 0.6, (pricing.name, totals["cost_ratio"])
        assert totals["dearer"] == [], pricing.name


# --- agreement with the reference measure, when the workspace has it (../shared) ----------------------


def reference_tool() -> Path | None:
    for folder in (REPO.parent, REPO.parent.parent):
        candidate = folder / "shared" / "tools" / "evidence_kept.py"
        if candidate.exists():
            return candidate
    return None


REFERENCE = reference_tool()
needs_reference = pytest.mark.skipif(
    REFERENCE is None, reason="no ../shared/tools/evidence_kept.py beside the clone"
)


def load_reference() -> ModuleType:
    assert REFERENCE is not None
    spec = importlib.util.spec_from_file_location("evidence_kept_reference", REFERENCE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@needs_reference
def test_the_measure_agrees_with_the_reference_on_every_corpus_request() -> None:
    reference = load_reference()
    checked = 0
    for path in corpus_files():
        body = json.loads(path.read_text(encoding="utf-8"))
        if not chat_shaped(body):
            continue
        messages = body["messages"]
        for end in reference.request_ends(messages):
            prior = messages[:end]
            used = set(reference.TOK.findall(reference.text(messages[end])))
            flags = reference.observations(prior)
            seen_obs = " ".join(reference.text(m) for m, o in zip(prior, flags, strict=True) if o)
            seen_other = " ".join(reference.text(m) for m, o in zip(prior, flags, strict=True) if not o)
            expected = {t for t in used if t in seen_obs and t not in seen_other}
            assert evidence_of(prior, messages[end]) == expected
            checked += len(expected)
    assert checked > 100


@needs_reference
def test_replay_prints_the_figures_the_reference_measures(tmp_path: Path) -> None:
    assert REFERENCE is not None
    venv = Path(sys.executable).parent.parent
    if not (venv / "bin" / "history-proxy").exists():
        pytest.skip(f"no history-proxy script in {venv} for the reference measure to run")
    corpus = tmp_path / "corpus"  # the chat-completions files, the ones the reference reads
    corpus.mkdir()
    chat = {}
    for path in corpus_files():
        body = json.loads(path.read_text(encoding="utf-8"))
        if chat_shaped(body):
            (corpus / path.name).write_text(json.dumps(body), encoding="utf-8")
            chat[path.name] = body
    env = {"PROJECT": str(REPO), "HP_VENV": str(venv), "PATH": "/usr/bin:/bin"}
    measured = subprocess.run(
        [sys.executable, str(REFERENCE), str(corpus), "--json", str(tmp_path / "ref.json")],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert (tmp_path / "ref.json").exists(), measured.stdout + measured.stderr
    per = json.loads((tmp_path / "ref.json").read_text())["per"]
    config = load_config(DEFAULT_CONFIG)
    results = replay_files(chat, lambda: Pipeline(config, TokenCounters()), Identity(role="worker"), None)
    ours = {name: [r.evidence_needed, r.evidence_kept] for name, r in results.items()}
    assert ours == per
    assert measured.returncode == 0, measured.stdout  # the reference's own verdict on the default chain
