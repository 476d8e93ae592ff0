"""The image, built from the Dockerfile with podman and run the way docs/operations.md runs it.

The base is Debian's slim image; where no registry is reachable (CI) it is made here once with
``debootstrap --variant=minbase bookworm`` and tagged ``debian:bookworm-slim``, so the Dockerfile users
build is the one built here (``--pull=never``). The container runs non-root with a read-only root and
a tmpfs on /tmp, answers its healthcheck, and serves all three surfaces through the official SDKs from
the packaged default config with the built-in mock chosen (``HISTORY_PROXY_MOCK=1``, no key). Skipped
with the reason when podman cannot run containers here; ``.ci/run`` installs and configures it and
sets ``HISTORY_PROXY_REQUIRE_CONTAINER`` so that a broken podman fails CI instead of skipping.
"""

from __future__ import annotations

import os
import re
import shutil
import ssl
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from tests.support.serve_process import REPO, free_port

pytestmark = [pytest.mark.container, pytest.mark.timeout(600)]

BASE = "docker.io/library/debian:bookworm-slim"
IMAGE = "localhost/history-proxy:test"
CONTEXT_PATHS = (
    "Dockerfile",
    ".dockerignore",
    "pyproject.toml",
    "README.md",
    "LICENSE",
    "history_proxy",
    "config",
    "deploy/build-env",
    "tests/corpus/openhands-codeact-ponylang-ponyc-4593.json",  # the demo's conversation, in the wheel
)


def podman(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["podman", *args],
        capture_output=True,
        text=True,
        check=check,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def _why_no_podman() -> str | None:
    if shutil.which("podman") is None:
        return "podman is not installed (.ci/run installs podman, runc and debootstrap)"
    try:
        info = podman("info", check=False, timeout=60)
    except subprocess.TimeoutExpired:
        return "`podman info` did not answer within 60s"
    if info.returncode != 0:
        return f"`podman info` fails here: {info.stderr.strip()[-300:]}"
    if podman("image", "exists", BASE, check=False).returncode != 0 and shutil.which("debootstrap") is None:
        return f"no {BASE} image and no debootstrap to make one"
    return None


def _skip_or_fail(reason: str) -> None:
    if os.environ.get("HISTORY_PROXY_REQUIRE_CONTAINER"):
        pytest.fail(f"HISTORY_PROXY_REQUIRE_CONTAINER is set but {reason}")
    pytest.skip(reason)


def apt_mirror() -> str:
    """The Debian mirror apt uses on this machine (deb822 ``URIs:`` or a one-line ``deb`` entry)."""
    sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for path in sources:
        text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
        found = re.search(r"^(?:URIs:\s*|deb\s+(?:\[[^]]*\]\s+)?)(\S+/debian)/?\s", text, re.MULTILINE)
        if found:
            return found.group(1)
    return "http://deb.debian.org/debian"


def make_base_image() -> None:
    """``debootstrap --variant=minbase bookworm`` imported as the slim base (about 50 s, once per machine)."""
    with tempfile.TemporaryDirectory(prefix="history-proxy-base-") as folder:
        root = Path(folder) / "rootfs"
        subprocess.run(
            ["debootstrap", "--variant=minbase", "bookworm", str(root), apt_mirror()],
            check=True,
            capture_output=True,
            timeout=600,
        )
        for cached in [*root.glob("var/cache/apt/archives/*.deb"), *root.glob("var/lib/apt/lists/*_*")]:
            cached.unlink()
        archive = Path(folder) / "rootfs.tar"
        with tarfile.open(archive, "w") as tar:
            tar.add(root, arcname=".")
        podman("import", "--change", 'CMD ["bash"]', str(archive), BASE)


def build_context(into: Path) -> Path:
    """The files the Dockerfile copies, plus this machine's CA bundle and pip index for the build stage."""
    for name in CONTEXT_PATHS:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, into / name, ignore=shutil.ignore_patterns("__pycache__", ".*cache"))
        else:
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    build_env = into / "deploy" / "build-env"
    cafile = os.environ.get("PIP_CERT") or ssl.get_default_verify_paths().cafile
    if cafile and Path(cafile).is_file():
        shutil.copy(cafile, build_env / "ca-certificates.crt")
    index = (
        os.environ.get("PIP_INDEX_URL")
        or subprocess.run(
            ["python3", "-m", "pip", "config", "get", "global.index-url"], capture_output=True, text=True
        ).stdout.strip()
    )
    if index:
        (build_env / "pip.conf").write_text(f"[global]\nindex-url = {index}\n", encoding="utf-8")
    return into


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> str:
    reason = _why_no_podman()
    if reason is not None:
        _skip_or_fail(reason)
    if podman("image", "exists", BASE, check=False).returncode != 0:
        make_base_image()
    context = build_context(tmp_path_factory.mktemp("context"))
    for target in (
        ["--target", "build", "-t", f"{IMAGE}-build"],
        ["-t", IMAGE],
    ):  # the build stage tagged too
        built = podman(
            "build", "--format", "docker", "--pull=never", "--network", "host", *target, str(context),
            check=False, timeout=600,
        )  # fmt: skip
        assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    # earlier builds of both stages, now untagged; the tagged ones stay as the next run's layer cache
    podman(
        "image", "prune", "-f", "--filter", "label=org.opencontainers.image.title=history-proxy", check=False
    )
    return IMAGE


def logs_of(container_id: str) -> str:
    logs = podman("logs", container_id, check=False)
    return logs.stdout + logs.stderr


