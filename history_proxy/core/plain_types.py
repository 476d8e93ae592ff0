"""YAML's booleans and numbers kept apart: ``n: yes`` is not 1 and ``include_global: 1`` is not true.

pydantic's lax mode turns ``true`` into 1 for a number field and 0/1 into booleans; YAML 1.1 reads
``yes``, ``on`` and ``true`` as booleans, so ``n: yes`` would silently mean ``n: 1``. Filters and config
mappings refuse both, as the config's JSON Schema does.
"""

from __future__ import annotations

import types
from typing import Any, Union, get_args, get_origin


def _kinds(annotation: Any) -> set[Any]:
    """The types a field annotation admits (the members of a union)."""
    if get_origin(annotation) in (Union, types.UnionType):
        return set().union(*(_kinds(member) for member in get_args(annotation)))
    return {annotation}


def plain_value(value: Any, annotation: Any) -> Any:
    """``value`` unchanged, or a ``ValueError`` when it is a boolean for a number or a number for a boolean."""
    kinds = _kinds(annotation) - {type(None)}
    if isinstance(value, bool) and bool not in kinds and kinds & {int, float}:
        raise ValueError(f"must be a number, not {str(value).lower()}")
    if (
        kinds == {bool} and isinstance(value, int | float) and not isinstance(value, bool)
    ):  # "true" from ${VAR}: fine
        raise ValueError(f"must be true or false, not {value!r}")
    return value


def plain_fields(fields: dict[str, Any], data: Any) -> Any:
    """``data`` (a mapping about to be validated) unchanged, or one ``ValueError`` naming every field
    whose value is a boolean for a number or a number for a boolean."""
    if not isinstance(data, dict):
        return data
    problems = []
    for name, field in fields.items():
        key = field.alias or name
        if key in data:
            try:
                plain_value(data[key], field.annotation)
            except ValueError as exc:
                problems.append(f"{key}: {exc}")
    if problems:
        raise ValueError("; ".join(problems))
    return data
