"""``python -m history_proxy``: the same command as ``history-proxy``."""

from __future__ import annotations

from history_proxy.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
