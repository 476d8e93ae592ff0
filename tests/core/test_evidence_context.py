"""Evidence kept with its context (docs/cost.md, issue 32): a bag of tokens scores as dropping, a quoted
line keeps its token, whitespace is no loss; and the reference measure agrees token for token."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings

from history_proxy.config.loading import load_config
from history_proxy.core.evidence import DISTINCTIVE
from history_proxy.core.evidence_context import (
    ContextEvidence,
    ContextMemo,
    contexts,
    measure_context,
    normalised,
)
from history_proxy.core.identity import Identity
from history_proxy.core.messages import Message
from history_proxy.core.tokens import TokenCounters
from history_proxy.devtools.replay import request_ends
from history_proxy.pipeline.run import Pipeline
from tests.factories import CORPUS_DIR, action, assistant, call, result, system, user
from tests.strategies import conversations

REPO = Path(__file__).resolve().parents[2]

CONFIG = "service:\n  host: example.org\n  port: 8080\n  log_dir: /var/log/app_server\n  workers: 4\n"
LISTING = "src/app_main.py\nsrc/app_util.py\nsrc/app_views.py\ntests/test_app.py\n"
RECORD = {
    "reservation_id": "ZFA04Y",
    "flights": [
        {"flight_number": "HAT170", "date": "2024-05-22", "price": 1233},
        {"flight_number": "HAT277", "date": "2024-05-24", "price": 1417},
    ],
    "payment_id": "credit_card_2929732",
}
ANSWER = (
    "Port 8080 logs to /var/log/app_server; src/app_views.py; HAT170 at 1233 and HAT277 at 1417 paid by "
    "credit_card_2929732"
)


def history() -> list[Message]:
    """Three tool reads (a config, a listing, a JSON record); the answer uses what each showed."""
    messages: list[Message] = [system("You are an agent."), user("Fix the service and rebook the customer.")]
    for name, output in (
        ("read_file", CONFIG),
        ("list_files", LISTING),
        ("get_reservation", json.dumps(RECORD, indent=2)),
    ):
        act = action(call(name, {"q": name}))
        messages += [act, result(act, output)]
    return messages


HISTORY = history()


def rewrite(messages: list[Message], how: Callable[[str], str]) -> list[Message]:
    """Every tool output rewritten by ``how``, as a chain would send them."""
    return [{**m, "content": how(m["content"])} if m.get("role") == "tool" else m for m in messages]


def measured(sent: list[Message]) -> ContextEvidence:
    return measure_context(HISTORY, assistant(ANSWER), sent)


def test_unfiltered_keeps_every_token_with_its_context() -> None:
    evidence = measured(HISTORY)
    assert set(evidence.needed) >= {"8080", "HAT170", "1233", "credit_card_2929732", "src/app_views.py"}
    assert evidence.with_context == evidence.anywhere == evidence.unchanged == set(evidence.needed)
    assert evidence.lost == ()


def notice(output: str) -> str:
    return f"Old environment output: ({len(output.splitlines())} lines omitted)"


def bag(output: str) -> str:
    """A notice listing every distinctive token of the output (an upper bound on any fact list)."""
    return notice(output) + f"; facts: {' '.join(dict.fromkeys(DISTINCTIVE.findall(output)))}"


def test_a_bag_of_tokens_notice_keeps_no_more_in_context_than_dropping_the_output() -> None:
    dropped, bagged = measured(rewrite(HISTORY, notice)), measured(rewrite(HISTORY, bag))
    assert bagged.anywhere == set(bagged.needed)  # every token is still somewhere in the request ...
    assert dropped.with_context == set()
    # ... but none where it stood, unless the output itself was such a list: the file listing's names
    # in order are its entries with their neighbours, whitespace aside
    assert bagged.with_context == {"src/app_views.py"}
    assert {why for _, why in bagged.lost} == {"notice"}
    assert {why for _, why in dropped.lost} == {"elided"}


def test_a_quoted_line_keeps_its_token_and_only_its_token() -> None:
    def digest(output: str) -> str:
        kept = [line for line in output.splitlines() if "8080" in line or "HAT170" in line]
        return notice(output) + "; the lines holding its facts:\n" + "\n".join(kept)

    evidence = measured(rewrite(HISTORY, digest))
    assert {"8080", "HAT170"} <= evidence.with_context
    assert "1233" not in evidence.with_context  # on the next line of the record, which was not quoted
    assert "8080" not in evidence.unchanged  # the message changed: the older reading misses it


def test_whitespace_is_no_loss_minified_json_and_reindented_text_keep_everything() -> None:
    def minify(output: str) -> str:
        try:
            return json.dumps(json.loads(output), separators=(",", ":"))
        except ValueError:
            return "\n\n".join("    " + line.replace(" ", "   ") for line in output.splitlines())

    evidence = measured(rewrite(HISTORY, minify))
    assert evidence.with_context == set(evidence.needed)
    assert evidence.unchanged == set()  # every output changed, none lost its facts


def test_a_reworded_line_loses_its_token_context_though_the_token_stays() -> None:
    evidence = measured(rewrite(HISTORY, lambda out: out.replace("port: 8080", "port = 8080")))
    assert evidence.lost == (("8080", "elided"),) or evidence.lost == (("8080", "notice"),)
    assert "8080" in evidence.anywhere and "8080" not in evidence.with_context


def test_a_token_lost_with_the_message_that_held_it_is_dropped() -> None:
    sent = HISTORY[:2] + HISTORY[4:]  # the config read and its output are gone
    evidence = measured(sent)
    assert dict(evidence.lost) == {"8080": "dropped", "var/log/app_server": "dropped"}


def test_a_text_action_observation_is_elided_or_dropped_as_the_request_shows() -> None:
    observation = user("OBSERVATION\n" + CONFIG)
    messages = [system(), user("Fix the service."), assistant("cat config.yaml"), observation]
    messages += [assistant("ls"), user("OBSERVATION\nnothing here")]
    answer = assistant("The port is 8080.")
    shortened = [*messages[:3], user("Old environment output: (6 lines omitted)"), *messages[4:]]
    assert measure_context(messages, answer, shortened).lost == (("8080", "elided"),)
    assert measure_context(messages, answer, messages[:2] + messages[4:]).lost == (("8080", "dropped"),)


def test_a_listing_entry_is_kept_with_the_entries_around_it() -> None:
    text = normalised(LISTING)
    assert contexts("src/app_views.py", text) == ["src/app_util.py\nsrc/app_views.py\ntests/test_app.py"]
    assert contexts("8080", normalised(CONFIG)) == ["port: 8080"]
    line = '"flight_number": "HAT170", "date": "2024-05-22", "price": 1233},'
    assert contexts("HAT170", line) == ['"flight_number": "HAT170", "date": "2024-05-22", "price":']


@settings(max_examples=40, deadline=None)
@given(conversations())
def test_an_unchanged_request_keeps_every_token_with_its_context(messages: list[Message]) -> None:
    memo = ContextMemo()
    for end in request_ends(messages):
        if end < len(messages):
            evidence = measure_context(messages[:end], messages[end], messages[:end], memo=memo)
            assert evidence.with_context == evidence.anywhere == set(evidence.needed)


# --- agreement with the reference measure, token for token (../shared, absent from a public clone) ----


def reference_tool() -> Path | None:
    for folder in (REPO.parent, REPO.parent.parent):
        candidate = folder / "shared" / "tools" / "evidence_context.py"
        if candidate.exists():
            return candidate
    return None


REFERENCE = reference_tool()
needs_reference = pytest.mark.skipif(
    REFERENCE is None,
    reason="no ../shared/tools/evidence_context.py beside the clone (a public clone lacks it)",
)


def load_reference() -> ModuleType:
    assert REFERENCE is not None
    spec = importlib.util.spec_from_file_location("evidence_context_reference", REFERENCE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def corpus_tool_loops(reference: ModuleType) -> list[Path]:
    files = sorted(CORPUS_DIR.glob("*.json")) + sorted((CORPUS_DIR / "tool-loops").glob("*.json"))
    return [f for f in files if reference.tool_loop(json.loads(f.read_text(encoding="utf-8"))["messages"])]


def expected_reason(loss: dict[str, Any], ours: str) -> str:
    """The reference's loss record read as ours: a token still in the request lost only its context; a
    tool output still answered was elided, one no longer there dropped. The reference does not tell
    for an observation in a user message (text-action agents, simulated users): ours stands."""
    if loss["token_kept"]:
        return "notice"
    if loss["status"] == "user-observation":
        return ours if ours in ("elided", "dropped") else "a reason"
    return "dropped" if loss["status"] == "dropped" else "elided"


def chain_sender(config: Any) -> Callable[[dict[str, Any], list[Message]], list[Message]]:
    """What the chain sends for each growing request of one conversation (each run once)."""
    pipeline, sent = Pipeline(config, TokenCounters()), {}

    def sender(body: dict[str, Any], prior: list[Message]) -> list[Message]:
        if len(prior) not in sent:
            outcome = asyncio.run(
                pipeline.run({**body, "messages": prior}, Identity(role="worker"), "openai")
            )
            sent[len(prior)] = outcome.filtered_messages
        return sent[len(prior)]

    return sender


def agree(reference: ModuleType, files: list[Path], chain: str) -> tuple[int, set[str]]:
    """Replay ``files`` through ``chain`` (a worker filter list); both measures read the same requests.
    Returns the evidence tokens checked and the reasons met."""
    config = load_config(REPO / "config" / "default.yaml") if chain == "default" else chain_config(chain)
    options = argparse.Namespace(words=3, whitespace="blind", post="none")
    checked, reasons = 0, set()
    for path in files:
        body = json.loads(path.read_text(encoding="utf-8"))
        sender = chain_sender(config)
        losses: list[dict[str, Any]] = []
        theirs = reference.measure_file(body, sender, options, None, path.name, losses)
        messages, memo, ours = (
            body["messages"],
            ContextMemo(),
            {"need": 0, "tok": 0, "ctx": 0, "unchanged": 0},
        )
        lost: dict[tuple[int, str], str] = {}
        for end in reference.request_ends(messages):
            if end < len(messages):
                e = measure_context(messages[:end], messages[end], sender(body, messages[:end]), memo=memo)
                for key, part in (("need", e.needed), ("tok", e.anywhere), ("ctx", e.with_context)):
                    ours[key] += len(part)
                ours["unchanged"] += len(e.unchanged)
                lost |= {(end, token): why for token, why in e.lost}
        assert ours == {k: theirs[k] for k in ours}, path.name
        assert lost == {
            (x["request"], x["token"]): expected_reason(x, lost.get((x["request"], x["token"]), ""))
            for x in losses
        }, path.name
        checked += ours["need"]
        reasons |= set(lost.values())
    return checked, reasons


def chain_config(filters: str) -> Any:
    import yaml

    from history_proxy.config.models import Config

    text = f"upstreams: {{openai: {{base_url: 'mock://'}}}}\npolicies: {{roles: {{worker: {filters}}}}}"
    return Config.model_validate(yaml.safe_load(text))


@needs_reference
def test_the_measure_agrees_with_the_reference_on_every_corpus_tool_loop_under_the_default_chain() -> None:
    reference = load_reference()
    files = corpus_tool_loops(reference)
    assert len(files) >= 20  # every committed tool loop (the converted public runs are not committed)
    checked, reasons = agree(reference, files, "default")
    assert checked > 400 and "notice" in reasons


@needs_reference
def test_the_measure_agrees_with_the_reference_where_a_chain_elides_and_drops() -> None:
    reference = load_reference()
    files = corpus_tool_loops(reference)[::3]
    elided = "[{type: last_n_observations, n: 2, notice: lines}]"
    dropped = "[{type: sliding_window, window_size: 3}]"
    checked, reasons = agree(reference, files, elided)
    assert checked > 100 and "elided" in reasons
    checked, reasons = agree(reference, files, dropped)
    assert checked > 100 and "dropped" in reasons
