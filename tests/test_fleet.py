"""Three `history-proxy serve` replicas behind a real nginx (round robin), sharing limits through a real Redis.

Everything listens on free loopback ports: ``redis-server``, nginx (Debian's, run as its own master
with a config in a temporary folder), three replicas and one upstream (the built-in mock behind a
recorder, streaming 15 chunks 100 ms apart; a request with ``x-hold`` waits until the test lets it
go). Clients are the official openai SDK. Skipped with the reason when nginx or redis-server is not
installed (``.ci/run`` installs both).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import httpx2
import openai
import pytest
from starlette.types import Receive, Scope, Send

from history_proxy.mock.upstream import create_mock_app
from tests.support.recorder import Recorder, serve_in_thread
from tests.support.redis_server import REDIS_SERVER, RedisServer
from tests.support.serve_process import REPO, free_port, offline_env

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
KEY = "sk-fleet-tenant-a"
LIMIT = 4
LEASE_S = 2
REPLICAS = 3
STREAM_CHUNKS = 15
"""A streamed answer takes 1.5 s, so a replica told to stop has streams in flight."""

pytestmark = pytest.mark.timeout(240)


class HoldingMock:
    """The mock upstream; a request carrying ``x-hold`` waits for :attr:`release` first."""

    def __init__(self) -> None:
        self.mock = create_mock_app(chunks=STREAM_CHUNKS, chunk_delay_s=0.1)
        self.release = threading.Event()
        self.holding = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and any(name == b"x-hold" for name, _ in scope["headers"]):
            self.holding += 1
            try:
                while not self.release.is_set():
                    await asyncio.sleep(0.02)
            finally:
                self.holding -= 1
        await self.mock(scope, receive, send)


class Upstream(Recorder):
    """Records every request (the marker is the last message's content) before the mock answers it."""

    def __init__(self) -> None:
        super().__init__()
        self.holder = HoldingMock()
        # Recorder (tests/test_surfaces_end_to_end.py) types its app as the mock's Starlette app
        self.app = self.holder  # type: ignore[assignment]

    def markers(self) -> Counter[str]:
        return Counter(str(seen["body"]["messages"][-1]["content"]) for seen in list(self.seen))


class Fleet:
    """The replicas, nginx in front, Redis beside; replicas can be killed, drained and restarted."""

    def __init__(self, folder: Path, upstream_url: str, redis_url: str) -> None:
        self.folder = folder
        self.ports = [free_port() for _ in range(REPLICAS)]
        self.processes: list[subprocess.Popen[bytes] | None] = [None] * REPLICAS
        self.down: set[int] = set()
        self.port = free_port()
        self.nginx: subprocess.Popen[bytes] | None = None
        self.config = folder / "config.yaml"
        self.config.write_text(
            f"""
upstreams: {{main: {{base_url: "{upstream_url}", retries: 0}}}}
auth: {{keys: [{{key: {KEY}, tenant: a}}]}}
limits: {{max_concurrent_per_tenant: {LIMIT}, redis_url: "{redis_url}", lease_s: {LEASE_S}}}
summary_cache: {{key_prefix: "test-fleet:"}}
""",
            encoding="utf-8",
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self, index: int) -> Path:
        return self.folder / f"replica-{index}.log"

    def start(self, index: int, workers: int = 1) -> None:
        with self.log(index).open("ab") as sink:
            self.processes[index] = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "history_proxy",
                    "serve",
                    "--config",
                    str(self.config),
                    "--port",
                    str(self.ports[index]),
                    "--workers",
                    str(workers),
                ],
                cwd=REPO,
                env=offline_env(),
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{self.ports[index]}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, self.log(index).read_text(errors="replace")
            time.sleep(0.1)

    def stop(self, index: int, how: signal.Signals) -> int:
        process = self.processes[index]
        assert process is not None
        process.send_signal(how)
        self.processes[index] = None
        return process.wait(timeout=60)

    def write_nginx(self) -> None:
        servers = "\n".join(
            f"    server 127.0.0.1:{port} max_fails=1 fail_timeout=1s{' down' if i in self.down else ''};"
            for i, port in enumerate(self.ports)
        )
        temp = self.folder / "nginx-temp"
        temp.mkdir(exist_ok=True)
        (self.folder / "nginx.conf").write_text(
            f"""
worker_processes 1;
daemon off;
pid {self.folder}/nginx.pid;
error_log {self.folder}/nginx-error.log warn;
events {{ worker_connections 512; }}
http {{
  access_log off;
  client_body_temp_path {temp}/body; proxy_temp_path {temp}/proxy; fastcgi_temp_path {temp}/fastcgi;
  uwsgi_temp_path {temp}/uwsgi; scgi_temp_path {temp}/scgi;
  upstream replicas {{
{servers}
  }}
  server {{
    listen 127.0.0.1:{self.port};
    location / {{
      proxy_pass http://replicas;
      proxy_http_version 1.1;
      proxy_buffering off;
      proxy_read_timeout 120s;
    }}
  }}
}}
""",
            encoding="utf-8",
        )

    def start_nginx(self) -> None:
        assert NGINX is not None
        self.write_nginx()
        conf = str(self.folder / "nginx.conf")
        prefix = str(self.folder)
        error_log = str(self.folder / "nginx-error.log")
        self.nginx = subprocess.Popen([NGINX, "-p", prefix, "-e", error_log, "-c", conf])
        deadline = time.monotonic() + 10
        while True:
            try:
                httpx.get(f"{self.url}/healthz", timeout=1)
                return
            except httpx.TransportError:
                assert self.nginx.poll() is None and time.monotonic() < deadline, "nginx did not start"
                time.sleep(0.05)

    def reload_nginx(self) -> None:
        """Rewrite the upstream block (``down`` marks) and reload: old workers finish their requests."""
        assert self.nginx is not None
        self.write_nginx()
        self.nginx.send_signal(signal.SIGHUP)
        time.sleep(0.5)

    def close(self) -> None:
        for index in range(REPLICAS):
            if self.processes[index] is not None:
                self.stop(index, signal.SIGTERM)
        if self.nginx is not None:
            self.nginx.send_signal(signal.SIGQUIT)
            self.nginx.wait(timeout=30)


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[Upstream, str]]:
    app = Upstream()
    try:
        for url in serve_in_thread(app):
            yield app, url
    finally:
        app.holder.release.set()


