"""Contract tests: every example config loads, every filter type has its example and its docs."""

from __future__ import annotations

from pathlib import Path

import pytest

from history_proxy.config.loading import load_config
from history_proxy.config.models import DEFAULT_CONFIG_PATH, Config
from history_proxy.filters import FILTER_TYPES
from tests.support.filter_cases import configured_filters

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "config" / "examples").glob("*.yaml"))
DOCS_DIR = ROOT / "docs" / "filters"


def types_in(config: Config) -> set[str]:
    found = {f.type_name for f in configured_filters(config)}
    if config.cache_control is not None:
        found.add("cache_control")
    return found


def test_there_are_example_configs() -> None:
    assert EXAMPLES


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_config_loads_with_no_environment(path: Path) -> None:
    config = load_config(path, env={})
    assert config.upstreams


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_opens_with_a_comment_and_enables_its_filter(path: Path) -> None:
    first_line = path.read_text(encoding="utf-8").splitlines()[0]
    assert first_line.startswith(f"# {path.stem}"), "start with '# <type>: what this example shows'"
    if path.stem in FILTER_TYPES:
        assert path.stem in types_in(load_config(path, env={}))


@pytest.mark.parametrize("type_name", sorted(FILTER_TYPES))
def test_every_filter_type_has_an_example_config(type_name: str) -> None:
    assert (ROOT / "config" / "examples" / f"{type_name}.yaml").is_file()


@pytest.mark.parametrize("type_name", sorted(FILTER_TYPES))
def test_every_filter_type_has_its_docs_section(type_name: str) -> None:
    path = DOCS_DIR / f"{type_name}.md"
    assert path.is_file()
    text = path.read_text(encoding="utf-8")
    assert text.startswith(f"### {type_name}\n")


@pytest.mark.parametrize("type_name", sorted(FILTER_TYPES))
def test_every_filter_parameter_is_documented(type_name: str) -> None:
    path = DOCS_DIR / f"{type_name}.md"
    if not path.is_file():
        pytest.fail(f"{path} is missing")
    text = path.read_text(encoding="utf-8")
    fields = [name for name in FILTER_TYPES[type_name].model_fields if name != "type"]
    assert [name for name in fields if f"`{name}`" not in text] == []


def test_the_default_config_loads_on_a_machine_with_no_api_key() -> None:
    config = load_config(DEFAULT_CONFIG_PATH, env={})
    assert config.upstreams
    assert config.policies.roles, "the default config shows the role chains"
    assert isinstance(load_config(env={}), Config)
