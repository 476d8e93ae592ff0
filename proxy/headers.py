"""Header hygiene at the proxy's edge: which client headers go upstream and which answer headers come back.

Hop-by-hop headers (the fixed list and any a ``Connection`` header names) and ``Proxy-*`` headers
never cross the proxy; the upstream's own key replaces the client's Authorization.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from proxy.config import UpstreamConfig

HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "te", "trailer", "trailers", "transfer-encoding", "upgrade"}
)
NOT_FORWARDED = frozenset({"host", "content-length", "accept-encoding", "authorization"})
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


def request_headers(
    client_headers: Sequence[tuple[str, str]], upstream: UpstreamConfig, *, client_auth_is_proxy_key: bool
) -> list[tuple[str, str]]:
    """Headers to send upstream: end-to-end client headers, the right Authorization, identity encoding.

    The upstream's own key replaces the client's Authorization. A client Authorization that carries
    a proxy key (``auth.keys`` configured) is never forwarded.
    """
    out = _end_to_end(client_headers, NOT_FORWARDED)
    if upstream.key is not None:
        out.append(("authorization", f"Bearer {upstream.key}"))
    elif not client_auth_is_proxy_key:
        out += [(n.lower(), v) for n, v in client_headers if n.lower() == "authorization"]
    # raw bytes are streamed back as they are; identity keeps them readable for the proxy's own errors
    out.append(("accept-encoding", "identity"))
    return out


def response_headers(headers: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """End-to-end upstream response headers to return (Content-Encoding kept: the bytes are raw)."""
    return _end_to_end(headers, NOT_RETURNED)
