"""The filter library: one filter family per module, discovered here into one registry.

Every module in this package that defines :class:`~proxy.filters.base.Filter` subclasses with a
``type`` literal contributes them. ``FILTER_TYPES`` maps the type name to its model.
"""

from __future__ import annotations

import importlib
import pkgutil
import typing

from proxy.filters.base import Filter, FilterContext, Summarizer

__all__ = ["FILTER_TYPES", "Filter", "FilterContext", "Summarizer", "filter_types"]


def _type_literal(cls: type[Filter]) -> str | None:
    field = cls.model_fields.get("type")
    if field is None:
        return None
    args = typing.get_args(field.annotation)
    return str(args[0]) if len(args) == 1 and isinstance(args[0], str) else None


def filter_types() -> dict[str, type[Filter]]:
    """Import every filter module and map each ``type`` name to its model, sorted by name."""
    found: dict[str, type[Filter]] = {}
    for module in pkgutil.iter_modules(__path__):
        if module.name == "base" or module.name.startswith("_"):
            continue
        loaded = importlib.import_module(f"{__name__}.{module.name}")
        for value in vars(loaded).values():
            if isinstance(value, type) and issubclass(value, Filter) and value.__module__ == loaded.__name__:
                name = _type_literal(value)
                if name is not None:
                    if name in found and found[name] is not value:
                        raise RuntimeError(f"filter type {name!r} is declared twice")
                    found[name] = value
    return dict(sorted(found.items()))


FILTER_TYPES: dict[str, type[Filter]] = filter_types()
