"""Filter chains in the config: ``policies.global``, ``policies.tenants.<t>``, ``policies.roles.<r>``.

A tenant's or role's policy is either a list of filters (enforced) or a mapping
``{mode: enforce|shadow, filters: [...]}``. In ``shadow`` mode the pipeline runs and reports the
chain but forwards the original messages. :meth:`PoliciesConfig.located` gives a policy's mode and
its filters with their config locations (``policies.roles.worker[1]`` for the list form,
``policies.roles.worker.filters[1]`` for the mapping form), the same locations errors use.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Discriminator, Field, Tag

from history_proxy.config.strict import StrictModel
from history_proxy.filters import (
    CacheControl,
    Custom,
    Filter,
    LastNObservations,
    ManagerDigest,
    ManagerView,
    OrchestratorView,
    Passthrough,
    RemoveRegex,
    SlidingWindow,
    SopDigest,
    Summarize,
    TagToolCallObservations,
    TokenLimiter,
    ToolCallFilter,
    ToolResultTruncation,
    Truncate,
    WorkerCompaction,
    WorkerView,
)

FilterConfig = Annotated[
    CacheControl
    | Custom
    | LastNObservations
    | ManagerDigest
    | ManagerView
    | OrchestratorView
    | Passthrough
    | RemoveRegex
    | SlidingWindow
    | SopDigest
    | Summarize
    | TagToolCallObservations
    | TokenLimiter
    | ToolCallFilter
    | ToolResultTruncation
    | Truncate
    | WorkerCompaction
    | WorkerView,
    Field(discriminator="type"),
]
"""Every filter a chain may name, told apart by ``type``; the same classes as ``FILTER_CLASSES``."""
Chain = list[FilterConfig]


PolicyMode = Literal["enforce", "shadow"]


class Policy(StrictModel):
    """A tenant's or role's chain with a mode: ``{mode: shadow, filters: [...]}``.

    ``enforce`` forwards what the chain returns; ``shadow`` runs and reports the chain but forwards
    the original messages (annotations stripped).
    """

    mode: PolicyMode = "enforce"
    """``enforce`` sends the chain's output; ``shadow`` only reports it."""
    filters: Chain = Field(default_factory=list)
    """The chain, as in the list form."""


POLICY_FORMS = ("chain", "mapping")


def _policy_form(value: Any) -> str | None:
    if isinstance(value, list):
        return "chain"
    if isinstance(value, dict | Policy):
        return "mapping"
    return None


PolicyConfig = Annotated[
    Annotated[Chain, Tag("chain")] | Annotated[Policy, Tag("mapping")],
    Discriminator(
        _policy_form,
        custom_error_type="policy_form",
        custom_error_message="must be a list of filters or a mapping {mode: enforce|shadow, filters: [...]}",
    ),
]
"""A tenant's or role's policy: a list of filters (enforced) or a :class:`Policy` mapping."""


class PoliciesConfig(StrictModel):
    """Filter chains, applied in this order: global, then the tenant's, then the role's."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    global_: Chain = Field(default_factory=list, alias="global")
    tenants: dict[str, PolicyConfig] = Field(default_factory=dict)
    roles: dict[str, PolicyConfig] = Field(default_factory=dict)

    def located(
        self, kind: Literal["tenants", "roles"], name: str
    ) -> tuple[PolicyMode, list[tuple[str, Filter]]]:
        """The mode and the filters of one tenant's or role's policy, each filter with its location."""
        policy = getattr(self, kind).get(name)
        if policy is None:
            return "enforce", []
        if isinstance(policy, Policy):
            return policy.mode, [
                (f"policies.{kind}.{name}.filters[{i}]", f) for i, f in enumerate(policy.filters)
            ]
        return "enforce", [(f"policies.{kind}.{name}[{i}]", f) for i, f in enumerate(policy)]

    def mode(self, role: str, tenant: str | None) -> PolicyMode:
        """``shadow`` when the tenant's or the role's policy is in shadow mode (shadow wins), else ``enforce``."""
        modes = [self.located("roles", role)[0]]
        if tenant is not None:
            modes.append(self.located("tenants", tenant)[0])
        return "shadow" if "shadow" in modes else "enforce"

    def size(self, kind: Literal["tenants", "roles"], name: str) -> str:
        """A policy's filter count for summaries, e.g. ``3`` or ``3, shadow``."""
        mode, chain = self.located(kind, name)
        return f"{len(chain)}, shadow" if mode == "shadow" else str(len(chain))