class Container:
    def __init__(self, container_id: str, port: int) -> None:
        self.id = container_id
        self.url = f"http://127.0.0.1:{port}"

    def exec(self, *command: str) -> subprocess.CompletedProcess[str]:
        return podman("exec", self.id, *command, check=False, timeout=60)


@pytest.fixture(scope="module")
def container(image: str) -> Iterator[Container]:
    port = free_port()
    started = podman(
        "run", "-d", "--read-only", "--tmpfs", "/tmp:rw,size=64m", "--network", "host",
        "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "-e", "HISTORY_PROXY_MOCK=1",
        "-e", f"PORT={port}", "-e", "HOST=127.0.0.1", image,
    )  # fmt: skip
    running = Container(started.stdout.strip(), port)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{running.url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, logs_of(running.id)[-3000:]
            time.sleep(0.2)
        yield running
    finally:
        podman("stop", "-t", "10", running.id, check=False)
        podman("rm", "-f", running.id, check=False)


def test_the_image_runs_as_a_non_root_user_without_pip_or_a_compiler(
    image: str, container: Container
) -> None:
    assert container.exec("id", "-u").stdout.strip() == "10001"
    assert podman("image", "inspect", image, "--format", "{{.User}}").stdout.strip() == "10001:10001"
    found = container.exec("sh", "-c", "command -v pip pip3 gcc cc make; python3 -m pip --version")
    assert found.stdout.strip() == "" and found.returncode != 0, (
        found.stdout
    )  # no build tool in the final layer


def test_the_root_filesystem_is_read_only_and_the_healthcheck_passes(container: Container) -> None:
    refused = container.exec("touch", "/opt/history-proxy/written")
    assert refused.returncode != 0 and "Read-only file system" in refused.stderr
    assert podman("healthcheck", "run", container.id, check=False).returncode == 0


def test_the_packaged_default_config_serves_chat_completions_through_the_openai_sdk(
    container: Container,
) -> None:
    client = openai.OpenAI(base_url=f"{container.url}/v1", api_key="unused", max_retries=0)
    answer = client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hello"}])
    assert "mock: received 1 messages" in (answer.choices[0].message.content or "")
    stream = client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hello"}], stream=True
    )
    assert "mock: received" in "".join(
        chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices
    )


def test_responses_and_messages_answer_through_their_sdks(container: Container) -> None:
    client = openai.OpenAI(base_url=f"{container.url}/v1", api_key="unused", max_retries=0)
    response = client.responses.create(model="gpt-4o", input="hello", instructions="be brief")
    assert "mock: received" in response.output_text
    claude = anthropic.Anthropic(base_url=container.url, api_key="unused", max_retries=0)
    message = claude.messages.create(
        model="claude-test-model", max_tokens=64, messages=[{"role": "user", "content": "hello"}]
    )
    assert message.content[0].type == "text" and "mock: received" in message.content[0].text
    with claude.messages.stream(
        model="claude-test-model", max_tokens=64, messages=[{"role": "user", "content": "hello"}]
    ) as streamed:
        assert "mock: received" in "".join(streamed.text_stream)


def test_a_mounted_config_is_served_with_two_workers_and_sigterm_stops_it_cleanly(image: str) -> None:
    port = free_port()
    mounted = REPO / "deploy" / "kubernetes" / "base" / "config.yaml"  # the cluster's config
    started = podman(
        "run", "-d", "--read-only", "--tmpfs", "/tmp", "--network", "host",
        "-v", f"{mounted}:/config/config.yaml:ro", "-e", "WORKERS=2", "-e", "HISTORY_PROXY_MOCK=1",
        "-e", f"PORT={port}", "-e", "HOST=127.0.0.1", image,
    )  # fmt: skip
    container_id = started.stdout.strip()
    try:
        deadline = time.monotonic() + 60
        while logs_of(container_id).count("Application startup complete") < 2:
            assert time.monotonic() < deadline, logs_of(container_id)[-3000:]
            time.sleep(0.2)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
        answer = client.chat.completions.with_raw_response.create(
            model="gpt-4o",
            messages=[{"role": "user", "content": "hello"}],
            extra_headers={"X-Agent-Role": "worker"},
        )
        podman("stop", "-t", "10", container_id)
        state = podman("inspect", container_id, "--format", "{{.State.ExitCode}}").stdout.strip()
        logs = logs_of(container_id)
    finally:
        podman("rm", "-f", container_id, check=False)
    assert "(config /config/config.yaml" in logs  # not the packaged default
    assert answer.headers["x-history-filters"] == "remove_regex,worker_view,last_n_observations,token_limiter"
    assert state == "0" and "Application shutdown complete" in logs


def test_the_image_refuses_to_serve_an_open_proxy_spending_a_server_side_key(image: str) -> None:
    """Issue 34, item 6: `docker run -p 8080:8080 -e OPENAI_API_KEY=...` with no proxy keys."""
    port = free_port()
    run = ("run", "--read-only", "--tmpfs", "/tmp", "--network", "host", "-e", f"PORT={port}")
    keyed = ("-e", "OPENAI_API_KEY=sk-server-side-key-0123456789")
    refused = podman(
        *run, "--rm", *keyed, image, check=False, timeout=120
    )  # HOST=0.0.0.0, the image's default
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "refusing to serve an open proxy on 0.0.0.0" in refused.stdout + refused.stderr
    assert "sk-server-side-key" not in refused.stdout + refused.stderr
    meant = podman("run", "-d", *run[1:], *keyed, "-e", "HISTORY_PROXY_ALLOW_ANONYMOUS=1", image)
    container_id = meant.stdout.strip()
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, logs_of(container_id)[-3000:]
            time.sleep(0.2)
    finally:
        podman("rm", "-f", container_id, check=False)
