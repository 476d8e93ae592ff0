"""The lean transport against aiohttp's client, inside the proxy, in one interleaved run (issue 16).

``python -m bench.clients [bench.compare options]``, e.g.
``python -m bench.clients --cells 20-nonstream-c64 100-nonstream-c1 20-stream-c8 --seconds 2 --memory 2
--slow-streams 500``

Copies this tree's ``proxy`` and ``bench`` packages to a temporary directory, makes that copy's
``ClientPool`` the aiohttp one of :mod:`bench.aiohttp_pool` (one line appended to its
``history_proxy/upstream/pools.py``), and runs :mod:`bench.compare` with this tree as ``old`` (lean) and
the copy as ``new`` (aiohttp): the same upstream, the same config, segments interleaved, CPU per
request of the proxy process, p50, and with ``--memory`` the peak RSS of ``--slow-streams``
concurrent streams (and their errors). The copy is removed afterwards.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from bench import compare

ROOT = Path(__file__).resolve().parent.parent
SWAP = "\nfrom bench.aiohttp_pool import AiohttpPool as ClientPool  # noqa: E402  (bench.clients)\n"


def aiohttp_tree(into: Path) -> Path:
    """A copy of the project whose proxy sends upstream requests through aiohttp."""
    for package in ("history_proxy", "bench"):
        shutil.copytree(
            ROOT / package, into / package, ignore=shutil.ignore_patterns("__pycache__", "results")
        )
    pools = into / "history_proxy" / "upstream" / "pools.py"
    pools.write_text(pools.read_text() + SWAP)
    return into


def main(argv: list[str] | None = None) -> int:
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        raise SystemExit("bench.clients needs aiohttp: pip install -e '.[bench]'") from None
    with tempfile.TemporaryDirectory(prefix="history-proxy-aiohttp-") as scratch:
        variant = aiohttp_tree(Path(scratch))
        print("old: the lean transport; new: aiohttp's client", flush=True)
        return compare.main([str(ROOT), str(variant), *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    raise SystemExit(main())
