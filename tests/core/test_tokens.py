"""history_proxy/core/tokens.py: OpenAI's chat counting recipe, offline encoding files, the per-string cache."""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path
from typing import Any

import pytest
import tiktoken
import tiktoken.load
import tiktoken_ext.openai_public  # type: ignore[import-untyped]  # tiktoken_ext ships no py.typed
from hypothesis import given, settings
from hypothesis import strategies as st

from history_proxy.core.encodings import (
    ENCODINGS,
    encoding_for_model,
    install_encoding_files,
    release_rank_table,
)
from history_proxy.core.tokens import TokenCounter, TokenCounters, approximate_length
from history_proxy.pipeline.run import request_messages
from tests.factories import action, assistant, call, system, user
from tests.strategies import conversations


@pytest.fixture(scope="module")
def counters() -> TokenCounters:
    return TokenCounters()


@pytest.fixture(scope="module")
def o200k(counters: TokenCounters) -> TokenCounter:
    return counters.get(encoding="o200k_base")


def tiktoken_published_files() -> dict[str, tuple[str, str]]:
    """tiktoken's own URL and expected SHA-256 per encoding, read from tiktoken_ext without downloading."""
    published: dict[str, tuple[str, str]] = {}

    def capture(url: str, expected_hash: str | None = None) -> dict[bytes, int]:
        published[current] = (url, str(expected_hash))
        return {b"a": 0}

    original = tiktoken_ext.openai_public.load_tiktoken_bpe
    tiktoken_ext.openai_public.load_tiktoken_bpe = capture
    try:
        for current in ENCODINGS:
            getattr(tiktoken_ext.openai_public, current)()
    finally:
        tiktoken_ext.openai_public.load_tiktoken_bpe = original
    return published


# --- the recipe ---------------------------------------------------------------------------------


def test_hello_world_costs_nine_tokens_with_o200k_base(o200k: TokenCounter) -> None:
    # 3 per message + "user" (1) + "hello world" (2) + 3 for the reply priming
    assert o200k.messages([{"role": "user", "content": "hello world"}]) == 9


def test_a_name_adds_its_tokens_and_one_more(o200k: TokenCounter) -> None:
    plain = o200k.message({"role": "user", "content": "hello world"})
    named = o200k.message({"role": "user", "content": "hello world", "name": "alice"})
    assert named == plain + o200k.text("alice") + 1


def test_tool_calls_are_counted_by_function_name_and_arguments(o200k: TokenCounter) -> None:
    act = action(call("bash", {"cmd": "ls -la"}, call_id="call_abcdefghijklmnop"))
    expected = 3 + o200k.text("assistant") + o200k.text("bash") + o200k.text('{"cmd": "ls -la"}')
    assert o200k.message(act) == expected


def test_annotations_are_not_counted(o200k: TokenCounter) -> None:
    plain = user("check the logs")
    annotated = user("check the logs", tags=["keep_output"], message_type="task", phase_id="2", agent="alice")
    assert o200k.message(annotated) == o200k.message(plain)


def test_text_parts_count_their_text_and_images_count_nothing(o200k: TokenCounter) -> None:
    parts = {
        "role": "user",
        "content": [
            {"type": "text", "text": "first part"},
            {"type": "image_url", "image_url": {"url": "https://example.invalid/cat.png"}},
            {"type": "text", "text": "second part"},
        ],
    }
    assert o200k.message(parts) == 3 + o200k.text("user") + o200k.text("first part") + o200k.text(
        "second part"
    )


def test_every_string_field_counts_and_null_content_does_not(o200k: TokenCounter) -> None:
    tool = {"role": "tool", "tool_call_id": "call_1", "content": "ok"}
    assert o200k.message(tool) == 3 + o200k.text("tool") + o200k.text("call_1") + o200k.text("ok")
    assert o200k.message(assistant(None)) == 3 + o200k.text("assistant")


def test_a_request_adds_three_tokens_of_reply_priming(o200k: TokenCounter) -> None:
    messages = [system(), user("hi")]
    assert o200k.messages(messages) == sum(o200k.message(m) for m in messages) + 3
    assert o200k.messages([]) == 3


def test_counts_match_tiktoken_itself(counters: TokenCounters) -> None:
    text = "The quick brown fox jumps over the lazy dog. 🙂 naïve café"
    for name in ENCODINGS:
        assert counters.get(encoding=name).text(text) == len(
            tiktoken.get_encoding(name).encode_ordinary(text)
        )


