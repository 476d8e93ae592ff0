"""Who is calling: role, agent, phase and tenant, and how identity headers are read."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from proxy.errors import InvalidRequestError

MAX_HEADER_VALUE = 128
_SAFE_VALUE = re.compile(r"^[A-Za-z0-9_.:@/+ -]*$")


@dataclass(frozen=True)
class Identity:
    """The caller as the pipeline sees it."""

    role: str
    agent: str | None = None
    phase: str | None = None
    tenant: str | None = None


def read_header(headers: Mapping[str, str], name: str) -> str | None:
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
