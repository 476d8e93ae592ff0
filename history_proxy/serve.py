"""``history-proxy serve``: find the config, make sure the port is free, then run uvicorn.

Everything that can stop the server from starting (an unreadable or invalid config, a port in use)
is reported before the "serving on" line, so that line means the proxy is about to answer.
"""

from __future__ import annotations

import argparse
import errno
import importlib.util
import ipaddress
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path

from history_proxy import __version__
from history_proxy.config.loading import MOCK_ENV, ConfigError, load_config
from history_proxy.config.locate import CONFIG_ENV, config_path, missing_hint, origin_phrase
from history_proxy.config.models import Config, UpstreamConfig

WORKERS_ENV = "HISTORY_PROXY_WORKERS"
"""Read by :mod:`history_proxy.server.inflight`, which shares the container's memory among the workers."""
APP_FACTORY = "history_proxy.server.app:app_from_env"


class CommandError(Exception):
    """A failure the command reports as one line and exit status 1."""


def load(explicit: str | None) -> tuple[Config, Path]:
    """The config a command uses (``--config``, ``$HISTORY_PROXY_CONFIG``, ./config/default.yaml or the
    packaged default) and its path; every located error, or what to do about a missing file."""
    path, origin = config_path(explicit)
    if not path.is_file():
        raise CommandError(missing_hint(path, origin))
    try:
        return load_config(path), path
    except ConfigError as exc:
        lines = "\n".join(f"  {error}" for error in exc.errors)
        noun = "error" if len(exc.errors) == 1 else "errors"
        raise CommandError(f"{exc.source}: invalid config ({len(exc.errors)} {noun}):\n{lines}") from None


def config_in_use(explicit: str | None) -> str:
    """Which file a command uses and why (``config history-proxy.yaml (found in the working directory)``)."""
    path, origin = config_path(explicit)
    return f"config {path}" if origin == "--config" else f"config {path} ({origin_phrase(origin)})"


def key_source(config: Config, upstream: UpstreamConfig) -> str:
    """Where an upstream's key comes from: ``server`` (its ``api_key``), ``client`` (the caller's
    Authorization or x-api-key, passed on) or ``none`` (the mock, or client keys are proxy keys)."""
    if upstream.is_mock:
        return "none"
    if upstream.key is not None:
        return "server"
    return "none" if config.auth.keys else "client"


def upstreams_line(config: Config) -> str:
    """Each upstream, where it is, and where its key comes from, for the startup line."""
    described = [
        f"{name} = {'built-in mock' if upstream.is_mock else upstream.base_url} "
        f"(key: {key_source(config, upstream)})"
        for name, upstream in config.upstreams.items()
    ]
    return "upstreams: " + ", ".join(described)


def mock_notice(config: Config) -> str | None:
    """What the startup line says when answers come from the built-in mock, not a provider."""
    mocked = [name for name, upstream in config.upstreams.items() if upstream.is_mock]
    if not mocked:
        return None
    every = len(mocked) == len(config.upstreams)
    which = "every answer" if every else f"answers from {', '.join(mocked)}"
    return (
        f"MOCK: {which} comes from the built-in mock (header x-history-mock: 1), no provider is called; "
        "serve without --mock (and HISTORY_PROXY_MOCK unset) to reach the real upstreams"
    )


def base_url_notice(config_file: Path) -> str | None:
    """A note when ``$OPENAI_BASE_URL`` is set but the config reads ``$OPENAI_UPSTREAM_URL`` (the default
    config does: ``OPENAI_BASE_URL`` is the clients' setting, and pointed at this proxy it would loop)."""
    if not os.environ.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_UPSTREAM_URL"):
        return None
    try:
        reads_upstream_url = "${OPENAI_UPSTREAM_URL" in config_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if not reads_upstream_url:
        return None
    return (
        "note: OPENAI_BASE_URL is set but this config takes the OpenAI upstream's address from "
        "OPENAI_UPSTREAM_URL (OPENAI_BASE_URL is for clients: pointed at this proxy it would loop)"
    )


def uvicorn_options() -> dict[str, str]:
    """uvloop and httptools when installed (uvicorn's fast paths), asyncio and h11 otherwise."""
    return {
        "loop": "uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
        "http": "httptools" if importlib.util.find_spec("httptools") else "h11",
    }


def check_port(host: str, port: int) -> None:
    """Bind and release ``host:port`` once, so a busy port is an error before anything says "serving"."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise CommandError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind(address)
        except OSError as exc:
            hint = (
                f" (another process listens there: pick another with {port_option()})"
                if exc.errno == errno.EADDRINUSE
                else ""
            )
            raise CommandError(f"cannot listen on {host}:{port}: {exc.strerror or exc}{hint}") from None


def port_option() -> str:
    """How the user picks another port: ``PORT=`` under ``make run`` (which sets MAKELEVEL), else ``--port``."""
    return "make run PORT=9000" if os.environ.get("MAKELEVEL") else "--port"


ALLOW_ANONYMOUS_ENV = "HISTORY_PROXY_ALLOW_ANONYMOUS"
"""Set to 1 (or true, yes) to serve an open proxy on a non-loopback address, as ``--allow-anonymous``."""


def _loopback_only(host: str) -> bool:
    """Whether every address ``host`` binds is a loopback one (127.0.0.0/8, ::1)."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return False
    return bool(infos) and all(ipaddress.ip_address(str(info[4][0])).is_loopback for info in infos)


