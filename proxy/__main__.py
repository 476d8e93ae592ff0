"""``python -m proxy``: the same command as ``history-proxy``."""

from __future__ import annotations

from proxy.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
