"""Lossless re-encoding of tool outputs, and what counts as a small structured record.

``reencode`` (``last_n_observations``) rewrites an output's whitespace only, the first time it is sent
and on every request after it, so the prefix a prompt cache holds stays the same:

* a JSON document (object or array) loses the blanks between its tokens (``{"a": 1}`` -> ``{"a":1}``);
  strings, numbers and key order are kept byte for byte (no parse-and-dump: ``1.50`` stays ``1.50``);
* any other text loses trailing blanks on each line and runs of blank lines beyond one; indentation and
  blanks inside a line are kept (code and tables read by their columns).

``is_record``: a JSON object or array of at most ``limit`` bytes (UTF-8), the kind of output
(``keep_records``) whose every field may be the one the agent needs and whose notice would cost about
as much as the record.
"""

from __future__ import annotations

import json
import re

from history_proxy.core.cost import ANTHROPIC
from history_proxy.core.messages import Message
from history_proxy.filters.base import FilterContext

_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_WS = re.compile(r"\s+")
_TRAILING = re.compile(r"[ \t]+(?=\n|$)")
_BLANK_RUNS = re.compile(r"\n(?:[ \t]*\n){2,}")


def _looks_json(text: str) -> bool:
    stripped = text.strip()
    return len(stripped) >= 2 and stripped[0] in "{[" and stripped[-1] in "}]"


def _parses(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def minified_json(text: str) -> str | None:
    """``text`` without the blanks between JSON tokens, or None when it is not a JSON object or array."""
    if not _looks_json(text) or not _parses(text):
        return None
    out: list[str] = []
    at = 0
    for match in _JSON_STRING.finditer(text):
        out.append(_WS.sub("", text[at : match.start()]))
        out.append(match.group())
        at = match.end()
    out.append(_WS.sub("", text[at:]))
    return "".join(out)


def reencoded(text: str) -> str:
    """``text`` re-encoded losslessly (module docstring); the same string when nothing changes."""
    minified = minified_json(text)
    if minified is not None:
        return minified if len(minified) < len(text) else text
    if " \n" not in text and "\t\n" not in text and "\n\n\n" not in text and not text.endswith((" ", "\t")):
        return text  # the usual output: nothing to do, and no regex pass
    out = _BLANK_RUNS.sub("\n\n", _TRAILING.sub("", text))
    return out if len(out) < len(text) else text


def is_record(text: str, limit: int) -> bool:
    """Whether ``text`` is a JSON object or array of at most ``limit`` bytes."""
    return len(text) <= limit and len(text.encode()) <= limit and _looks_json(text) and _parses(text)


def reencode_outputs(
    messages: list[Message], positions: list[int], rewrites: list[tuple[Message, Message]], ctx: FilterContext
) -> None:
    """Re-encode observations' string content in place in ``messages`` (a copy of the request's list).

    Only where it cannot cost more than it saves under the upstream's pricing: an output is re-encoded
    when the messages before it, as sent, already reach the provider's ``min_tokens`` (a request pushed
    under it would lose its cache) and the re-encoding saves at least one cache ``block`` of tokens
    (about 4 characters a token; a smaller saving can lose a partly read block)."""
    prices = ctx.pricing or ANTHROPIC
    counter = ctx.tokens.get(model=ctx.model)
    wanted = set(positions)
    before = 0
    for i, message in enumerate(messages):
        text = message.get("content")
        if i in wanted and isinstance(text, str) and before >= prices.min_tokens:
            new = reencoded(text)
            if new is not text and len(text) - len(new) >= 4 * prices.block:
                message = {**message, "content": new}
                rewrites.append((messages[i], message))
                messages[i] = message
        before += counter.message(message)
