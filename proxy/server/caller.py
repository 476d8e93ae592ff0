"""The caller of one request: its proxy key's tenant and its identity headers, read with the config."""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from proxy.config.models import Config
from proxy.core.identity import ROLE_DEFAULTED, Identity, bearer_token, read_header
from proxy.errors import AuthError


def tenant_for_key(config: Config, token: str | None) -> str | None:
    """The tenant of a proxy key, comparing every configured key in constant time."""
    if not config.auth.keys:
        return None
    if token is None:
        raise AuthError(
            "missing proxy key: send 'Authorization: Bearer <proxy key>' or 'x-api-key: <proxy key>'"
        )
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
    tenant = tenant_for_key(config, bearer_token(headers) or headers.get("x-api-key") or None)
    role = read_header(headers, ids.role_header)
    return Identity(
        role=role or ids.default_role,
        agent=read_header(headers, ids.agent_header),
        phase=read_header(headers, ids.phase_header),
        tenant=tenant,
        notes=() if role else (ROLE_DEFAULTED,),
    )