@pytest.fixture(scope="module")
def fleet(upstream: tuple[Upstream, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    if NGINX is None:
        pytest.skip("nginx is not installed (Debian package nginx; .ci/run installs it)")
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (Debian package redis-server; .ci/run installs it)")
    redis_server = RedisServer()
    redis_server.start()
    running = Fleet(tmp_path_factory.mktemp("fleet"), upstream[1], redis_server.url)
    try:
        with ThreadPoolExecutor(REPLICAS) as pool:
            list(pool.map(running.start, range(REPLICAS)))
        running.start_nginx()
        yield running
    finally:
        upstream[0].holder.release.set()
        running.close()
        redis_server.stop()


def client(url: str, headers: dict[str, str], retries: int = 0) -> openai.OpenAI:
    # a fresh connection per request: nothing rides on a keep-alive connection an nginx reload closes
    http = httpx2.Client(limits=httpx2.Limits(max_keepalive_connections=0), timeout=60)
    return openai.OpenAI(
        base_url=f"{url}/v1",
        api_key=KEY,
        max_retries=retries,
        default_headers=headers,
        http_client=http,
    )


def ask(url: str, marker: str, hold: bool = False, retries: int = 0) -> int | str:
    """A streamed chat completion: the text it carried, or the HTTP status it was refused with."""
    try:
        stream = client(url, {"x-hold": "1"} if hold else {}, retries).chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": marker}], stream=True
        )
        return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    except openai.APIStatusError as error:
        return error.status_code


def wait_for(check: Callable[[], bool], within: float = 10) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_a_tenants_concurrency_limit_holds_in_total_across_three_replicas(
    fleet: Fleet, upstream: tuple[Upstream, str]
) -> None:
    recorder, holder = upstream[0], upstream[0].holder
    holder.release.clear()
    with ThreadPoolExecutor(12) as pool:
        held = [pool.submit(ask, fleet.url, f"total-{n}", hold=True) for n in range(12)]
        wait_for(lambda: sum(1 for f in held if f.done()) == 12 - LIMIT)
        assert holder.holding == LIMIT  # only LIMIT reached the upstream, though each replica admits LIMIT
        holder.release.set()
        answers = [f.result() for f in held]
    assert sorted(a for a in answers if isinstance(a, int)) == [429] * (12 - LIMIT)
    assert sum(isinstance(a, str) and a.startswith("mock: received") for a in answers) == LIMIT
    served = {
        i for i in range(REPLICAS) if "/v1/chat/completions" in fleet.log(i).read_text(errors="replace")
    }
    assert len(served) >= 2, "round robin spread the tenant's requests over the replicas"
    assert recorder.markers()["total-0"] <= 1


def test_a_killed_replicas_slots_come_back_after_the_lease(
    fleet: Fleet, upstream: tuple[Upstream, str]
) -> None:
    holder = upstream[0].holder
    holder.release.clear()
    pool = ThreadPoolExecutor(LIMIT)
    try:
        held = [pool.submit(ask, fleet.url, f"killed-{n}", hold=True) for n in range(LIMIT)]
        wait_for(lambda: holder.holding == LIMIT)
        assert fleet.stop(0, signal.SIGKILL) == -signal.SIGKILL  # it held 1 or 2 of the tenant's slots
        killed_at = time.monotonic()
        tries: list[int | str] = []
        while not tries or not isinstance(tries[-1], str):
            assert time.monotonic() - killed_at < LEASE_S * 3, tries
            tries.append(ask(fleet.url, f"killed-retry-{len(tries)}"))
            time.sleep(0.1)
        came_back = time.monotonic() - killed_at
    finally:
        holder.release.set()
        pool.shutdown(wait=True)
    assert tries[0] == 429  # at first its slots are still leased: the limit holds
    assert came_back <= LEASE_S * 2  # then they expire, as nobody renews them
    assert sorted(str(f.result()) for f in held).count("502") >= 1  # the dead replica's own requests
    fleet.start(0)


def test_a_rolling_restart_loses_no_request_and_sends_none_twice(
    fleet: Fleet, upstream: tuple[Upstream, str]
) -> None:
    recorder = upstream[0]
    upstream[0].holder.release.set()
    stop = threading.Event()
    answers: dict[str, int | str] = {}

    def load(worker: int) -> None:
        for n in range(10_000):
            if stop.is_set():
                return
            marker = f"rolling-{worker}-{n}"
            # the SDK's own retries, as a client has them: a connection an nginx worker closes on
            # reload before reading the request is tried again (the upstream count shows no double)
            answers[marker] = ask(fleet.url, marker, retries=2)

    with ThreadPoolExecutor(LIMIT - 1) as pool:
        workers = [pool.submit(load, w) for w in range(LIMIT - 1)]
        time.sleep(1)
        for index in range(REPLICAS):
            fleet.down = {index}
            fleet.reload_nginx()  # no new request goes to it
            # drains its in-flight streams, then exits (uvicorn re-raises the signal once it has)
            assert fleet.stop(index, signal.SIGTERM) in (0, -signal.SIGTERM)
            fleet.start(index)
            fleet.down = set()
            fleet.reload_nginx()
        # requests go on through the restored fleet; a slow machine gets time to show enough of them
        wait_for(lambda: len(answers) > 30, within=60)
        stop.set()
        [w.result() for w in workers]
    complete = [
        m for m, a in answers.items() if isinstance(a, str) and a.startswith("mock: received 1 messages")
    ]
    assert len(answers) > 20 and sorted(complete) == sorted(answers), {
        m: a for m, a in answers.items() if m not in complete
    }
    sent = recorder.markers()
    assert all(sent[m] == 1 for m in answers), [m for m in answers if sent[m] != 1]
    drained = sum(finished_while_stopping(fleet.log(i).read_text(errors="replace")) for i in range(REPLICAS))
    assert drained >= 1, "streams in flight when SIGTERM came finished (200) before the replica exited"


def finished_while_stopping(log: str) -> int:
    """Requests answered 200 between a replica's "Shutting down" and its exit."""
    stopping = (part.partition("Application shutdown complete")[0] for part in log.split("Shutting down")[1:])
    return sum(part.count('"status":200') for part in stopping)


def test_the_limit_holds_across_the_worker_processes_of_one_replica(
    fleet: Fleet, upstream: tuple[Upstream, str]
) -> None:
    holder = upstream[0].holder
    fleet.stop(2, signal.SIGTERM)
    fleet.start(2, workers=2)  # each worker process admits on its own, but counts in Redis
    direct = f"http://127.0.0.1:{fleet.ports[2]}"  # straight to that replica, past nginx
    holder.release.clear()
    pool = ThreadPoolExecutor(10)
    try:
        held = [pool.submit(ask, direct, f"workers-{n}", hold=True) for n in range(10)]
        wait_for(lambda: sum(1 for f in held if f.done()) == 10 - LIMIT, within=30)
        reached = holder.holding
    finally:
        holder.release.set()
        pool.shutdown(wait=True)
    assert reached == LIMIT
    assert sorted(str(f.result()) for f in held).count("429") == 10 - LIMIT
