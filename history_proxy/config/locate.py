"""Which config file a command uses, and the starter config ``history-proxy init`` writes.

Without ``--config`` a command takes the first of: ``$HISTORY_PROXY_CONFIG``, ``./history-proxy.yaml``
(what ``history-proxy init`` writes), ``./config/default.yaml`` (a clone of the repository), and the
default config packaged with ``history_proxy`` (so an installed wheel serves from any directory).
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

CONFIG_ENV = "HISTORY_PROXY_CONFIG"
"""The environment variable naming the config file (``serve`` sets it for its workers)."""
LOCAL_CONFIG = Path("config") / "default.yaml"
"""A clone's default config, relative to the working directory."""
STARTER_NAME = "history-proxy.yaml"
"""Where ``history-proxy init`` writes the starter config without a path (and where commands look first)."""


def packaged_config() -> Path:
    """The default config shipped inside the ``history_proxy.config`` package (a real file once installed)."""
    return Path(str(resources.files("history_proxy.config").joinpath("default.yaml")))


def config_path(explicit: str | None) -> tuple[Path, str]:
    """The config file to use and where that choice came from (``--config``, the environment, ...)."""
    if explicit:
        return Path(explicit), "--config"
    if env := os.environ.get(CONFIG_ENV):
        return Path(env), f"${CONFIG_ENV}"
    if Path(STARTER_NAME).is_file():
        return Path(STARTER_NAME), f"./{STARTER_NAME}"
    if LOCAL_CONFIG.is_file():
        return LOCAL_CONFIG, "./config/default.yaml"
    return packaged_config(), "packaged default"


def origin_phrase(origin: str) -> str:
    """Why a command uses the file :func:`config_path` chose, in words."""
    if origin.startswith("$"):
        return f"from {origin}"
    if origin == f"./{STARTER_NAME}":
        return "found in the working directory"
    if origin == "./config/default.yaml":
        return "the repository's default config"
    return "the default config packaged with history-proxy; `history-proxy init` writes an editable copy"


def missing_hint(path: Path, origin: str) -> str:
    """What to do about a config file that cannot be read."""
    named = f" (from {origin})" if origin != "--config" else ""
    reason = "not a file" if path.exists() else "no such file"
    return (
        f"{path}{named}: cannot read: {reason}; give a config with --config PATH, or write a commented "
        f"starter config with `history-proxy init [PATH]` (default {STARTER_NAME})"
    )


def starter_config() -> str:
    """The text ``history-proxy init`` writes: the packaged default config, comments included."""
    return packaged_config().read_text(encoding="utf-8")
