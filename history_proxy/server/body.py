"""Reading and parsing a client's request body: the size cap, strict JSON, and one serialization.

Framework-free: the app hands in the request's headers and its body stream. Every failure is a
:class:`~history_proxy.errors.ProxyError` (400 or 413) saying what to send instead.
"""

from __future__ import annotations

import codecs
import json
import math
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from typing import Any

import orjson

from history_proxy.errors import InvalidRequestError, PayloadTooLargeError
from history_proxy.server.json_steps import parse_in_steps

PARSE_IN_STEPS_BYTES = 8 * 1024 * 1024
"""Bodies at least this large are parsed one top-level value (or array element) per call."""


def encode_json(body: Any) -> bytes:
    """Compact UTF-8 JSON, the one serialization of a filtered body.

    orjson on the hot path (several times faster than the stdlib here); what it refuses (a lone
    surrogate, an integer beyond 64 bits) goes through the stdlib encoder exactly as before.
    """
    try:
        return orjson.dumps(body)
    except (TypeError, orjson.JSONEncodeError):
        pass
    try:
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate ("\\ud800") has no UTF-8 form: keep it escaped
        return json.dumps(body, separators=(",", ":")).encode("ascii")
    except RecursionError:
        raise InvalidRequestError("the request body is nested too deeply", code="invalid_json") from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):  # 1e999 parses as infinity, which JSON cannot carry on
        raise ValueError(f"the number {text[:20]} is out of range")
    return value


def check_containers(raw: bytes, limit: int) -> None:
    """413 for a JSON body with more than ``limit`` objects and arrays, before anything parses it.

    Parsed, ``[{},{},...]`` takes about 30 times its size and the parse holds the event loop (orjson
    keeps the GIL, so a thread would not free it): 32 MiB of it is 11 M objects, ~1.1 GB and half a
    second. Counting brackets is cheap (~0.3 ms per MB) and only bodies longer than ``2 * limit``
    bytes can hold more than ``limit`` containers (``{}`` and ``[]`` take two bytes at least), so
    ordinary bodies are never counted. Brackets inside strings count too: the bound is generous.
    """
    if len(raw) > 2 * limit:
        _check_count(raw.count(b"{") + raw.count(b"["), limit)


def _check_count(count: int, limit: int) -> None:
    if count > limit:
        raise PayloadTooLargeError(
            f"the request body holds about {count} JSON objects and arrays; this proxy parses at most "
            f"{limit} (limits.max_json_containers)",
            code="too_many_json_containers",
        )


def parse_body(raw: bytes, max_containers: int | None = None, history: str = "messages") -> dict[str, Any]:
    """The request body as a JSON object, or a 400 saying what to send instead (an object with
    ``model`` and ``history``: ``messages``, or a surface's own field such as Responses' ``input``).

    ``max_containers``: 413 first for a body holding more objects and arrays (:func:`check_containers`).

    orjson parses valid bodies; anything it refuses is parsed again by the stdlib, so every error
    message and edge case (NaN, 1e999, lone surrogates, deep nesting) behaves as the stdlib path
    defines. orjson reads integers beyond 64 bits as floats; no chat-completions field carries one.
    """
    if max_containers is not None:
        check_containers(raw, max_containers)
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        body = _parse_strictly(raw, history)
    return _object_body(body, history)


def parse_pieces(
    pieces: list[bytes], max_containers: int | None, history: str = "messages"
) -> dict[str, Any]:
    """:func:`parse_body` for a body still in the pieces it arrived in (:func:`read_pieces`), which it
    consumes: the list is emptied, each piece freed once it is used.

    A body of :data:`PARSE_IN_STEPS_BYTES` or more is decoded piece by piece and parsed by the stdlib
    in steps (:mod:`history_proxy.server.json_steps`): one C call over it would hold the GIL for tens
    of milliseconds, and the bytes, the text and the parsed body would be held at once.
    """
    if sum(map(len, pieces)) < PARSE_IN_STEPS_BYTES:
        raw = joined(pieces)
        pieces.clear()
        return parse_body(raw, max_containers, history)
    if max_containers is not None:
        _check_count(sum(piece.count(b"{") + piece.count(b"[") for piece in pieces), max_containers)
    try:
        body = parse_in_steps(decoded(pieces), _STRICT)
    except RecursionError:
        raise InvalidRequestError("the request body is nested too deeply", code="invalid_json") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise _not_json(exc, history) from None
    return _object_body(body, history)


