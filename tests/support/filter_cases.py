"""The filter cases the property suites run over: every registered filter type, with the parameters of
its ``config/examples/<type>.yaml``, its defaults and tight budgets (``tests/test_properties.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from history_proxy.config.loading import ConfigError, load_config
from history_proxy.config.models import Config
from history_proxy.filters import FILTER_TYPES, Filter

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "config" / "examples"
TIGHT_BUDGETS = (40, 150, 400)


def keeps_leading_system(f: Filter) -> bool:
    """Whether the filter keeps the leading system/developer messages (invariant 2, docs/architecture.md)."""
    if f.type_name == "token_limiter" and not getattr(f, "keep_system", True):
        return False  # keep_system: false makes the leading system messages droppable like any group
    # system_prompt replaces the leading system messages (docs/filters/manager_digest.md)
    return not (f.type_name == "manager_digest" and getattr(f, "system_prompt", None) is not None)


# --- the cases: every registered filter, with example, default and tight-budget parameters ---------


@dataclass(frozen=True)
class FilterCase:
    """One configured filter the properties run over."""

    name: str
    filter: Filter


def configured_filters(config: Config) -> list[Filter]:
    """Every filter of every chain in a config: global, each tenant's, each role's."""
    policies = config.policies
    found: list[Filter] = list(policies.global_)
    for kind in ("tenants", "roles"):
        for name in getattr(policies, kind):
            found += [f for _, f in policies.located(kind, name)[1]]
    return found


def example_filters(type_name: str) -> list[Filter]:
    """The filters of ``type_name`` in ``config/examples/<type>.yaml`` (none when it is missing or invalid).

    A missing or invalid example is reported by tests/test_examples.py; here it only means fewer cases.
    """
    path = EXAMPLES_DIR / f"{type_name}.yaml"
    if not path.exists():
        return []
    try:
        config = load_config(path)
    except ConfigError:
        return []
    found = [f for f in configured_filters(config) if f.type_name == type_name]
    if type_name == "cache_control" and config.cache_control is not None:
        found.append(config.cache_control)
    return found


def default_filter(type_name: str) -> Filter | None:
    """The filter with every parameter at its default, when the model allows that."""
    try:
        return FILTER_TYPES[type_name].model_validate({"type": type_name})
    except ValidationError:
        return None


def budget_field(f: Filter) -> str | None:
    """The integer field that holds the filter's ``budget()``."""
    limit = f.budget()
    if limit is None:
        return None
    return next(
        (name for name, value in f if name != "type" and value == limit and isinstance(value, int)), None
    )


def tight_budget_variants(f: Filter) -> list[Filter]:
    """Copies of a budgeted filter with small limits, so generated conversations go over them."""
    field = budget_field(f)
    if field is None:
        return []
    variants = []
    for limit in TIGHT_BUDGETS:
        try:
            variants.append(type(f).model_validate({**f.model_dump(), field: limit}))
        except ValidationError:
            continue
    return variants


def build_cases() -> list[FilterCase]:
    cases: list[FilterCase] = []
    for type_name in FILTER_TYPES:
        seen: list[dict[str, Any]] = []
        candidates = [(f"example{i}", f) for i, f in enumerate(example_filters(type_name))]
        default = default_filter(type_name)
        if default is not None:
            candidates.append(("defaults", default))
        for label, f in list(candidates):
            candidates += [(f"{label}-budget{f2.budget()}", f2) for f2 in tight_budget_variants(f)]
        for label, f in candidates:
            dumped = f.model_dump(mode="json")
            if dumped not in seen:
                seen.append(dumped)
                cases.append(FilterCase(f"{type_name}-{label}", f))
    return cases


CASES = build_cases()
