"""Installable anywhere: a wheel built from this tree, installed in a fresh venv outside the clone,
serves the README's quick start on all three APIs with `history-proxy serve` and no flags.

Builds the wheel from a copy of the files a build reads (so the clone gets no build/ directory), then
`pip install`s it with its pinned dependencies from the package index (pip's cache is reused); skips
with pip's reason when the index cannot be reached.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anthropic
import openai
import pytest

from tests.support.processes import NETWORK_ERRORS
from tests.support.serve_process import Server, free_port, offline_env

REPO = Path(__file__).resolve().parents[1]
BUILD_FILES = (
    "pyproject.toml",
    "README.md",
    "LICENSE",
    "history_proxy",
    "config/default.yaml",
    "tests/corpus/openhands-codeact-ponylang-ponyc-4593.json",  # the demo's conversation (a link in history_proxy/)
)
PROXY_PY = "proxy.py==2.4.10"
"""PyPI's proxy.py, which installs a top-level ``proxy`` package: the name this one no longer takes."""
PIPX = "pipx==1.18.4"
PIP_TIMEOUT_S = 600

pytestmark = pytest.mark.timeout(PIP_TIMEOUT_S + 120)


def pip(python: Path | str, *args: str) -> None:
    """Run pip; skip the test when the package index is unreachable, fail on any other error."""
    command = [str(python), "-m", "pip", "--disable-pip-version-check", "-q", *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.skip(f"pip {args[0]} took over {PIP_TIMEOUT_S}s (package index unreachable?)")
    out = done.stdout + done.stderr
    if done.returncode != 0 and any(error in out for error in NETWORK_ERRORS):
        pytest.skip(f"pip cannot reach the package index: {out.strip().splitlines()[-1][:300]}")
    assert done.returncode == 0, f"pip {' '.join(args)} failed:\n{out[-3000:]}"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``bin`` directory of a fresh venv holding only the wheel and its dependencies."""
    root = tmp_path_factory.mktemp("install")
    source = root / "source"
    for name in BUILD_FILES:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, symlinks=True)
        else:
            shutil.copy2(REPO / name, source / name)
    pip(sys.executable, "wheel", "--no-deps", "-w", str(root / "dist"), str(source))
    (wheel,) = (root / "dist").glob("history_proxy-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(root / "venv")], check=True, timeout=120)
    pip(root / "venv" / "bin" / "python", "install", str(wheel))
    return root / "venv" / "bin"


@pytest.fixture(scope="module")
def served(installed: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """`history-proxy serve` with no flags (but the port), from an empty directory: no config anywhere."""
    empty = tmp_path_factory.mktemp("anywhere")
    port = free_port()
    log = empty.parent / "serve.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [str(installed / "history-proxy"), "serve", "--mock", "--port", str(port)],
            cwd=empty,
            env=offline_env(),
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    server = Server(process, port, log)
    try:
        server.wait_ready("/healthz")
        yield server
    finally:
        server.stop()


def test_the_installed_package_serves_with_its_packaged_default_config(served: Server) -> None:
    assert "config " in served.output() and "default.yaml" in served.output()
    assert "site-packages" in served.output(), "the packaged config, not the clone's"


def test_the_quick_start_answers_on_chat_completions(served: Server) -> None:
    with openai.OpenAI(
        base_url=f"{served.url}/v1", api_key="unused", default_headers={"X-Agent-Role": "worker"}
    ) as client:
        reply = client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "Hello"}]
        )
    assert (
        reply.choices[0].message.content
        == 'mock: received 1 messages (user=1), ~8 tokens; last user: "Hello"'
    )


def test_the_quick_start_answers_on_responses(served: Server) -> None:
    with openai.OpenAI(
        base_url=f"{served.url}/v1", api_key="unused", default_headers={"X-Agent-Role": "worker"}
    ) as client:
        response = client.responses.create(model="gpt-4o-mini", instructions="Be brief.", input="Hello")
    assert response.output_text.startswith("mock: received")


def test_the_quick_start_answers_on_messages(served: Server) -> None:
    with anthropic.Anthropic(
        base_url=served.url, api_key="unused", default_headers={"X-Agent-Role": "worker"}
    ) as client:
        message = client.messages.create(
            model="claude-sonnet-4-6", max_tokens=256, messages=[{"role": "user", "content": "Hello"}]
        )
    block = message.content[0]
    assert isinstance(block, anthropic.types.TextBlock) and block.text.startswith("mock: received")


def test_init_writes_the_packaged_config_outside_the_clone(installed: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [str(installed / "history-proxy"), "init"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "history-proxy.yaml").read_text(encoding="utf-8") == (
        REPO / "config" / "default.yaml"
    ).read_text(encoding="utf-8")


def test_the_dockerfile_copies_what_the_wheel_build_reads_before_installing() -> None:
    dockerfile = (REPO / "Dockerfile").read_text(encoding="utf-8")
    before_install = dockerfile.split("pip install", 1)[0]
    copied = " ".join(line for line in before_install.splitlines() if line.startswith("COPY "))
    assert [name for name in BUILD_FILES if name not in copied] == []


def run_python(installed: Path, code: str) -> subprocess.CompletedProcess[str]:
    """``code`` run by the installed venv's python."""
    return subprocess.run([str(installed / "python"), "-c", code], capture_output=True, text=True, timeout=60)


def wheel_of(installed: Path) -> Path:
    (wheel,) = (installed.parents[1] / "dist").glob("history_proxy-*.whl")
    return wheel


def test_the_wheel_installs_beside_proxy_py_and_both_import(installed: Path) -> None:
    """M6/M7: `proxy` is PyPI's proxy.py's; ours is `history_proxy`, so both live in one venv."""
    pip(installed / "python", "install", PROXY_PY)
    done = run_python(
        installed, "import history_proxy, proxy; print(history_proxy.__version__, proxy.__name__)"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0.2.0", "proxy"]
    version = subprocess.run([str(installed / "history-proxy"), "--version"], capture_output=True, text=True)
    assert version.stdout.strip() == "history-proxy 0.2.0"


def test_the_wheel_holds_the_demo_conversation_and_an_spdx_licence(installed: Path) -> None:
    done = run_python(
        installed,
        "from history_proxy.devtools.demo import demo_conversation; print(len(demo_conversation()['messages']))",
    )
    assert done.stdout.strip() == "68", done.stderr
    import zipfile

    with zipfile.ZipFile(wheel_of(installed)) as wheel:
        metadata = next(wheel.read(n).decode() for n in wheel.namelist() if n.endswith("/METADATA"))
    assert "License-Expression: MIT" in metadata.splitlines()


def test_pipx_installs_the_command_from_the_wheel(installed: Path, tmp_path: Path) -> None:
    """The README's `pipx install dist/history_proxy-0.2.0-py3-none-any.whl`, in a throwaway PIPX_HOME."""
    tools = tmp_path / "tools"
    subprocess.run([sys.executable, "-m", "venv", str(tools)], check=True, timeout=120)
    pip(tools / "bin" / "python", "install", PIPX)
    env = offline_env(
        PIPX_HOME=str(tmp_path / "pipx"),
        PIPX_BIN_DIR=str(tmp_path / "bin"),
        PIPX_MAN_DIR=str(tmp_path / "man"),
    )
    done = subprocess.run(
        [str(tools / "bin" / "pipx"), "install", str(wheel_of(installed))],
        capture_output=True,
        text=True,
        timeout=PIP_TIMEOUT_S,
        env=env,
    )
    out = done.stdout + done.stderr
    if done.returncode != 0 and any(error in out for error in NETWORK_ERRORS):
        pytest.skip(f"pipx cannot reach the package index: {out.strip().splitlines()[-1][:300]}")
    assert done.returncode == 0, out[-3000:]
    command = tmp_path / "bin" / "history-proxy"
    version = subprocess.run([str(command), "--version"], capture_output=True, text=True, timeout=60, env=env)
    assert version.stdout.strip() == "history-proxy 0.2.0", version.stderr
    checked = subprocess.run(
        [str(command), "check"], capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path
    )
    assert checked.returncode == 0 and "the default config packaged with history-proxy" in checked.stdout


def test_make_help_lists_every_target_with_its_time_and_downloads() -> None:
    """M5: `make help` names every target; the ones that install say how long and what they download."""
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    phony = re.search(r"^\.PHONY: (.+)$", makefile, re.MULTILINE)
    assert phony is not None
    done = subprocess.run(["make", "-s", "help"], cwd=REPO, capture_output=True, text=True, timeout=60)
    listed = {line.split()[0]: line for line in done.stdout.splitlines()[1:] if line.strip()}
    assert set(listed) == set(phony.group(1).split())
    for target in ("run", "demo", "test", "lint", "install", "install-dev", "wheel", "docs-figures"):
        assert re.search(r"~?\d+(\.\d+)?( |-\d+ )?(s|min)\b", listed[target]), f"{target}: no time"
    for part in ("Phoenix", "Codex", "Claude Code", "container", "nginx", "prometheus", "kubectl", "1 GB"):
        assert part in listed["test"], f"make test does not announce {part}"
    assert "downloads" in listed["run"] and "Downloads" in listed["test"]


def test_make_run_installs_only_what_serving_needs_and_chooses_the_mock() -> None:
    """L2: no test tools for `make run`; the mock is its explicit choice (MOCK=0: the real providers)."""
    planned = subprocess.run(
        ["make", "-n", "-B", "run"], cwd=REPO, capture_output=True, text=True, timeout=60
    ).stdout
    installs = [line for line in planned.splitlines() if "pip install" in line]
    assert installs and all(line.rstrip().endswith("-e .") for line in installs), installs
    assert "serve --host 127.0.0.1 --port 8080 --mock" in planned
    real = subprocess.run(["make", "-n", "run", "MOCK=0"], cwd=REPO, capture_output=True, text=True).stdout
    assert "--mock" not in real and "serve --host" in real


def test_make_wheel_builds_the_wheel_alone_with_the_pinned_setuptools() -> None:
    """M7: no dependency wheels dropped into the clone; the build requirement pinned, the licence SPDX."""
    planned = subprocess.run(
        ["make", "-n", "wheel"], cwd=REPO, capture_output=True, text=True, timeout=60
    ).stdout
    assert "pip wheel" in planned and "--no-deps -w dist ." in planned
    project = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^requires = \["setuptools==[\d.]+"\]', project, re.MULTILINE)
    assert re.search(r'^license = "MIT"$', project, re.MULTILINE)
