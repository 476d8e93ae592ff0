"""The caller of one request: its proxy key's tenant and its identity headers, read with the config."""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from history_proxy.config.models import Config, ProxyKey
from history_proxy.core.identity import Identity, bearer_token, match_role, read_header
from history_proxy.errors import AuthError, ForbiddenError


def proxy_token(headers: Mapping[str, str]) -> str | None:
    """The proxy key a request carries: ``Authorization: Bearer``, Anthropic's ``x-api-key`` or Google's
    ``x-goog-api-key``."""
    return bearer_token(headers) or headers.get("x-api-key") or headers.get("x-goog-api-key") or None


def _key_entry(config: Config, token: str | None) -> ProxyKey | None:
    """The ``auth.keys`` entry of a proxy key, comparing every configured key in constant time."""
    if not config.auth.keys:
        return None
    if token is None:
        raise AuthError(
            "missing proxy key: send 'Authorization: Bearer <proxy key>', 'x-api-key: <proxy key>' or "
            "'x-goog-api-key: <proxy key>'"
        )
    found = None
    given = token.encode()
    for entry in config.auth.keys:
        if hmac.compare_digest(entry.key.get_secret_value().encode(), given):
            found = entry
    if found is None:
        raise AuthError("unknown proxy key")
    return found


def tenant_for_key(config: Config, token: str | None) -> str | None:
    """The tenant of a proxy key, comparing every configured key in constant time."""
    entry = _key_entry(config, token)
    return entry.tenant if entry else None


def role_of_key(config: Config, headers: Mapping[str, str]) -> str | None:
    """The role ``auth.keys[].role`` gives the request's proxy key (None: no key, or no role)."""
    entry = _key_entry(config, proxy_token(headers))
    return entry.role if entry is not None else None


def reachable_upstreams(config: Config, headers: Mapping[str, str], names: list[str]) -> list[str]:
    """``names`` (a route: upstream, then fallbacks) less those the caller's key may not reach.

    403 naming ``auth.keys[].upstreams`` when the route's own upstream is not among them. Keys
    without ``upstreams`` reach every upstream.
    """
    if not any(entry.upstreams is not None for entry in config.auth.keys):
        return names
    entry = _key_entry(config, proxy_token(headers))
    if entry is None or entry.upstreams is None:
        return names
    if names[0] not in entry.upstreams:
        raise ForbiddenError(
            f"this proxy key may not reach upstream {names[0]!r}, where the request routes; "
            f"its auth.keys[].upstreams allows: {', '.join(entry.upstreams) or 'none'}"
        )
    return [name for name in names if name in entry.upstreams]


def resolve_identity(config: Config, headers: Mapping[str, str]) -> Identity:
    """Read the caller from lower-cased request headers; raises 401/400 ``ProxyError``s."""
    ids = config.identity
    entry = _key_entry(config, proxy_token(headers))
    sent = read_header(headers, ids.role_header)
    role, notes = match_role(sent, config.policies.roles, ids.default_role)
    return Identity(
        role=role,
        agent=read_header(headers, ids.agent_header),
        phase=read_header(headers, ids.phase_header),
        tenant=entry.tenant if entry else None,
        notes=notes,
        role_sent=sent if notes and sent else None,
        upstreams=frozenset(entry.upstreams) if entry and entry.upstreams is not None else None,
    )


def authorize_metrics(config: Config, headers: Mapping[str, str]) -> None:
    """``GET /metrics`` under ``admin.metrics: admin``: 401 without a proxy key, 403 unless an admin tenant's."""
    if config.admin.metrics != "admin":
        return
    tenant = tenant_for_key(config, proxy_token(headers)) if config.auth.keys else None
    if tenant is None or tenant not in config.admin.tenants:
        raise ForbiddenError(f"tenant {tenant!r} may not read /metrics (admin.metrics: admin, admin.tenants)")
