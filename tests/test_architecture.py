"""The dependency direction of DESIGN.md, kept true by walking every module's imports with ``ast``.

messages, encodings, tokens and errors are leaves (tokens may read messages and encodings); filters
sit on them and know nothing of HTTP; only the HTTP edge imports httpx, starlette and uvicorn; no
module passes 400 lines.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "proxy"
MAX_LINES = 400


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imports_of(module: str) -> set[str]:
    """Every module ``module`` imports, anywhere in its body (function-level imports included)."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.add(target)
            # `from proxy import tokens` imports the module proxy.tokens
            found.update(
                f"{target}.{alias.name}" for alias in node.names if f"{target}.{alias.name}" in MODULES
            )
    return found


def top(name: str) -> str:
    return name.split(".")[0]


def importers_of(package: str) -> set[str]:
    return {module for module in MODULES if any(top(name) == package for name in imports_of(module))}


def proxy_imports(module: str) -> set[str]:
    return {name for name in imports_of(module) if top(name) == "proxy"} - {"proxy"}


def test_the_walk_sees_the_core_modules() -> None:
    assert {"proxy.messages", "proxy.tokens", "proxy.errors", "proxy.config", "proxy.pipeline"} <= set(
        MODULES
    )
    assert "proxy.messages" in imports_of("proxy.tokens")


@pytest.mark.parametrize(
    ("leaf", "allowed"),
    [
        ("proxy.messages", set()),
        ("proxy.errors", set()),
        ("proxy.encodings", set()),
        ("proxy.tokens", {"proxy.messages", "proxy.encodings"}),
    ],
)
def test_messages_tokens_and_errors_are_leaves(leaf: str, allowed: set[str]) -> None:
    assert proxy_imports(leaf) - allowed == set()


FILTER_MODULES = sorted(m for m in MODULES if m.startswith("proxy.filters"))


@pytest.mark.parametrize("module", FILTER_MODULES)
def test_filters_import_only_the_stdlib_pydantic_and_the_message_helpers(module: str) -> None:
    allowed_proxy = {"proxy.messages", "proxy.tokens"}
    foreign = {
        name
        for name in imports_of(module)
        if not (
            top(name) in sys.stdlib_module_names
            or top(name) == "pydantic"
            or name in allowed_proxy
            or name == "proxy.filters"
            or name.startswith("proxy.filters.")
        )
    }
    assert foreign == set()


@pytest.mark.parametrize(
    ("package", "allowed"),
    [
        # proxy.pools holds upstream.py's client and its sweeper; proxy.transport and proxy.connection its
        # connections (which raise httpx's exception types, the transport contract)
        (
            "httpx",
            {
                "proxy.upstream",
                "proxy.pools",
                "proxy.transport",
                "proxy.connection",
                "proxy.app",
                "proxy.mock_upstream",
                "proxy.cli",
            },
        ),
        ("starlette", {"proxy.app", "proxy.edge", "proxy.mock_upstream"}),
        # proxy.mock_server runs the built-in mock under uvicorn inside the proxy's event loop
        ("uvicorn", {"proxy.app", "proxy.mock_upstream", "proxy.mock_server", "proxy.cli"}),
    ],
)
def test_only_the_http_edge_imports_http_libraries(package: str, allowed: set[str]) -> None:
    assert importers_of(package) - allowed == set()


def test_config_and_pipeline_know_nothing_of_http() -> None:
    for module in ("proxy.config", "proxy.identity", "proxy.pipeline", "proxy.request_checks"):
        assert (
            proxy_imports(module) & {"proxy.app", "proxy.upstream", "proxy.cli", "proxy.mock_upstream"}
            == set()
        )


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_is_over_400_lines(module: str) -> None:
    lines = len(MODULES[module].read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{MODULES[module].name} has {lines} lines; split it along a responsibility"
