"""Two tenants' proxy keys and the header that names one."""

from __future__ import annotations

KEYS = {"a": "sk-proxy-tenant-a", "b": "sk-proxy-tenant-b"}


def bearer(tenant: str) -> dict[str, str]:
    return {"authorization": f"Bearer {KEYS[tenant]}"}
