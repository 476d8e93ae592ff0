"""Very large JSON bodies parsed in steps, so that no single call holds the GIL for long.

A C parser or encoder holds the GIL for the whole call, in a worker thread as on the loop: orjson took
25-60 ms over a 24 MB body here, and the event loop's thread waited for all of it. Run in a worker
thread, :func:`parse_in_steps` reads the body's top-level object itself and hands the stdlib's C
scanner one top-level value at a time, and one element at a time of a top-level array (a
conversation's ``messages``, ``input`` or ``contents``); between two calls the interpreter may switch
to the loop's thread (every ``sys.getswitchinterval()``). The result is exactly the stdlib's
(``json.loads``, then the proxy's strict rules: no ``NaN``/``Infinity``, no out-of-range number), and
so is every error message, with its position.
What one step holds is one element: a message of many megabytes is still parsed in one call.

Encoding is not stepped: orjson encodes 24 MB in 2-20 ms (the longer when its memory is fresh),
holding the GIL wherever it runs, and encoding in parts then joining them held twice the bytes (10
concurrent 30 MB bodies: 540 MB peak instead of 420).
"""

from __future__ import annotations

import json
from typing import Any

_WHITESPACE = " \t\n\r"


def _skip(text: str, at: int) -> int:
    while at < len(text) and text[at] in _WHITESPACE:
        at += 1
    return at


def _char(text: str, at: int) -> str:
    return text[at] if at < len(text) else ""


def parse_in_steps(text: str, decoder: json.JSONDecoder) -> Any:
    """``text`` parsed as ``json.loads(text, ...)`` with ``decoder``'s rules would parse it (same value,
    same :class:`json.JSONDecodeError`), one top-level value or array element per C call."""
    at = _skip(text, 0)
    if _char(text, at) != "{":  # not an object: refused whatever it is, no need to step
        return decoder.decode(text)
    value, at = _object(text, at, decoder)
    at = _skip(text, at)
    if at != len(text):
        raise json.JSONDecodeError("Extra data", text, at)
    return value


def _value(text: str, at: int, decoder: json.JSONDecoder) -> tuple[Any, int]:
    if _char(text, at) == "[":
        return _array(text, at, decoder)
    return decoder.raw_decode(text, at)


def _object(text: str, at: int, decoder: json.JSONDecoder) -> tuple[dict[str, Any], int]:
    found: dict[str, Any] = {}
    at = _skip(text, at + 1)
    if _char(text, at) == "}":
        return found, at + 1
    while True:
        if _char(text, at) != '"':
            raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, at)
        key, at = decoder.raw_decode(text, at)
        at = _skip(text, at)
        if _char(text, at) != ":":
            raise json.JSONDecodeError("Expecting ':' delimiter", text, at)
        found[key], at = _value(text, _skip(text, at + 1), decoder)
        at = _skip(text, at)
        if _char(text, at) == "}":
            return found, at + 1
        if _char(text, at) != ",":
            raise json.JSONDecodeError("Expecting ',' delimiter", text, at)
        at = _skip(text, at + 1)


def _array(text: str, at: int, decoder: json.JSONDecoder) -> tuple[list[Any], int]:
    found: list[Any] = []
    at = _skip(text, at + 1)
    if _char(text, at) == "]":
        return found, at + 1
    while True:
        element, at = decoder.raw_decode(text, at)
        found.append(element)
        at = _skip(text, at)
        if _char(text, at) == "]":
            return found, at + 1
        if _char(text, at) != ",":
            raise json.JSONDecodeError("Expecting ',' delimiter", text, at)
        at = _skip(text, at + 1)
