"""The history-proxy command: check, schema, preview and serve's refusal of a bad config."""

from __future__ import annotations

import io
import json
import socket
from pathlib import Path
from typing import Any

import pytest

from history_proxy.cli import main
from tests.factories import CORPUS_DIR

SECRET = "sk-plantedSECRETvalue0123456789abcdef"

VALID = """
upstreams:
  main: {base_url: "http://127.0.0.1:9/v1", api_key: "PLANTED"}
policies:
  roles:
    worker: [{type: passthrough}]
""".replace("PLANTED", SECRET)

SPEC_EXAMPLE_ERROR = """
upstreams:
  main: {base_url: "http://127.0.0.1:9/v1"}
policies:
  roles:
    worker: [{type: worker_view}, {type: last_n_observations, n: 0}]
"""

TWO_ERRORS = """
upstreams:
  main: {base_url: "ftp://example.com", api_key: "PLANTED"}
limits: {max_body_bytes: 0}
""".replace("PLANTED", SECRET)


def write(tmp_path: Path, text: str, name: str = "config.yaml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Record (and refuse) every attempt to open a network connection."""
    attempts: list[Any] = []

    def refuse(self: socket.socket, address: Any) -> None:
        attempts.append(address)
        raise OSError("network disabled in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    return attempts


def test_check_accepts_a_valid_config_with_a_one_line_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run(capsys, "check", write(tmp_path, VALID))

    assert status == 0
    assert len(out.strip().splitlines()) == 1
    assert out.startswith("ok: 1 upstream(s) (main)")
    assert "worker(1)" in out
    assert err == ""


def test_check_accepts_the_default_config(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)

    status, out, _ = run(capsys, "check", str(Path(__file__).parents[2] / "config" / "default.yaml"))

    assert status == 0
    assert "orchestrator(1), manager(1), worker(3), default(1)" in out


def test_check_locates_the_error_as_the_spec_shows_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run(capsys, "check", write(tmp_path, SPEC_EXAMPLE_ERROR))

    assert status == 1
    assert out == ""
    assert (
        "policies.roles.worker[1].n: must be >= 1" in err or "policies.roles.worker[1].n: must be > 0" in err
    )


def test_check_prints_every_error_with_its_location(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = run(capsys, "check", write(tmp_path, TWO_ERRORS))

    assert status == 1
    assert "upstreams.main.base_url: must start with http://, https:// or mock://" in err
    assert "limits.max_body_bytes: must be > 0" in err
    assert "Traceback" not in err


def test_check_never_prints_a_secret(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, ok_out, ok_err = run(capsys, "check", write(tmp_path, VALID, "ok.yaml"))
    _, bad_out, bad_err = run(capsys, "check", write(tmp_path, TWO_ERRORS, "bad.yaml"))

    assert SECRET not in ok_out + ok_err + bad_out + bad_err


def test_check_names_a_missing_environment_variable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HISTORY_PROXY_TEST_KEY", raising=False)
    config = 'upstreams: {main: {base_url: "http://x/v1", api_key: "${HISTORY_PROXY_TEST_KEY}"}}'

    status, _, err = run(capsys, "check", write(tmp_path, config))

    assert status == 1
    assert "upstreams.main.api_key: environment variable HISTORY_PROXY_TEST_KEY is not set" in err


def test_check_of_a_missing_file_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = run(capsys, "check", str(tmp_path / "absent.yaml"))

    assert status == 1
    assert "absent.yaml" in err and "cannot read" in err
    assert "Traceback" not in err


def test_serve_refuses_to_start_on_an_invalid_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run(capsys, "serve", "--config", write(tmp_path, TWO_ERRORS), "--port", "1")

    assert status == 1
    assert "serving" not in out
    assert "limits.max_body_bytes: must be > 0" in err


def test_schema_is_json_naming_every_top_level_key(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "schema")

    assert status == 0
    schema = json.loads(out)
    assert {
        "upstreams",
        "routes",
        "identity",
        "auth",
        "limits",
        "policies",
        "cache_control",
        "on_filter_error",
    } <= set(schema["properties"])
    assert schema["required"] == ["upstreams"]


def test_preview_prints_body_and_report_for_a_corpus_file_and_sends_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_network: list[Any]
) -> None:
    corpus_file = CORPUS_DIR / "swe-agent-marshmallow-1867-fc.json"
    original = json.loads(corpus_file.read_text(encoding="utf-8"))
    config = write(
        tmp_path,
        """
upstreams:
  main: {base_url: "http://127.0.0.1:9/v1"}
policies:
  roles:
    worker: [{type: last_n_observations, n: 2}]
""",
    )

    status, out, err = run(
        capsys, "preview", "--config", config, "--role", "worker", "--agent", "w1", str(corpus_file)
    )

    assert status == 0, err
    printed = json.loads(out)
    assert set(printed) == {"body", "report"}
    assert printed["body"]["model"] == original["model"]
    assert len(printed["body"]["messages"]) == len(original["messages"])
    assert any("Old environment output" in str(m.get("content")) for m in printed["body"]["messages"])
    report = printed["report"]
    assert report["role"] == "worker" and report["agent"] == "w1"
    assert report["after"]["tokens"] < report["before"]["tokens"]
    assert no_network == []


def test_preview_reads_stdin_and_uses_the_default_role(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, no_network: list[Any]
) -> None:
    config = write(tmp_path, VALID + "identity: {default_role: worker}\n")
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi", "tags": ["keep_output"]}]}
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(body)))

    status, out, _ = run(capsys, "preview", "--config", config, "-")

    assert status == 0
    printed = json.loads(out)
    assert printed["report"]["role"] == "worker"
    assert printed["body"]["messages"] == [{"role": "user", "content": "hi"}]
    assert no_network == []


def test_preview_of_a_body_without_messages_says_what_to_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run(
        capsys, "preview", "--config", write(tmp_path, VALID), write(tmp_path, '{"model": "m"}', "b.json")
    )

    assert status == 1
    assert out == ""
    assert "'messages' is required" in err
    assert len(err.strip().splitlines()) == 1


def test_preview_of_invalid_json_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = run(
        capsys, "preview", "--config", write(tmp_path, VALID), write(tmp_path, "{oops", "b.json")
    )

    assert status == 1
    assert "not valid JSON" in err
    assert len(err.strip().splitlines()) == 1


def test_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(capsys, "replay-everything")

    assert status == 2
    assert "invalid choice" in err
