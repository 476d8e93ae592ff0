"""Header hygiene at the proxy's edge: which client headers go upstream and which answer headers come back.

Hop-by-hop headers (the fixed list and any a ``Connection`` header names) and ``Proxy-*`` headers
never cross the proxy; the upstream's own key replaces the client's Authorization; the caller's
identity headers stay at the proxy unless the upstream's config asks for them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from history_proxy.config.models import IdentityConfig, UpstreamConfig

HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "te", "trailer", "trailers", "transfer-encoding", "upgrade"}
)
# Expect: 100-continue is answered by the proxy's own server, never passed on
NOT_FORWARDED = frozenset(
    {"host", "content-length", "accept-encoding", "authorization", "x-api-key", "x-goog-api-key", "expect"}
)
# the proxy's server writes its own Date and Server; two of each would be a malformed answer
NOT_RETURNED = frozenset({"content-length", "date", "server"})


def _dropped_names(headers: Iterable[tuple[str, str]]) -> set[str]:
    """Hop-by-hop names: the fixed list plus any that a ``Connection`` header names."""
    named = {
        token.strip().lower()
        for name, value in headers
        if name.lower() == "connection"
        for token in value.split(",")
    }
    return set(HOP_BY_HOP) | named


def _end_to_end(headers: Sequence[tuple[str, str]], also_drop: frozenset[str]) -> list[tuple[str, str]]:
    drop = _dropped_names(headers) | also_drop
    kept: list[tuple[str, str]] = []
    for name, value in headers:
        lower = name.lower()
        if lower not in drop and not lower.startswith("proxy-"):
            kept.append((lower, value))
    return kept


def response_headers(headers: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """End-to-end upstream response headers to return (Content-Encoding kept: the bytes are raw)."""
    return _end_to_end(headers, NOT_RETURNED)


FORWARD_DROPPED = HOP_BY_HOP | NOT_FORWARDED
CLIENT_KEY_HEADERS = ("authorization", "x-api-key", "x-goog-api-key")
"""The headers a client's key comes in (OpenAI's, Anthropic's, Google's): replaced by the upstream's own."""
IDENTITY_ENCODING = (b"accept-encoding", b"identity")


def upstream_authorization(upstream: UpstreamConfig) -> tuple[bytes, bytes] | None:
    """The header carrying the upstream's own key, as sent (None without a key): ``Authorization:
    Bearer`` for ``api: openai``, ``x-api-key`` for ``api: anthropic``, ``x-goog-api-key`` for ``api: google``."""
    key = upstream.key
    if key is None:
        return None
    if upstream.api == "anthropic":
        return (b"x-api-key", key.encode("latin-1", "replace"))
    if upstream.api == "google":
        return (b"x-goog-api-key", key.encode("latin-1", "replace"))
    return (b"authorization", f"Bearer {key}".encode("latin-1", "replace"))


def withheld_headers(upstream: UpstreamConfig, identity: IdentityConfig) -> frozenset[str]:
    """The identity header names (lower case) not sent to ``upstream``: all, unless it has
    ``forward_identity: true`` (they describe the caller to the proxy, not to the model's provider)."""
    if upstream.forward_identity:
        return frozenset()
    return frozenset(
        name.lower() for name in (identity.role_header, identity.agent_header, identity.phase_header)
    )


def wire_request_headers(
    client_headers: Sequence[tuple[str, str]],
    authorization: tuple[bytes, bytes] | None,
    *,
    client_auth_is_proxy_key: bool,
    withheld: frozenset[str] = frozenset(),
) -> list[tuple[bytes, bytes]]:
    """Headers to send upstream, as latin-1 bytes (the server decoded them as latin-1), in one pass.

    End-to-end client headers in order (hop-by-hop, the ones a ``Connection`` header names,
    ``Proxy-*``, Host, Content-Length and Accept-Encoding dropped), then the Authorization, then
    ``accept-encoding: identity`` (raw bytes are relayed; identity keeps the proxy's own errors
    readable). ``authorization`` is :func:`upstream_authorization` of the upstream, computed once
    per config: the upstream's own key replaces the client's; without one the client's passes,
    unless it carries a proxy key (``auth.keys`` configured). ``x-api-key`` (Anthropic's key header)
    and ``x-goog-api-key`` (Google's) are treated as the Authorization is: the upstream's own key
    replaces them. ``withheld`` names
    (lower case) stay at the proxy too: the identity headers, unless the upstream asks for them
    (:func:`withheld_headers`).
    """
    kept: list[tuple[str, str]] = []
    client_auth: list[tuple[str, str]] = []
    named: set[str] | None = None
    for name, value in client_headers:
        lower = name.lower()
        if lower in FORWARD_DROPPED or lower in withheld or lower.startswith("proxy-"):
            if lower == "connection":
                named = (named or set()) | {token.strip().lower() for token in value.split(",")}
            elif lower in CLIENT_KEY_HEADERS:
                client_auth.append((lower, value))
            continue
        kept.append((lower, value))
    out = [
        (name.encode("latin-1"), value.encode("latin-1", "replace"))
        for name, value in kept
        if named is None or name not in named
    ]
    if authorization is not None:
        out.append(authorization)
    elif not client_auth_is_proxy_key:  # a key header named in Connection is hop-by-hop too
        out += [
            (name.encode("latin-1"), value.encode("latin-1", "replace"))
            for name, value in client_auth
            if named is None or name not in named
        ]
    out.append(IDENTITY_ENCODING)
    return out


def decode_headers(raw: Sequence[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    """Raw answer headers as text, names lowercased, decoded as latin-1: one character per byte,
    so encoding them back as latin-1 relays exactly the bytes the upstream sent."""
    return [(name.lower().decode("latin-1"), value.decode("latin-1")) for name, value in raw]


def query_without_key(query: str, upstream: UpstreamConfig, proxy_keys: bool) -> str | None:
    """Google's ``?key=`` taken out of ``query`` when the upstream has its own key (sent as a header) or
    the client's key is a proxy key (``auth.keys`` configured); None: the query goes as it came."""
    if "key=" not in query or (upstream.key is None and not proxy_keys):
        return None
    return "&".join(pair for pair in query.split("&") if pair.partition("=")[0] != "key")