def check_exposure(config: Config, host: str, allow_anonymous: bool) -> None:
    """Refuse to serve an open proxy that spends a server-side key for anyone who reaches the port.

    Refused: no ``auth.keys``, an upstream with its own ``api_key``, and a host that is not loopback
    (``0.0.0.0``, ``::``, a public address), unless ``--allow-anonymous``, ``auth.allow_anonymous``
    or ``HISTORY_PROXY_ALLOW_ANONYMOUS=1`` says it is meant (behind a network policy, say).
    """
    if config.auth.keys or config.auth.allow_anonymous or allow_anonymous:
        return
    if os.environ.get(ALLOW_ANONYMOUS_ENV, "").strip().lower() in ("1", "true", "yes"):
        return
    keyed = [name for name, u in config.upstreams.items() if u.key is not None and not u.is_mock]
    if not keyed or _loopback_only(host):
        return
    raise CommandError(
        f"refusing to serve an open proxy on {host}: upstream {keyed[0]!r} has a server-side api_key and "
        "auth.keys is empty, so anyone who reaches this port would spend that key. Either give clients "
        'proxy keys (auth: {keys: [{key: "${TEAM_KEY}", tenant: team}]}), listen on 127.0.0.1 '
        f"(--host 127.0.0.1), or say it is meant: --allow-anonymous, auth.allow_anonymous: true, or "
        f"{ALLOW_ANONYMOUS_ENV}=1 (docs/operations.md#no-open-proxy-by-accident)"
    )


def log_format(chosen: str | None) -> str:
    """``--log-format``, else text for a person at a terminal and JSON for a log collector."""
    if chosen:
        return chosen
    return "text" if sys.stderr.isatty() else "json"


def _share_metrics_between_workers(workers: int) -> str | None:
    """With several workers, a fresh ``PROMETHEUS_MULTIPROC_DIR`` so ``/metrics`` sums them all.

    Returns the directory to remove at exit; ``None`` with one worker or when the operator set one.
    """
    from history_proxy.observability.metrics import MULTIPROCESS_ENV

    if workers < 2 or os.environ.get(MULTIPROCESS_ENV):
        return None
    directory = tempfile.mkdtemp(prefix="history-proxy-metrics-")
    os.environ[MULTIPROCESS_ENV] = directory
    return directory


def cmd_serve(args: argparse.Namespace) -> int:
    """Serve the proxy until interrupted."""
    if args.mock:  # before the config is read: it, the workers and every reload answer from the mock
        os.environ[MOCK_ENV] = "1"
    config, config_file = load(args.config)
    chosen = config_in_use(args.config)  # before CONFIG_ENV below names the file for the workers
    check_exposure(config, args.host, args.allow_anonymous)
    check_port(args.host, args.port)
    import uvicorn

    from history_proxy.observability.logs import logging_config
    from history_proxy.server.protocol import bounded_http

    os.environ[CONFIG_ENV] = str(config_file.resolve())
    if args.workers == 1 and sys.stdin.isatty():  # closing the terminal (make run's too) stops it
        from history_proxy.server.reload import HANGUP_ENV

        os.environ[HANGUP_ENV] = "stop"
    os.environ[WORKERS_ENV] = str(args.workers)  # the processes sharing the memory limit (inflight bytes)
    if args.workers > 1:  # an admin reload in one worker restarts them all through this process
        from history_proxy.server.reload import SUPERVISOR_ENV

        os.environ[SUPERVISOR_ENV] = str(os.getpid())
    metrics_dir = _share_metrics_between_workers(args.workers)
    print(
        f"history-proxy {__version__} serving on http://{args.host}:{args.port}/v1 "
        f"({chosen}; {upstreams_line(config)})",
        flush=True,
    )
    for notice in (mock_notice(config), base_url_notice(config_file)):
        if notice:
            print(notice, flush=True)
    try:
        uvicorn.run(
            APP_FACTORY,
            factory=True,
            host=args.host,
            port=args.port,
            workers=args.workers,
            log_level=args.log_level,
            # every worker formats uvicorn's lines and ours alike; our access line replaces uvicorn's
            log_config=logging_config(log_format(args.log_format), args.log_level),
            access_log=False,
            **{**uvicorn_options(), **bounded_http(config.limits)},
        )
    finally:
        if metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    """Write the commented starter config (the packaged default) to ``args.path``."""
    from history_proxy.config.locate import starter_config

    target = Path(args.path)
    if target.exists() and not args.force:
        raise CommandError(f"{target} exists; pass --force to overwrite it")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(starter_config(), encoding="utf-8")
    except OSError as exc:
        raise CommandError(f"{target}: cannot write: {exc.strerror or exc}") from None
    print(f"wrote {target}; edit it, check it with `history-proxy check {target}`, then:")
    print(f"  history-proxy serve --config {target}")
    return 0
