"""One list of filter types, seen the same from every side: the config union, the modules, examples, docs, tests."""

from __future__ import annotations

import typing
from pathlib import Path

from history_proxy.config.policies import FilterConfig
from history_proxy.filters import FILTER_CLASSES, FILTER_TYPES, type_tag

ROOT = Path(__file__).resolve().parents[1]
FILTERS = ROOT / "history_proxy" / "filters"
NOT_FILTERS = {"__init__", "base"}


def union_members() -> tuple[type, ...]:
    union, _discriminator = typing.get_args(FilterConfig)
    return typing.get_args(union)


def stems(directory: Path, pattern: str, prefix: str = "") -> set[str]:
    return {p.stem.removeprefix(prefix) for p in directory.glob(pattern)}


def test_the_config_union_lists_exactly_the_filter_classes() -> None:
    assert set(union_members()) == set(FILTER_CLASSES)
    assert len(union_members()) == len(FILTER_CLASSES) == len(FILTER_TYPES)


def test_each_filter_lives_in_the_module_named_by_its_type_tag() -> None:
    assert {cls.__module__ for cls in FILTER_CLASSES} == {
        f"history_proxy.filters.{type_tag(cls)}" for cls in FILTER_CLASSES
    }


def test_the_filter_package_holds_one_module_per_type_and_private_helpers() -> None:
    modules = {p.stem for p in FILTERS.glob("*.py")} - NOT_FILTERS
    assert {m for m in modules if not m.startswith("_")} == set(FILTER_TYPES)


def test_examples_docs_and_unit_tests_name_the_same_types() -> None:
    types = set(FILTER_TYPES)
    assert stems(ROOT / "config" / "examples", "*.yaml") == types
    assert stems(ROOT / "docs" / "filters", "*.md") - {"README"} == types  # README.md: the index
    # passthrough has nothing to test on its own beyond the property tests
    assert stems(ROOT / "tests" / "filters", "test_*.py", "test_") == types - {"passthrough"}