def test_a_loaded_encoding_drops_its_python_rank_table_and_counts_as_a_full_one(
    counters: TokenCounters,
) -> None:
    """The rank dict tiktoken keeps beside its Rust core (~27 MB for o200k_base) is released."""
    text = "def main():\n    print('héllo, wörld') 🙂 🚀\n\t\treturn 42  # naïve café " * 3
    for name in ENCODINGS:
        counter = counters.get(encoding=name)
        counter.text(name)  # loads the encoding
        registered = tiktoken.get_encoding(name)
        assert registered._mergeable_ranks == {}
        full = tiktoken.Encoding(**getattr(tiktoken_ext.openai_public, name)())  # its own, unregistered
        assert len(full._mergeable_ranks) > 100_000
        assert counter.text(text) == len(full.encode_ordinary(text))
        assert registered.encode_ordinary(text) == full.encode_ordinary(text)
        assert registered.decode(full.encode_ordinary(text)) == text
        release_rank_table(full)  # not the registered one: left whole
        assert len(full._mergeable_ranks) > 100_000


def test_approximate_is_ceil_of_chars_over_four(counters: TokenCounters) -> None:
    approx = counters.get(tokenizer="approximate")
    assert [approximate_length(s) for s in ("", "a", "abcd", "abcde")] == [0, 1, 1, 2]
    assert approx.text("abcdefghi") == 3
    assert approx.messages([{"role": "user", "content": "hello world"}]) == 3 + 1 + 3 + 3


# --- the per-string cache ---------------------------------------------------------------------


def test_recounting_a_grown_conversation_tokenizes_only_the_new_strings() -> None:
    counter = TokenCounters().get(model="gpt-4o")
    history = [system("You fix bugs."), user("The build fails."), assistant("Looking at it.")]
    first = counter.messages(history)
    misses = counter.misses
    grown = [*history, assistant("Found the typo in setup.py."), user("Great, now run the tests.")]
    second = counter.messages(grown)
    assert counter.misses == misses + 2
    assert second > first
    assert counter.messages(grown) == second
    assert counter.misses == misses + 2


class WatchedMessage(dict[str, Any]):
    """A message that counts how often its fields are read, to see how often it is counted."""

    reads = 0

    def items(self) -> Any:
        self.reads += 1
        return super().items()


def test_a_request_view_counts_each_message_object_once_and_agrees_with_the_counter() -> None:
    counters = TokenCounters()
    shared = counters.get(model="gpt-4o")
    act = action(call("bash", {"cmd": "ls"}), text="Listing.")
    messages = [
        WatchedMessage(m)
        for m in (
            system(),
            user("Fix it.", name="alice"),
            act,
            assistant(None, refusal="no"),
            user("x", tags=["t"]),
        )
    ]
    view = counters.for_request().get(model="gpt-4o")
    first = view.messages(messages)
    assert view.messages(messages) == view.messages(list(reversed(messages))) == first
    assert [view.message(m) for m in messages] == view.each(messages)
    assert all(m.reads == 1 for m in messages)
    assert first == shared.messages([dict(m) for m in messages])


FIELD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from(["user", "tool", "assistant", "system", "task", "observation", "bogus", ""]),
    st.text(max_size=8),
    st.lists(st.text(max_size=4), max_size=2),
    st.lists(
        st.dictionaries(
            st.sampled_from(["type", "text", "refusal", "image_url", "id", "function"]),
            st.one_of(
                st.none(),
                st.integers(),
                st.text(max_size=4),
                st.dictionaries(
                    st.sampled_from(["name", "arguments"]), st.one_of(st.none(), st.text(max_size=4))
                ),
            ),
            max_size=3,
        ),
        max_size=3,
    ),
    st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
)
MESSAGE_KEYS = st.sampled_from(
    [
        "role",
        "content",
        "name",
        "tool_call_id",
        "tool_calls",
        "tags",
        "message_type",
        "phase_id",
        "agent",
        "refusal",
        "x",
    ]
)
MESSAGE_LIKE = st.one_of(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant", "tool"])}, optional={"content": FIELD_VALUES}
    )
    | st.dictionaries(MESSAGE_KEYS, FIELD_VALUES, max_size=5),
    FIELD_VALUES,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(MESSAGE_LIKE, max_size=4))
def test_a_plain_count_is_a_valid_message_counted_as_each_counts_it(items: list[Any]) -> None:
    """``each_plain`` vouches only for messages the full request check accepts, and counts them exactly."""
    shared = TokenCounters().get(model="gpt-4o")
    view = TokenCounters().for_request().get(model="gpt-4o")
    for item, count in zip(items, view.each_plain(items), strict=True):
        if count is not None:
            request_messages({"messages": [item]})  # raises if the item is not a valid message
            assert count == shared.message(item) == view.message(item)


@settings(max_examples=60, deadline=None)
@given(conversations())
def test_plain_counts_of_a_conversation_agree_with_each(messages: list[Any]) -> None:
    view = TokenCounters().for_request().get(model="gpt-4o")
    plain = view.each_plain(messages)
    assert [count for count in plain if count is not None] == [
        count for count, p in zip(view.each(messages), plain, strict=True) if p is not None
    ]
    assert view.each(messages) == TokenCounters().get(model="gpt-4o").each(messages)


def test_a_message_changed_by_a_filter_is_a_new_object_and_is_counted_again() -> None:
    view = TokenCounters().for_request().get(model="gpt-4o")
    original = user("a short question")
    longer = {**original, "content": "a much longer question than the one before it"}
    assert view.message(longer) > view.message(original)


