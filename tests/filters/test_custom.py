"""``custom``: a filter class loaded by import path, configured with the other keys."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import Field

from history_proxy.config.loading import ConfigError, load_config, parse_config
from history_proxy.core.identity import Identity
from history_proxy.core.invariants import invariant_errors
from history_proxy.core.messages import Message
from history_proxy.core.tokens import TokenCounters
from history_proxy.errors import FilterError
from history_proxy.filters.base import Filter, FilterContext
from history_proxy.filters.custom import Custom
from history_proxy.filters.remove_regex import RemoveRegex
from history_proxy.pipeline.run import Pipeline
from tests.factories import assistant, corpus_body, corpus_files, exchange, role_filters, user

ROOT = Path(__file__).resolve().parents[2]
HERE = "tests.filters.test_custom"


class KeepNewest:
    """A plain class (not a Filter) with the filter interface."""

    def __init__(self, count: int) -> None:
        self.count = count

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        return list(messages[-self.count :])

    def budget(self) -> int:
        return 1000


class Shout(Filter):
    """A Filter subclass with its own model."""

    type: Literal["shout"]
    suffix: str = Field(default="!", min_length=1)

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        return [
            {**m, "content": m["content"] + self.suffix} if isinstance(m.get("content"), str) else m
            for m in messages
        ]


class AsyncOnly:
    async def apply_async(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        return list(messages[-1:])

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        raise NotImplementedError


class NoApply:
    pass


class BadReturn:
    def apply(self, messages: list[Message], ctx: FilterContext) -> Any:
        return tuple(messages)


def configured(filter_: dict[str, Any]) -> Any:
    raw = {"upstreams": {"mock": {"base_url": "mock://"}}, "policies": {"roles": {"worker": [filter_]}}}
    return role_filters(parse_config(raw))[0]


def config_errors(filter_: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        configured(filter_)
    return caught.value.errors


def test_a_filter_subclass_gets_its_params_validated_by_its_own_model() -> None:
    custom = configured({"type": "custom", "path": f"{HERE}:Shout", "suffix": "?"})
    assert isinstance(custom.target, Shout) and custom.target.suffix == "?"
    assert custom.apply([user("hi")], FilterContext()) == [user("hi?")]


def test_a_built_in_filter_loaded_by_path_behaves_as_when_named_by_type() -> None:
    params: dict[str, Any] = {"remove": ["<diff>.*</diff>"], "keep_last": 1}
    custom = configured(
        {"type": "custom", "path": "history_proxy.filters.remove_regex:RemoveRegex", **params}
    )
    messages = [user("a<diff>x</diff>"), user("b<diff>y</diff>")]
    assert custom.apply(messages, FilterContext()) == RemoveRegex(type="remove_regex", **params).apply(
        messages, FilterContext()
    )


def test_invalid_params_of_a_filter_subclass_are_a_config_error_naming_path_and_param() -> None:
    [error] = config_errors({"type": "custom", "path": f"{HERE}:Shout", "suffix": ""})
    assert error.startswith(f"policies.roles.worker[0]: invalid params for '{HERE}:Shout': suffix: ")
    [error] = config_errors({"type": "custom", "path": f"{HERE}:Shout", "volume": 11})
    assert "volume: Extra inputs are not permitted" in error


def test_a_plain_class_is_called_with_the_params_as_keyword_arguments() -> None:
    custom = configured({"type": "custom", "path": f"{HERE}:KeepNewest", "count": 1})
    assert custom.target.count == 1
    assert custom.apply([user("a"), user("b")], FilterContext()) == [user("b")]
    assert custom.budget() == 1000


def test_params_a_plain_class_rejects_are_a_config_error_naming_the_path() -> None:
    [error] = config_errors({"type": "custom", "path": f"{HERE}:KeepNewest", "cout": 1})
    assert error.startswith(
        f"policies.roles.worker[0]: cannot create '{HERE}:KeepNewest' with its params: TypeError"
    )


def test_a_missing_module_is_a_config_error_naming_the_path() -> None:
    [error] = config_errors({"type": "custom", "path": "no_such_pkg.filters:Thing"})
    assert error == (
        "policies.roles.worker[0]: cannot import 'no_such_pkg.filters:Thing': "
        "ModuleNotFoundError: No module named 'no_such_pkg'"
    )


def test_a_missing_class_is_a_config_error_naming_the_path() -> None:
    assert config_errors({"type": "custom", "path": f"{HERE}:Missing"}) == [
        f"policies.roles.worker[0]: cannot import '{HERE}:Missing': module '{HERE}' has no 'Missing'"
    ]


def test_a_class_without_apply_is_a_config_error() -> None:
    assert config_errors({"type": "custom", "path": f"{HERE}:NoApply"}) == [
        f"policies.roles.worker[0]: '{HERE}:NoApply' has no apply(messages, ctx) method"
    ]


def test_a_path_without_a_class_name_is_rejected() -> None:
    [error] = config_errors({"type": "custom", "path": "tests.filters.test_custom"})
    assert (
        error
        == "policies.roles.worker[0].path: must be 'package.module:ClassName', got 'tests.filters.test_custom'"
    )


def test_the_params_are_shown_with_the_filter() -> None:
    custom = configured({"type": "custom", "path": f"{HERE}:KeepNewest", "count": 3})
    assert custom.describe() == {"type": "custom", "path": f"{HERE}:KeepNewest", "count": 3}


def test_an_async_class_is_awaited() -> None:
    custom = configured({"type": "custom", "path": f"{HERE}:AsyncOnly"})
    assert asyncio.run(custom.apply_async([user("a"), user("b")], FilterContext())) == [user("b")]


def test_a_sync_class_also_answers_through_apply_async() -> None:
    custom = configured({"type": "custom", "path": f"{HERE}:KeepNewest", "count": 1})
    assert asyncio.run(custom.apply_async([user("a"), user("b")], FilterContext())) == [user("b")]


def test_a_result_that_is_not_a_list_fails_naming_the_path() -> None:
    custom = configured({"type": "custom", "path": f"{HERE}:BadReturn"})
    with pytest.raises(TypeError, match=f"{HERE}:BadReturn returned tuple"):
        custom.apply([user()], FilterContext())


def test_the_model_can_be_built_directly() -> None:
    custom = Custom(type="custom", path=f"{HERE}:Shout")
    assert custom.apply([assistant("ok")], FilterContext())[0]["content"] == "ok!"


def test_example_config_enables_the_filter() -> None:
    config = load_config(ROOT / "config" / "examples" / "custom.yaml")
    assert any(f.type_name == "custom" for f in role_filters(config))
    doc = (ROOT / "docs" / "filters" / "custom.md").read_text(encoding="utf-8")
    assert doc.startswith("### custom")


@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.name)
def test_corpus_output_keeps_the_invariants(path: Path) -> None:
    messages = corpus_body(path.name)["messages"]
    snapshot = copy.deepcopy(messages)
    custom = configured(
        {"type": "custom", "path": "history_proxy.filters.remove_regex:RemoveRegex", "remove": [".*"]}
    )
    out = custom.apply(messages, FilterContext())
    assert messages == snapshot
    assert invariant_errors(out) == {}
    assert len(out) == len(messages)


def test_a_custom_filter_that_breaks_a_tool_pair_is_caught_by_the_pipeline() -> None:
    raw = {
        "upstreams": {"mock": {"base_url": "mock://"}},
        "policies": {"roles": {"worker": [{"type": "custom", "path": f"{HERE}:KeepNewest", "count": 1}]}},
    }
    pipeline = Pipeline(parse_config(raw), TokenCounters())
    body = {"model": "gpt-4o", "messages": [user(), *exchange()]}
    with pytest.raises(FilterError) as caught:
        asyncio.run(pipeline.run(body, Identity(role="worker")))
    assert caught.value.filter_type == "custom" and caught.value.position == "policies.roles.worker[0]"
