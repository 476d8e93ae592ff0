"""The lean transport's answer parser against h11: the same hostile byte streams, the same verdicts.

Each stream is what an upstream sends back to one POST. :func:`lean_verdict` feeds it to a
:class:`~history_proxy.upstream.connection.Connection` (whole, and again in 7-byte pieces) and
:func:`h11_verdict` to ``h11``'s client, with the proxy's stated policy applied on top of h11. The
policy: the limits of :mod:`history_proxy.upstream.connection` (a status within 100-599, no 101, at most
``HEADER_COUNT_LIMIT`` headers, a head of at most ``HEAD_LIMIT`` bytes), and what llhttp refuses
where h11 is lenient (``Content-Length`` beside ``Transfer-Encoding`` or as a list, a control
character in a header value or the reason phrase, a folded header line, a head line ended by LF
alone). A verdict is the answer as relayed (status, headers, body) or ``REFUSED``. Any stream where
the two disagree is a parser difference the proxy would relay.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import h11
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from history_proxy.upstream.connection import HEAD_LIMIT, HEADER_COUNT_LIMIT, Connection

REFUSED = ("refused",)
FOLDED = re.compile(rb"\n[ \t]")
"""A header line folded onto the next (obs-fold): h11 unfolds it, llhttp refuses it, and so does the
policy (a fold can hide a framing header)."""
BARE_LF = re.compile(rb"(?<!\r)\n")
"""A head line ended by LF alone: h11 reads it as a line end, llhttp refuses it, and so does the policy."""
LENGTH_LIST = re.compile(rb"(?i)\ncontent-length:[^\r\n]*,")
"""``Content-Length: 1,1``: h11 reads one length, llhttp refuses the list, and so does the policy."""
HEAD_END = re.compile(rb"\r?\n\r?\n")
CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
"""Control characters (HTAB aside): h11 lets some through in values and reason phrases."""
Verdict = tuple[Any, ...]
REQUEST = b"POST /v1/chat/completions HTTP/1.1\r\nHost: upstream\r\nContent-Length: 2\r\n\r\n"


class _Socket(asyncio.Transport):
    """Just enough of an asyncio transport for a :class:`Connection` fed by hand."""

    def write(self, data: bytes | bytearray | memoryview) -> None: ...

    def writelines(self, list_of_data: Any) -> None: ...

    def close(self) -> None: ...

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


def lean_verdict(stream: bytes, piece: int | None = None) -> Verdict:
    loop = asyncio.new_event_loop()
    try:
        connection = Connection(loop)
        connection.connection_made(_Socket())
        connection.start(REQUEST, b"{}")
        size = piece or max(1, len(stream))
        for at in range(0, len(stream), size):
            if connection.closed:
                break
            connection.data_received(stream[at : at + size])
        connection.connection_lost(None)
        if not connection.head_done or (connection.error is not None and not connection.complete):
            return REFUSED
        if not connection.complete:
            return REFUSED
        headers = tuple((name.lower(), value) for name, value in connection.headers)
        return ("answer", connection.status, headers, b"".join(connection.chunks))
    finally:
        loop.close()


def h11_verdict(stream: bytes) -> Verdict:
    client = h11.Connection(h11.CLIENT, max_incomplete_event_size=HEAD_LIMIT)
    client.send(
        h11.Request(
            method="POST",
            target="/v1/chat/completions",
            headers=[("Host", "upstream"), ("Content-Length", "2")],
        )
    )
    client.send(h11.Data(data=b"{}"))
    client.send(h11.EndOfMessage())
    end = HEAD_END.search(stream)
    head = stream[: end.end()] if end else stream
    if FOLDED.search(head) or BARE_LF.search(head) or LENGTH_LIST.search(head):
        return REFUSED
    client.receive_data(stream)
    client.receive_data(b"")
    count = size = 0
    status: int | None = None
    headers: tuple[tuple[bytes, bytes], ...] = ()
    body = b""
    try:
        while True:
            event = client.next_event()
            if isinstance(event, h11.InformationalResponse | h11.Response):
                count += len(event.headers)
                if event.status_code == 101 or event.status_code > 599 or count > HEADER_COUNT_LIMIT:
                    return REFUSED
                size += len(event.reason) + sum(len(n) + len(v) + 4 for n, v in event.headers.raw_items())
                controls = [event.reason, *(value for _, value in event.headers)]
                if size > HEAD_LIMIT or any(CONTROL.search(text) for text in controls):
                    return REFUSED
                if isinstance(event, h11.Response):
                    names = {name for name, _ in event.headers}
                    if b"content-length" in names and b"transfer-encoding" in names:
                        return REFUSED
                    status, headers = event.status_code, tuple(event.headers.raw_items())
                    headers = tuple((name.lower(), value) for name, value in headers)
            elif isinstance(event, h11.Data):
                body += bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return ("answer", status, headers, body)
            elif event is h11.NEED_DATA or event is h11.PAUSED:
                return REFUSED
    except h11.RemoteProtocolError:
        return REFUSED


def agree(stream: bytes) -> None:
    expected = h11_verdict(stream)
    assert lean_verdict(stream) == expected, stream[:300]
    assert lean_verdict(stream, piece=7) == expected, stream[:300]


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


OK_LENGTH = b'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{"ok":true}'
OK_CHUNKED = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    + chunk(b"data: 1\n\n")
    + chunk(b"data: [DONE]\n\n")
    + b"0\r\n\r\n"
)
OK_UNTIL_CLOSE = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\nall of it"

HOSTILE = {
    "length": OK_LENGTH,
    "chunked": OK_CHUNKED,
    "until close": OK_UNTIL_CLOSE,
    "no reason phrase": b"HTTP/1.1 200 \r\ncontent-length: 2\r\n\r\n{}",
    "interim then final": b"HTTP/1.1 100 Continue\r\n\r\n" + OK_LENGTH,
    "early hints then final": b"HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n" + OK_LENGTH,
    "http/1.0 until close": b"HTTP/1.0 200 OK\r\n\r\nold",
    "204 without body": b"HTTP/1.1 204 No Content\r\n\r\n",
    "length cut short": OK_LENGTH[:-3],
    "chunked cut mid chunk": OK_CHUNKED[:-12],
    "chunked without the last chunk": OK_CHUNKED[: -len(b"0\r\n\r\n")],
    "bad chunk size": b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
    "chunk size overflow": b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nffffffffffffffffff1\r\nab\r\n",
    "chunk without its CRLF": b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nabX0\r\n\r\n",
    "trailers": b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nset-cookie: a=b\r\n\r\n",
    "gzip, chunked": b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
    "gzip alone": b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\nraw",
    "chunked twice": b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
    "length and chunked": (
        b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
    ),
    "two different lengths": b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\n{}x",
    "negative length": b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n{}",
    "length with a sign": b"HTTP/1.1 200 OK\r\ncontent-length: +2\r\n\r\n{}",
    "length not a number": b"HTTP/1.1 200 OK\r\ncontent-length: two\r\n\r\n{}",
    "space before the colon": b"HTTP/1.1 200 OK\r\ncontent-length : 2\r\n\r\n{}",
    "header without a colon": b"HTTP/1.1 200 OK\r\nbroken header\r\ncontent-length: 2\r\n\r\n{}",
    "NUL in a header": b"HTTP/1.1 200 OK\r\nx-a: a\x00b\r\ncontent-length: 2\r\n\r\n{}",
    "not http": b"NOT HTTP AT ALL\r\n\r\n",
    "http/2 preface": b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    "status of two digits": b"HTTP/1.1 20 OK\r\ncontent-length: 2\r\n\r\n{}",
    "status of four digits": b"HTTP/1.1 2000 OK\r\ncontent-length: 2\r\n\r\n{}",
    "status 600": b"HTTP/1.1 600 Odd\r\ncontent-length: 2\r\n\r\n{}",
    "status 999": b"HTTP/1.1 999 Odd\r\ncontent-length: 2\r\n\r\n{}",
    "switching protocols": b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n\r\nraw",
    "too many headers": b"HTTP/1.1 200 OK\r\n"
    + b"".join(b"x-h%d: v\r\n" % i for i in range(HEADER_COUNT_LIMIT + 1))
    + b"content-length: 2\r\n\r\n{}",
    "many headers within the cap": b"HTTP/1.1 200 OK\r\n"
    + b"".join(b"x-h%d: v\r\n" % i for i in range(HEADER_COUNT_LIMIT - 1))
    + b"content-length: 2\r\n\r\n{}",
    "head far over the cap": b"HTTP/1.1 200 OK\r\nx-big: " + b"a" * (2 * HEAD_LIMIT) + b"\r\n\r\n",
    "head well within the cap": b"HTTP/1.1 200 OK\r\nx-big: "
    + b"a" * (HEAD_LIMIT // 2)
    + b"\r\ncontent-length: 2\r\n\r\n{}",
    "nothing at all": b"",
    "head cut": b"HTTP/1.1 200 OK\r\ncontent-len",
}


@pytest.mark.parametrize("stream", HOSTILE.values(), ids=HOSTILE.keys())
def test_the_lean_parser_and_h11_agree(stream: bytes) -> None:
    agree(stream)


@pytest.mark.parametrize(
    "answer", [OK_LENGTH, OK_CHUNKED, OK_UNTIL_CLOSE], ids=["length", "chunked", "close"]
)
def test_every_cut_of_a_valid_answer_gets_the_same_verdict(answer: bytes) -> None:
    for end in range(len(answer) + 1):
        agree(answer[:end])


@settings(max_examples=200, deadline=None)
@given(
    base=st.sampled_from([OK_LENGTH, OK_CHUNKED, OK_UNTIL_CLOSE]),
    at=st.integers(min_value=0, max_value=200),
    junk=st.binary(min_size=1, max_size=8)
    | st.sampled_from([b"\r\n", b"\n", b"0", b":", b" ", b"\r\n\r\n", b"\x00", b"chunked", b"-"]),
)
def test_damaged_answers_get_the_same_verdict(base: bytes, at: int, junk: bytes) -> None:
    at = min(at, len(base))
    stream = base[:at] + junk + base[at:]
    if base is OK_CHUNKED and at >= base.index(b"\r\n\r\n") + 4:
        # damage in the chunks: h11 reads a bare LF as a line end and allows blanks after a chunk
        # size, llhttp refuses both; the policy cannot be put on h11 without parsing the chunks a
        # third time, so here the lean verdict need only be the same or stricter (and see below)
        assert lean_verdict(stream) in (h11_verdict(stream), REFUSED)
        return
    agree(stream)


@pytest.mark.parametrize(
    "stream",
    [OK_CHUNKED[: -len(b"0\r\n\r\n")] + b"0\r\n\n", OK_CHUNKED.replace(b"\r\n9\r\n", b"\r\n9 \r\n")],
    ids=["bare LF ending the trailers", "blank after a chunk size"],
)
def test_chunk_framing_h11_tolerates_is_refused(stream: bytes) -> None:
    assert h11_verdict(stream)[0] == "answer"
    assert lean_verdict(stream) == lean_verdict(stream, piece=7) == REFUSED
