"""``history_proxy_role_hints_total{outcome}``: requests whose role header did not name a configured role.

``missing`` (no header: the default role), ``unknown`` (a role the config does not name: the default
role's chain) and ``matched`` (a configured role written with other case or spacing). A rising
``unknown`` count is a client whose role is mistyped; the access line's ``role_sent`` says which.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from history_proxy.core.identity import ROLE_DEFAULTED, ROLE_MATCHED, ROLE_UNKNOWN, Identity

_OUTCOMES = ((ROLE_DEFAULTED, "missing"), (ROLE_UNKNOWN, "unknown"), (ROLE_MATCHED, "matched"))


class RoleHints:
    """The counter of role headers the proxy had to interpret."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.counter = Counter(
            "history_proxy_role_hints",
            "Requests whose role header was missing, unknown (served the default role's chain) or matched "
            "to a configured role despite case or spacing.",
            ["outcome"],
            registry=registry,
        )

    def observe(self, identity: Identity | None) -> None:
        """Count the request if its role was defaulted, unknown or matched."""
        for note in identity.notes if identity else ():
            for prefix, outcome in _OUTCOMES:
                if note.startswith(prefix):
                    self.counter.labels(outcome).inc()
