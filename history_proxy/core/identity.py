"""Who is calling: role, agent, phase and tenant, and how identity headers are read."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from history_proxy.errors import InvalidRequestError

MAX_HEADER_VALUE = 128
ROLE_DEFAULTED = "identity:role_defaulted"
"""The note of a request that sent no role header and got ``identity.default_role``."""
ROLE_UNKNOWN = "identity:role_unknown"
"""The note (``identity:role_unknown:<sent>``) of a role the config does not name: the default role's chain."""
ROLE_MATCHED = "identity:role_matched"
"""The note (``identity:role_matched:<sent>``) of a role matched to a configured one despite case or spacing."""


@dataclass(frozen=True)
class Identity:
    """The caller as the pipeline sees it."""

    role: str
    agent: str | None = None
    phase: str | None = None
    tenant: str | None = None
    notes: tuple[str, ...] = ()
    """How the identity was read when a header was missing (e.g. ``identity:role_defaulted``)."""
    upstreams: frozenset[str] | None = None
    """The upstreams the caller's proxy key may reach (``auth.keys[].upstreams``; None: all)."""
    role_sent: str | None = None
    """The role header as sent, when the role served differs from it (unknown, or matched)."""


def _loose(role: str) -> str:
    """A role as compared loosely: case, spaces, hyphens and underscores ignored."""
    return "".join(ch for ch in role.casefold() if not (ch.isspace() or ch in "-_"))


def match_role(
    sent: str | None, configured: Collection[str], default_role: str
) -> tuple[str, tuple[str, ...]]:
    """The role to serve for a role header, and the note saying how it was chosen.

    A role the config names (or the default role) is served as sent; one that differs from exactly
    one configured role only by case or spacing (``Worker``, ``code reviewer`` for ``code_reviewer``)
    is served as that role; any other is served the default role's chain. Identity is a hint: the
    request is always served, and the note (header, report, access line) says what happened.
    """
    if sent is None:
        return default_role, (ROLE_DEFAULTED,)
    if sent in configured or sent == default_role:
        return sent, ()
    loose = _loose(sent)
    near = [role for role in (*configured, default_role) if _loose(role) == loose]
    if len(set(near)) == 1:
        return near[0], (f"{ROLE_MATCHED}:{sent}",)
    return default_role, (f"{ROLE_UNKNOWN}:{sent}",)


def _as_sent(value: str) -> str:
    """The header's text as the client meant it: HTTP hands bytes over as latin-1; UTF-8 is read as UTF-8."""
    if value.isascii():
        return value
    try:
        return value.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return value


def read_header(headers: Mapping[str, str], name: str) -> str | None:
    """An identity header's value, stripped; None when absent or blank.

    Any printable text up to :data:`MAX_HEADER_VALUE` characters is valid (``Senior Researcher
    (weather, EU)``, ``coder#1``, ``Weather agent!``), returned as sent (:func:`match_role` reads a
    role); control characters or a longer value are a 400 naming the header.
    """
    value = headers.get(name.lower())
    if value is None:
        return None
    value = _as_sent(value).strip()
    if len(value) > MAX_HEADER_VALUE:
        raise InvalidRequestError(
            f"header {name} is {len(value)} characters long; send at most {MAX_HEADER_VALUE}",
            param=name,
            code="invalid_header",
        )
    if not value.isprintable():
        raise InvalidRequestError(
            f"header {name} contains control characters; send printable text",
            param=name,
            code="invalid_header",
        )
    return value or None


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The token of an ``Authorization: Bearer ...`` header, if any."""
    value = headers.get("authorization", "")
    scheme, _, token = value.partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None
