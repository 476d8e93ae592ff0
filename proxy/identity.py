"""Who is calling: role, agent, phase and tenant, from request headers and the proxy key."""

from __future__ import annotations

import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass

from proxy.config import Config
from proxy.errors import AuthError, InvalidRequestError

MAX_HEADER_VALUE = 128
_SAFE_VALUE = re.compile(r"^[A-Za-z0-9_.:@/+ -]*$")


@dataclass(frozen=True)
class Identity:
    """The caller as the pipeline sees it."""

    role: str
    agent: str | None = None
    phase: str | None = None
    tenant: str | None = None


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name.lower())
    if value is None:
        return None
    value = value.strip()
    if len(value) > MAX_HEADER_VALUE or not _SAFE_VALUE.match(value):
        raise InvalidRequestError(
            f"header {name} must be at most {MAX_HEADER_VALUE} characters of letters, digits, space and _.:@/+-",
            param=name,
            code="invalid_header",
        )
    return value or None


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The token of an ``Authorization: Bearer ...`` header, if any."""
    value = headers.get("authorization", "")
    scheme, _, token = value.partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def tenant_for_key(config: Config, token: str | None) -> str | None:
    """The tenant of a proxy key, comparing every configured key in constant time."""
    if not config.auth.keys:
        return None
    if token is None:
        raise AuthError("missing proxy key: send 'Authorization: Bearer <proxy key>'")
    tenant = None
    given = token.encode()
    for entry in config.auth.keys:
        if hmac.compare_digest(entry.key.get_secret_value().encode(), given):
            tenant = entry.tenant
    if tenant is None:
        raise AuthError("unknown proxy key")
    return tenant


def resolve_identity(config: Config, headers: Mapping[str, str]) -> Identity:
    """Read the caller from lower-cased request headers; raises 401/400 ``ProxyError``s."""
    ids = config.identity
    tenant = tenant_for_key(config, bearer_token(headers))
    return Identity(
        role=_header(headers, ids.role_header) or ids.default_role,
        agent=_header(headers, ids.agent_header),
        phase=_header(headers, ids.phase_header),
        tenant=tenant,
    )