def _object_body(body: Any, history: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise InvalidRequestError(
            f"the request body must be a JSON object with 'model' and '{history}', not a JSON {type(body).__name__}",
            code="invalid_json",
        )
    return body


_STRICT = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)


def _parse_strictly(raw: bytes, history: str) -> Any:
    try:
        return json.loads(raw, parse_constant=_reject_constant, parse_float=_finite_float)
    except RecursionError:
        raise InvalidRequestError("the request body is nested too deeply", code="invalid_json") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise _not_json(exc, history) from None


def _not_json(exc: Exception, history: str) -> InvalidRequestError:
    return InvalidRequestError(
        f"the request body is not valid JSON ({exc}); send a JSON object with 'model' and '{history}'",
        code="invalid_json",
    )


def decoded(pieces: list[bytes]) -> str:
    """The text of a body in pieces, as ``json.loads`` would decode its bytes (encoding detected from
    the first bytes, surrogates passed); the list is emptied as it is decoded."""
    head = b""
    for piece in pieces:
        head += piece[: 4 - len(head)]
        if len(head) == 4:
            break
    decoder = codecs.getincrementaldecoder(json.detect_encoding(head))("surrogatepass")
    parts = []
    pieces.reverse()  # popped from the end: each piece freed as soon as it is decoded
    while pieces:
        parts.append(decoder.decode(pieces.pop()))
    parts.append(decoder.decode(b"", final=True))
    return "".join(parts)


def model_of(raw: bytes) -> str:
    """The ``model`` of a JSON body forwarded unfiltered, or ``""`` when it names none."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return ""
    model = body.get("model") if isinstance(body, dict) else None
    return model if isinstance(model, str) else ""


def _too_large(limit: int, size: str) -> PayloadTooLargeError:
    return PayloadTooLargeError(
        f"the request body is {size} bytes; this proxy accepts at most {limit} (limits.max_body_bytes)"
    )


def check_declared_length(headers: Mapping[str, str], limit: int) -> None:
    """400 for a Content-Length that is not a number, 413 for one over ``limit``."""
    declared = headers.get("content-length")
    if declared is not None and not declared.strip().isdigit():
        raise InvalidRequestError(
            "the Content-Length header must be a number of bytes", code="invalid_header"
        )
    if declared is not None and int(declared) > limit:
        raise _too_large(limit, declared.strip())


def has_body(headers: Mapping[str, str]) -> bool:
    """Whether the request announces a body (a non-zero Content-Length or chunked encoding)."""
    return headers.get("content-length", "0") != "0" or "transfer-encoding" in headers


async def capped_stream(
    headers: Mapping[str, str], chunks: AsyncIterable[bytes], limit: int
) -> AsyncIterator[bytes]:
    """The body as it arrives; 413 when Content-Length or the bytes so far exceed ``limit``."""
    check_declared_length(headers, limit)
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise _too_large(limit, f"over {limit}")
        yield chunk


async def read_pieces(headers: Mapping[str, str], chunks: AsyncIterable[bytes], limit: int) -> list[bytes]:
    """The whole body as the pieces it arrived in, refusing (413) anything over ``limit`` bytes before or
    while reading it. Joining them is left to the caller: for a body of many megabytes the join is a copy
    of tens of milliseconds, which :func:`history_proxy.server.warm.read_request` makes off the loop."""
    check_declared_length(headers, limit)
    pieces: list[bytes] = []
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise _too_large(limit, f"over {limit}")
        if chunk:
            pieces.append(chunk)
    return pieces


def joined(pieces: list[bytes]) -> bytes:
    """The pieces of a body as one ``bytes`` (the one piece itself, when there is one)."""
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


async def read_body(headers: Mapping[str, str], chunks: AsyncIterable[bytes], limit: int) -> bytes:
    """The whole body, refusing (413) anything over ``limit`` bytes before or while reading it."""
    return joined(await read_pieces(headers, chunks, limit))
