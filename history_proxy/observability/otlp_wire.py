"""Spans as an OTLP ``ExportTraceServiceRequest``, written straight to protobuf's wire format.

The same bytes' meaning as the SDK's ``encode_spans(spans).SerializePartialToString()`` (a test decodes
both with ``opentelemetry-proto`` and compares), at about a quarter of its CPU: the SDK builds a
protobuf object per attribute, key and value; here each attribute is a few byte strings joined, and
the keys (the same few dozen on every span) are encoded once. Encoding runs on the export thread,
but a Python thread holds the interpreter while it works, so its CPU is taken from requests too.

Field numbers are those of ``opentelemetry/proto/trace/v1/trace.proto`` and ``common.proto`` (OTLP 1.x).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

_MASK64 = (1 << 64) - 1
_SMALL = [bytes([n]) for n in range(128)]
_KEYS: dict[str, bytes] = {}
"""Encoded ``KeyValue.key`` fields by attribute name (bounded: :data:`KEYS_KEPT`)."""
KEYS_KEPT = 4096
_HAS_IS_REMOTE = 0x100
_IS_REMOTE = 0x200
_pack_double = struct.Struct("<d").pack
_pack_fixed64 = struct.Struct("<Q").pack
_pack_fixed32 = struct.Struct("<I").pack


def _varint(n: int) -> bytes:
    if n < 0x80:
        return _SMALL[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: its tag byte(s), the payload's length, the payload."""
    return tag + _varint(len(payload)) + payload


def _any(value: Any) -> bytes:
    """An ``AnyValue``."""
    if isinstance(value, str):
        return _field(b"\x0a", value.encode("utf-8", "surrogatepass"))
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, int):
        return b"\x18" + _varint(value & _MASK64)
    if isinstance(value, float):
        return b"\x21" + _pack_double(value)
    if isinstance(value, bytes):
        return _field(b"\x3a", value)
    if isinstance(value, Sequence):
        return _field(b"\x2a", b"".join([_field(b"\x0a", _any(item)) for item in value]))
    return _field(b"\x0a", str(value).encode("utf-8", "surrogatepass"))


def _key(name: str) -> bytes:
    encoded = _KEYS.get(name)
    if encoded is None:
        encoded = _field(b"\x0a", name.encode("utf-8", "surrogatepass"))
        if len(_KEYS) < KEYS_KEPT:
            _KEYS[name] = encoded
    return encoded


def _attributes(tag: bytes, attributes: Mapping[str, Any] | None) -> bytes:
    """Every attribute as a repeated ``KeyValue`` field numbered by ``tag``."""
    if not attributes:
        return b""
    return b"".join(
        [_field(tag, _key(name) + _field(b"\x12", _any(value))) for name, value in attributes.items()]
    )


def _dropped(tag: bytes, count: int) -> bytes:
    return tag + _varint(count) if count else b""


def _events(span: ReadableSpan) -> Iterable[bytes]:
    for event in span.events:
        body = b"\x09" + _pack_fixed64(event.timestamp) + _field(b"\x12", event.name.encode())
        yield _field(b"\x5a", body + _attributes(b"\x1a", event.attributes))


def _links(span: ReadableSpan) -> Iterable[bytes]:
    for link in span.links:
        context = link.context
        body = (
            b"\x0a\x10"
            + context.trace_id.to_bytes(16, "big")
            + b"\x12\x08"
            + context.span_id.to_bytes(8, "big")
        )
        flags = _HAS_IS_REMOTE | (_IS_REMOTE if context.is_remote else 0)
        yield _field(b"\x6a", body + _attributes(b"\x22", link.attributes) + b"\x35" + _pack_fixed32(flags))


def _span(span: ReadableSpan) -> bytes:
    context = span.get_span_context()
    assert context is not None  # an SDK span always has one
    parent = span.parent
    parts = [
        b"\x0a\x10" + context.trace_id.to_bytes(16, "big"),
        b"\x12\x08" + context.span_id.to_bytes(8, "big"),
    ]
    if context.trace_state:
        parts.append(_field(b"\x1a", context.trace_state.to_header().encode()))
    if parent is not None:
        parts.append(b"\x22\x08" + parent.span_id.to_bytes(8, "big"))
    parts.append(_field(b"\x2a", span.name.encode("utf-8", "surrogatepass")))
    parts.append(b"\x30" + _varint(span.kind.value + 1))  # the proto's kinds start at UNSPECIFIED
    parts.append(b"\x39" + _pack_fixed64(span.start_time or 0) + b"\x41" + _pack_fixed64(span.end_time or 0))
    parts.append(_attributes(b"\x4a", span.attributes))
    parts.append(_dropped(b"\x50", span.dropped_attributes))
    parts.extend(_events(span))
    parts.append(_dropped(b"\x60", span.dropped_events))
    parts.extend(_links(span))
    parts.append(_dropped(b"\x70", span.dropped_links))
    status = span.status
    code = status.status_code.value
    body = (_field(b"\x12", status.description.encode()) if status.description else b"") + (
        b"\x18" + _varint(code) if code else b""
    )
    parts.append(_field(b"\x7a", body))
    flags = _HAS_IS_REMOTE | (_IS_REMOTE if parent is not None and parent.is_remote else 0)
    parts.append(b"\x85\x01" + _pack_fixed32(flags))
    return b"".join(parts)


def encode_spans(spans: Sequence[ReadableSpan]) -> bytes:
    """The serialized ``ExportTraceServiceRequest`` of ``spans``, grouped by resource, then scope."""
    groups: dict[int, tuple[Any, dict[int, tuple[Any, list[bytes]]]]] = {}
    for span in spans:
        resource, scope = span.resource, span.instrumentation_scope
        scopes = groups.setdefault(id(resource), (resource, {}))[1]
        scopes.setdefault(id(scope), (scope, []))[1].append(_field(b"\x12", _span(span)))
    out = []
    for resource, scopes in groups.values():
        body = [_field(b"\x0a", _attributes(b"\x0a", resource.attributes))]
        for scope, encoded in scopes.values():
            inner = b""
            if scope is not None:
                about = _field(b"\x0a", scope.name.encode()) if scope.name else b""
                about += _field(b"\x12", scope.version.encode()) if scope.version else b""
                inner = _field(b"\x0a", about + _attributes(b"\x1a", scope.attributes))
            inner += b"".join(encoded)
            if scope is not None and scope.schema_url:
                inner += _field(b"\x1a", scope.schema_url.encode())
            body.append(_field(b"\x12", inner))
        if resource.schema_url:
            body.append(_field(b"\x1a", resource.schema_url.encode()))
        out.append(_field(b"\x0a", b"".join(body)))
    return b"".join(out)