@settings(max_examples=60, deadline=None)
@given(
    conversations(),
    st.sampled_from(["content", "name", "tool_call_id", "tags", "vendor"]),
    st.text(max_size=40),
)
def test_a_rewritten_copy_counts_as_a_walk_over_it_counts(messages: list[Any], key: str, text: str) -> None:
    """``count_rewritten`` (how last_n_observations' copies are counted) agrees with counting each copy."""
    view = TokenCounters().for_request().get(model="gpt-4o")
    view.each(messages)
    copies = [{**m, key: text} for m in messages]
    view.count_rewritten(zip(messages, copies, strict=True), key)
    assert view.each(copies) == TokenCounters().get(model="gpt-4o").each(copies)


def test_a_rewritten_copy_of_a_message_not_counted_yet_is_counted_when_asked() -> None:
    view = TokenCounters().for_request().get(model="gpt-4o")
    original = user("a short question")
    copy_ = {**original, "content": "a much longer question than the one before it"}
    view.count_rewritten([(original, copy_)], "content")
    assert view.message(copy_) == TokenCounters().get(model="gpt-4o").message(copy_)
    shared = TokenCounters().get(model="gpt-4o")
    shared.count_rewritten([(original, copy_)], "content")  # outside a request view: nothing to remember
    assert shared.message(copy_) == view.message(copy_)


def test_every_request_gets_its_own_view_over_one_shared_string_cache() -> None:
    counters = TokenCounters()
    history = [system("You fix bugs."), user("The build fails."), assistant("Looking at it.")]
    counters.for_request().get(model="gpt-4o").messages(copy.deepcopy(history))
    misses = counters.get(model="gpt-4o").misses
    grown = [*history, assistant("Found the typo in setup.py."), user("Great, now run the tests.")]
    request = counters.for_request()
    view = request.get(model="gpt-4o")
    assert view is request.get(encoding="o200k_base") is not counters.for_request().get(model="gpt-4o")
    assert view.messages(copy.deepcopy(grown)) == counters.get(model="gpt-4o").messages(grown)
    assert counters.get(model="gpt-4o").misses == view.misses == misses + 2


def test_counts_stay_right_when_the_cache_evicts() -> None:
    counter = TokenCounter(approximate_length, max_entries=10)
    texts = [f"string number {i}" for i in range(50)]
    assert [counter.text(t) for t in texts] == [approximate_length(t) for t in texts]
    assert counter.text(texts[0]) == approximate_length(texts[0])


def test_counters_are_shared_per_encoding(counters: TokenCounters) -> None:
    assert counters.get(model="gpt-4o") is counters.get(encoding="o200k_base")
    assert counters.get(model="gpt-4") is counters.get(encoding="cl100k_base")
    assert counters.get(model="gpt-4o") is not counters.get(model="gpt-4")
    assert counters.get(tokenizer="approximate", encoding="cl100k_base") is counters.get(
        tokenizer="approximate"
    )


def test_an_unknown_encoding_is_refused(counters: TokenCounters) -> None:
    with pytest.raises(ValueError, match="unknown encoding 'p50k_base'"):
        counters.get(encoding="p50k_base")


# --- encodings ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        ("gpt-4o", "o200k_base"),
        ("gpt-4o-mini", "o200k_base"),
        ("gpt-4.1", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("openai/gpt-4", "cl100k_base"),
        ("claude-x", "o200k_base"),
        ("", "o200k_base"),
    ],
)
def test_encoding_for_model_follows_the_spec(model: str, encoding: str) -> None:
    assert encoding_for_model(model) == encoding


def test_encoding_files_are_installed_offline_with_tiktoken_names_and_hashes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "unset-by-the-test")
    target = install_encoding_files(tmp_path / "cache")
    published = tiktoken_published_files()
    assert set(published) == set(ENCODINGS)
    for url, sha256 in published.values():
        installed = target / hashlib.sha1(url.encode()).hexdigest()
        assert hashlib.sha256(installed.read_bytes()).hexdigest() == sha256

    def no_network(url: str) -> Any:
        raise AssertionError(f"tiktoken tried to download {url}")

    monkeypatch.setattr(tiktoken.load, "read_file", no_network)
    for url, sha256 in published.values():
        assert tiktoken.load.read_file_cached(url, sha256)


def test_installing_twice_is_harmless_and_repairs_a_corrupted_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "unset-by-the-test")
    target = install_encoding_files(tmp_path)
    url, sha256 = tiktoken_published_files()["o200k_base"]
    installed = target / hashlib.sha1(url.encode()).hexdigest()
    installed.write_bytes(b"corrupted")
    assert install_encoding_files(tmp_path) == target
    assert hashlib.sha256(installed.read_bytes()).hexdigest() == sha256
    assert sorted(p.name for p in target.iterdir()) == sorted(
        hashlib.sha1(u.encode()).hexdigest() for u, _ in tiktoken_published_files().values()
    )
