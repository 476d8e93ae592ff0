"""Optional peers for the comparison: LiteLLM proxy and Portkey gateway, installed and started locally.

``python -m bench.peers [--names litellm portkey] [--dir D]`` installs both under a temporary
directory (LiteLLM with ``pip install 'litellm[proxy]'`` in its own venv; Portkey with
``npm install @portkey-ai/gateway``), starts each on loopback in front of a fast mock upstream,
sends one request through each and prints their versions. ``python -m bench.run --peers`` uses
:func:`start_peers` to add them as targets in the same interleaved run.

LiteLLM runs with no database, no callbacks, a random master key (it refuses to start without one)
and the bundled model cost map (no network at start);
Portkey with its defaults, the upstream given per request by ``x-portkey-custom-host``.
Installs are reused from ``--dir`` on later runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import yaml

from bench import procs
from bench.bodies import encode, synthetic_body
from bench.fast_upstream import run_fast
from bench.loadgen import Target, build_request, run_load

DEFAULT_DIR = Path(tempfile.gettempdir()) / "history-proxy-bench-peers"
INSTALL_TIMEOUT_S = 900.0
START_TIMEOUT_S = 120.0
BENCH_KEY = "sk-bench-not-a-real-key"
PORTKEY_HONO = "1.14.2"
# Node preload for Portkey: its start script listens on every interface, so listen() is pinned to
# loopback; and its Node build appends headers to a streamed upstream fetch() response, whose headers
# are immutable (Portkey-AI/gateway issue 1550), so such responses are re-wrapped as its proposed fix
# (pull request 1551) does. Non-streamed responses are left alone.
PORTKEY_PRELOAD = """
const net = require("net");
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === "number") {
    const callback = args.find((arg) => typeof arg === "function");
    return callback ? listen.call(this, args[0], "127.0.0.1", callback) : listen.call(this, args[0], "127.0.0.1");
  }
  if (args[0] && typeof args[0] === "object" && args[0].path === undefined) {
    args[0] = { ...args[0], host: "127.0.0.1" };
  }
  return listen.apply(this, args);
};
const fetch = globalThis.fetch;
globalThis.fetch = async (...args) => {
  const response = await fetch(...args);
  if (!(response.headers.get("content-type") || "").includes("text/event-stream")) return response;
  const { status, statusText, headers } = response;
  return new Response(response.body, { status, statusText, headers: new Headers(headers) });
};
"""
MODELS = ("bench-plain", "bench-cached", "bench-model")


def _run(command: Sequence[str], timeout_s: float, cwd: Path | None = None) -> None:
    started = time.monotonic()
    print(f"$ {' '.join(command)}", flush=True)
    try:
        subprocess.run(
            list(command),
            cwd=cwd,
            check=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
    except subprocess.CalledProcessError as exc:
        tail = exc.stdout.decode(errors="replace")[-2000:] if exc.stdout else ""
        raise RuntimeError(f"{command[0]} failed with {exc.returncode}:\n{tail}") from None
    print(f"  done in {time.monotonic() - started:.0f} s", flush=True)


# --- LiteLLM ---------------------------------------------------------------------------------


def install_litellm(directory: Path, timeout_s: float = INSTALL_TIMEOUT_S) -> Path:
    """A venv with ``litellm[proxy]`` under ``directory``; returns its ``litellm`` executable."""
    venv = directory / "litellm-venv"
    executable = venv / "bin" / "litellm"
    if executable.exists():
        return executable
    _run([sys.executable, "-m", "venv", str(venv)], timeout_s)
    _run([str(venv / "bin" / "pip"), "install", "--quiet", "litellm[proxy]"], timeout_s)
    return executable


def litellm_version(executable: Path) -> str:
    python = executable.parent / "python"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(
            [str(python), "-c", "import importlib.metadata as m; print(m.version('litellm'))"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return out.stdout.strip() or "?"
    return "?"


def start_litellm(
    executable: Path, upstream_port: int, workdir: Path, cpus: set[int] | None
) -> tuple[Target, procs.Started]:
    """LiteLLM proxy on a free loopback port, every bench model routed to the mock upstream."""
    port = procs.free_port()
    params = {
        "model": "openai/bench-model",
        "api_base": f"http://{procs.LOOPBACK}:{upstream_port}/v1",
        "api_key": BENCH_KEY,
    }
    config = {
        "model_list": [{"model_name": name, "litellm_params": params} for name in MODELS],
        "litellm_settings": {
            "callbacks": [],
            "success_callback": [],
            "failure_callback": [],
            "drop_params": True,
            "telemetry": False,
        },
        "general_settings": {},
    }
    config_path = workdir / "litellm-config.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    master_key = "sk-" + secrets.token_hex(32)  # LiteLLM refuses to start without a strong master key
    env = {
        **os.environ,
        "LITELLM_MASTER_KEY": master_key,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_LOG": "ERROR",
        "LITELLM_TELEMETRY": "False",
        "DISABLE_ADMIN_UI": "True",
    }
    env.pop("DATABASE_URL", None)
    command = [
        str(executable),
        "--config",
        str(config_path),
        "--host",
        procs.LOOPBACK,
        "--port",
        str(port),
        "--num_workers",
        "1",
    ]
    started = procs.start("litellm", command, workdir, cpus=cpus, env=env, cwd=workdir)
    target = Target("litellm", procs.LOOPBACK, port, headers=(("authorization", f"Bearer {master_key}"),))
    return target, started


# --- Portkey ---------------------------------------------------------------------------------


def install_portkey(directory: Path, timeout_s: float = INSTALL_TIMEOUT_S) -> Path:
    """``@portkey-ai/gateway`` installed under ``directory``; returns its start script.

    ``@hono/node-server`` is held at 1.14.2: later releases make every streamed answer fail with
    ``TypeError: immutable`` (Portkey-AI/gateway issue 1389).
    """
    prefix = directory / "portkey"
    script = prefix / "node_modules" / "@portkey-ai" / "gateway" / "build" / "start-server.js"
    hono = prefix / "node_modules" / "@hono" / "node-server" / "package.json"
    with contextlib.suppress(OSError, ValueError, KeyError):
        if script.exists() and json.loads(hono.read_text())["version"] == PORTKEY_HONO:
            return script
    prefix.mkdir(parents=True, exist_ok=True)
    manifest = {
        "private": True,
        "dependencies": {"@portkey-ai/gateway": "*"},
        "overrides": {"@hono/node-server": PORTKEY_HONO},  # also the copy nested under the gateway
    }
    (prefix / "package.json").write_text(json.dumps(manifest, indent=2) + "\n")
    _run(["npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund"], timeout_s)
    return script


def portkey_version(script: Path) -> str:
    with contextlib.suppress(OSError, ValueError):
        return str(json.loads((script.parents[1] / "package.json").read_text())["version"])
    return "?"


def start_portkey(
    script: Path, upstream_port: int, workdir: Path, cpus: set[int] | None
) -> tuple[Target, procs.Started]:
    """Portkey gateway on a free port; requests name the mock upstream in ``x-portkey-custom-host``."""
    port = procs.free_port()
    preload = workdir / "portkey-preload.cjs"
    preload.write_text(PORTKEY_PRELOAD)
    env = {**os.environ, "NODE_ENV": "production"}
    command = ["node", "--require", str(preload), str(script), f"--port={port}", "--headless"]
    started = procs.start("portkey", command, workdir, cpus=cpus, env=env, cwd=workdir)
    headers = (
        ("authorization", f"Bearer {BENCH_KEY}"),
        ("x-portkey-provider", "openai"),
        ("x-portkey-custom-host", f"http://{procs.LOOPBACK}:{upstream_port}/v1"),
    )
    return Target("portkey", procs.LOOPBACK, port, headers=headers), started


# --- both ------------------------------------------------------------------------------------

INSTALLERS: dict[
    str,
    tuple[
        Callable[[Path, float], Path],
        Callable[[Path], str],
        Callable[[Path, int, Path, set[int] | None], tuple[Target, procs.Started]],
        str,
    ],
] = {
    "litellm": (install_litellm, litellm_version, start_litellm, "/health/liveliness"),
    "portkey": (install_portkey, portkey_version, start_portkey, "/"),
}


def check_answers(target: Target) -> None:
    """One small chat completion through ``target``, then one streamed; raises unless both answer 2xx."""
    for stream in (False, True):
        request = build_request(target, encode(synthetic_body(2, stream=stream, model="bench-plain")))
        result = run_fast(
            run_load(target, [request], concurrency=1, max_requests=1, max_seconds=30, timeout_s=30)
        )
        if not result.ok:
            kind = "streamed chat completion" if stream else "chat completion"
            raise RuntimeError(f"{target.name} did not answer a {kind}: {result.error_samples}")


def start_peers(
    names: Sequence[str],
    upstream_port: int,
    workdir: Path,
    stack: contextlib.ExitStack,
    cpus: set[int] | None,
    directory: Path = DEFAULT_DIR,
    install_timeout_s: float = INSTALL_TIMEOUT_S,
) -> list[tuple[Target, procs.Started]]:
    """Install (or reuse) and start each named peer; a peer that fails is reported and left out."""
    started_peers: list[tuple[Target, procs.Started]] = []
    for name in names:
        install, version, start, health = INSTALLERS[name]
        try:
            installed = install(directory, install_timeout_s)
            target, started = start(installed, upstream_port, workdir, cpus)
            stack.enter_context(procs.running(started))
            procs.wait_ready(started, target.port, health, timeout_s=START_TIMEOUT_S)
            check_answers(target)
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            print(f"peer {name} left out: {exc}", file=sys.stderr, flush=True)
            continue
        renamed = Target(
            f"{name} {version(installed)}", target.host, target.port, target.path, target.headers
        )
        started_peers.append((renamed, started))
    return started_peers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__.splitlines()[0])
    parser.add_argument("--names", nargs="+", choices=sorted(INSTALLERS), default=sorted(INSTALLERS))
    parser.add_argument(
        "--dir", type=Path, default=DEFAULT_DIR, help=f"where peers are installed (default {DEFAULT_DIR})"
    )
    parser.add_argument("--install-timeout", type=float, default=INSTALL_TIMEOUT_S)
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="history-proxy-peers-")))
        port = procs.free_port()
        upstream = procs.start(
            "upstream",
            [sys.executable, "-m", "bench.fast_upstream", "--port", str(port)],
            workdir,
            cwd=Path(__file__).resolve().parent.parent,
        )
        stack.enter_context(procs.running(upstream))
        procs.wait_ready(upstream, port, "/v1/models", timeout_s=20)
        peers = start_peers(args.names, port, workdir, stack, None, args.dir, args.install_timeout)
        for target, started in peers:
            print(f"{target.name}: answered on {target.host}:{target.port} (pid {started.pid})")
    return 0 if len(peers) == len(args.names) else 1


if __name__ == "__main__":
    raise SystemExit(main())
