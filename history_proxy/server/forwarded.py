"""``X-Forwarded-For``/``-Proto``/``-Host`` and ``Forwarded`` as a proxy sets them for its upstream.

From a peer in ``trusted_proxies`` (a load balancer in front of this proxy) the headers it sent are
kept and this hop is appended: its peer address to ``X-Forwarded-For``, an element to
``Forwarded``; ``X-Forwarded-Proto``/``-Host`` it sent stay. From any other peer whatever the client
sent under those names is dropped and replaced with what the proxy saw: a client cannot make the
upstream believe it comes from elsewhere. ``serve`` runs uvicorn without its own proxy-headers
handling, so the peer here is always the TCP peer.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from pydantic import IPvAnyNetwork

FORWARDING = frozenset({"x-forwarded-for", "x-forwarded-proto", "x-forwarded-host", "forwarded"})


def _trusted(peer: str, trusted: Sequence[IPvAnyNetwork]) -> bool:
    if not trusted or not peer:
        return False
    try:
        address = ipaddress.ip_address(peer)
    except ValueError:
        return False
    return any(address in network for network in trusted)


def _node(peer: str) -> str:
    """A ``Forwarded`` node: IPv6 addresses quoted in brackets (RFC 7239), unknown when none."""
    if not peer:
        return "unknown"
    return f'"[{peer}]"' if ":" in peer else peer


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def forwarded_headers(
    headers: Sequence[tuple[str, str]],
    peer: str,
    scheme: str,
    trusted: Sequence[IPvAnyNetwork],
) -> list[tuple[str, str]]:
    """``headers`` (lower-case names, in order) with the forwarding headers of this hop.

    ``peer``: the TCP peer's address (``""`` when unknown); ``scheme``: ``http`` or ``https``.
    """
    keep = _trusted(peer, trusted)
    out: list[tuple[str, str]] = []
    sent: dict[str, list[str]] = {}
    host = ""
    for name, value in headers:
        if name in FORWARDING:
            sent.setdefault(name, []).append(value)
            continue
        if name == "host" and not host:
            host = value
        out.append((name, value))
    chain = [*sent.get("x-forwarded-for", ()), peer or "unknown"] if keep else [peer or "unknown"]
    proto = sent["x-forwarded-proto"][0] if keep and "x-forwarded-proto" in sent else scheme
    forwarded_host = sent["x-forwarded-host"][0] if keep and "x-forwarded-host" in sent else host
    element = f"for={_node(peer)};proto={scheme}" + (f";host={_quoted(host)}" if host else "")
    elements = [*sent.get("forwarded", ()), element] if keep else [element]
    out.append(("x-forwarded-for", ", ".join(chain)))
    out.append(("x-forwarded-proto", proto))
    if forwarded_host:
        out.append(("x-forwarded-host", forwarded_host))
    out.append(("forwarded", ", ".join(elements)))
    return out
