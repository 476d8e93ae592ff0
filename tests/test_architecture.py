"""The dependency direction of docs/architecture.md, kept true by walking every module's imports with ``ast``.

Each package imports only the packages below it (``ALLOWED``); messages, encodings, tokens and errors
are leaves; filters know nothing of HTTP; only upstream/ is an HTTP client and only server/ and the
built-in mock (mock/) serve HTTP; the forwarding client never imports the mock (the server starts
it); no module passes 600 lines (one past 400 is warned about); no module imports another's private
names; only :mod:`history_proxy.observability.access` writes the fields of an ``Exchange``.
"""

from __future__ import annotations

import ast
import graphlib
import sys
import warnings
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "history_proxy"
SOFT_LINES = 400
"""Past this a module gets a warning: look for a responsibility to move out (complexity is the gate:
ruff's C901 and PLR0915 in pyproject.toml)."""
MAX_LINES = 600
"""No module passes this."""


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
            # `from history_proxy.core import tokens` imports the module history_proxy.core.tokens
            found.update(
                f"{target}.{alias.name}" for alias in node.names if f"{target}.{alias.name}" in MODULES
            )
    return found


def top(name: str) -> str:
    return name.split(".")[0]


def importers_of(package: str) -> set[str]:
    return {module for module in MODULES if any(top(name) == package for name in imports_of(module))}


def proxy_imports(module: str) -> set[str]:
    return {name for name in imports_of(module) if top(name) == "history_proxy"} - {"history_proxy"}


def package_of(module: str) -> str:
    """``history_proxy.core.tokens`` -> ``core``; top-level modules
    (``history_proxy.cli``, ``history_proxy.errors``) name themselves."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "history_proxy"


# Which packages each package may import: the request's path drawn as a dependency order.
# core is the leaf; filters sit on it and know nothing of HTTP; config, pipeline and summaries sit
# on filters; upstream and server wire it all; only cli sees everything.
ALLOWED = {
    "errors": set(),
    "core": {"errors"},
    "filters": {"core"},
    "config": {"core", "filters"},
    "pipeline": {"core", "errors", "filters", "config"},
    "summaries": {"core", "errors", "filters", "config"},
    "surfaces": {"core", "errors", "filters", "config", "pipeline"},
    "observability": {"core", "filters", "config", "pipeline"},
    "devtools": {"core", "errors", "pipeline", "observability", "surfaces"},
    "mock": {"core", "errors", "observability", "surfaces"},
    "upstream": {"core", "errors", "config"},
    "server": {
        "core",
        "errors",
        "config",
        "pipeline",
        "summaries",
        "observability",
        "upstream",
        "surfaces",
        "mock",
    },
    "cli": {
        "core",
        "errors",
        "config",
        "pipeline",
        "observability",
        "devtools",
        "mock",
        "server",
        "surfaces",
        "serve",
    },
    "serve": {"core", "errors", "config", "observability", "server"},
    "__main__": {"cli"},
    "history_proxy": set(),
}


def test_the_walk_sees_every_package() -> None:
    assert {package_of(module) for module in MODULES} == set(ALLOWED)
    assert "history_proxy.core.messages" in imports_of("history_proxy.core.tokens")


@pytest.mark.parametrize("module", sorted(MODULES))
def test_each_module_imports_only_the_packages_below_its_own(module: str) -> None:
    own = package_of(module)
    reached = {package_of(name) for name in proxy_imports(module)} - {own}
    assert reached - ALLOWED[own] == set(), f"{module} reaches {sorted(reached - ALLOWED[own])}"


def test_no_module_imports_itself_through_others() -> None:
    """No circle between modules, function-level imports included (a circle is how layers rot first)."""
    graph = {module: proxy_imports(module) & MODULES.keys() - {module} for module in MODULES}
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        pytest.fail(f"modules import each other in a circle: {' -> '.join(exc.args[1])}")


@pytest.mark.parametrize(
    ("leaf", "allowed"),
    [
        ("history_proxy.core.messages", set()),
        ("history_proxy.errors", set()),
        ("history_proxy.core.encodings", set()),
        (
            "history_proxy.core.tokens",
            {
                "history_proxy.core.messages",
                "history_proxy.core.encodings",
                "history_proxy.core.string_counts",
            },
        ),
        ("history_proxy.core.string_counts", set()),
        ("history_proxy.core.cost", set()),
        ("history_proxy.core.windows", set()),
    ],
)
def test_messages_tokens_and_errors_are_leaves(leaf: str, allowed: set[str]) -> None:
    assert proxy_imports(leaf) - allowed == set()


FILTER_MODULES = sorted(m for m in MODULES if m.startswith("history_proxy.filters"))


@pytest.mark.parametrize("module", FILTER_MODULES)
def test_filters_import_only_the_stdlib_pydantic_and_the_message_helpers(module: str) -> None:
    # core.cost and core.windows: prompt-cache prices and context windows (leaves, pure arithmetic);
    # core.evidence: what a distinctive token is (docs/cost.md, evidence kept; a regex over message text)
    allowed_proxy = {
        "history_proxy.core.evidence",
        "history_proxy.core.messages",
        "history_proxy.core.plain_types",
        "history_proxy.core.invariants",
        "history_proxy.core.tokens",
        "history_proxy.core.cost",
        "history_proxy.core.windows",
    }
    foreign = {
        name
        for name in imports_of(module)
        if not (
            top(name) in sys.stdlib_module_names
            or top(name) == "pydantic"
            or name in allowed_proxy
            or name == "history_proxy.filters"
            or name.startswith("history_proxy.filters.")
        )
    }
    assert foreign == set()


@pytest.mark.parametrize(
    ("library", "packages"),
    [
        # the upstream package is the only HTTP client; the server and the mock are the only HTTP servers
        ("httpx", {"upstream"}),
        ("starlette", {"server", "mock"}),
        ("uvicorn", {"server", "mock", "cli", "serve"}),
    ],
)
def test_only_the_http_edges_import_http_libraries(library: str, packages: set[str]) -> None:
    assert {package_of(module) for module in importers_of(library)} - packages == set()


class LongModuleWarning(UserWarning):
    """A module past the soft line count: shown in the run's summary, never a failure."""


@pytest.mark.filterwarnings("default::tests.test_architecture.LongModuleWarning")
@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_is_over_600_lines_and_one_over_400_is_flagged(module: str) -> None:
    lines = len(MODULES[module].read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{MODULES[module].name} has {lines} lines; split it along a responsibility"
    if lines > SOFT_LINES:
        warnings.warn(
            f"{MODULES[module].name} has {lines} lines (over {SOFT_LINES}): does it hold one responsibility?",
            LongModuleWarning,
            stacklevel=1,
        )


def private_names_imported(source: str) -> list[str]:
    """``from history_proxy.x import _y`` (or a relative ``from . import _y``): a name another proxy module keeps
    private. ``import ... as _alias`` of a public name is fine; a dunder is not private."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.level or top(node.module or "") == "history_proxy"):
            found += [
                f"{node.module or '.'}.{alias.name} (line {node.lineno})"
                for alias in node.names
                if alias.name.startswith("_") and not alias.name.startswith("__")
            ]
    return found


def test_the_private_import_walk_sees_one() -> None:
    source = (
        "from history_proxy.core.tokens import _hidden as shown\n"
        "from .helpers import _inner\n"
        "from history_proxy.surfaces import _view\n"  # a private module of the package: its public names
        "from history_proxy.core.tokens import counted as _counted\n"
        "from history_proxy import __version__\n"
        "from json import _private\n"
    )
    found = [name.split()[0] for name in private_names_imported(source)]
    assert found == ["history_proxy.core.tokens._hidden", "helpers._inner", "history_proxy.surfaces._view"]


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_imports_another_modules_private_names(module: str) -> None:
    found = private_names_imported(MODULES[module].read_text(encoding="utf-8"))
    assert found == [], f"{module} imports private names of another module: {found}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_a_private_module_is_imported_only_inside_its_package(module: str) -> None:
    """``history_proxy/surfaces/_view.py`` serves the surfaces package; another package uses a public module."""
    reached = {
        name
        for name in proxy_imports(module)
        if any(part.startswith("_") and not part.startswith("__") for part in name.split("."))
        and package_of(name) != package_of(module)
    }
    assert reached == set(), f"{module} imports another package's private modules {sorted(reached)}"


EXCHANGE_MODULE = "history_proxy.observability.access"


def exchange_field_writes(source: str) -> list[str]:
    """Assignments to an attribute of anything named ``exchange`` (``exchange.status = ...``,
    ``self.exchange.usage += ...``, ``setattr(exchange, ...)``): the request record is written through
    its phase methods (``Exchange.identified``, ``routed``, ``answer_started``, ...), never field by field."""

    def names_exchange(node: ast.expr) -> bool:
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
        return "exchange" in name.lower()

    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = [t for target in node.targets for t in ast.walk(target)]
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "setattr"
            and node.args
            and names_exchange(node.args[0])
        ):
            found.append(f"setattr (line {node.lineno})")
        found += [
            f"{t.attr} (line {t.lineno})"
            for t in targets
            if isinstance(t, ast.Attribute) and isinstance(t.ctx, ast.Store) and names_exchange(t.value)
        ]
    return found


def test_the_exchange_write_walk_sees_each_form() -> None:
    source = "exchange.status = 1\nself.exchange.usage += 2\na, exchange.upstream = 1, 2\nsetattr(exchange, 'x', 1)\n"
    assert [write.split()[0] for write in exchange_field_writes(source)] == [
        "status",
        "usage",
        "upstream",
        "setattr",
    ]
    assert exchange_field_writes("exchange.trace.ended = True\nexchange.routed('m', None)\n") == []


@pytest.mark.parametrize("module", sorted(set(MODULES) - {EXCHANGE_MODULE}))
def test_only_its_own_module_writes_the_fields_of_an_exchange(module: str) -> None:
    writes = exchange_field_writes(MODULES[module].read_text(encoding="utf-8"))
    assert writes == [], f"{module} writes Exchange fields {writes}: add or use a phase method of Exchange"


def public_functions(module: str) -> set[str]:
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not node.name.startswith("_")
    }


VALIDATORS = sorted(m for m in MODULES if m.rpartition(".")[2] in {"validation", "messages_check"})
"""The request validators: chat's (OpenAI's rules and wording) and the Messages adapter's (Anthropic's)."""


@pytest.mark.parametrize("validator", VALIDATORS)
def test_no_validator_shares_a_public_name_with_another_module(validator: str) -> None:
    """Two validators with different rules under one name is how the wrong one gets called."""
    assert len(VALIDATORS) == 2
    names = public_functions(validator)
    shared = {
        name: module for module in MODULES if module != validator for name in public_functions(module) & names
    }
    assert shared == {}, f"{validator} shares public names with other modules: {shared}"


# --- the tests mirror the packages -----------------------------------------------------------------

TESTS = PACKAGE.parent / "tests"
TEST_PACKAGES = {
    path.stem if path.suffix == ".py" else path.name
    for path in PACKAGE.iterdir()
    if (path.is_dir() and (path / "__init__.py").exists())
    or (path.suffix == ".py" and path.stem not in ("__init__", "__main__"))
}
"""What a folder of tests/ may be named after: a package of history_proxy/, or a top-level module (cli, errors)."""
NO_TEST_FOLDER = {"serve": "the `serve` command's process: run by every end-to-end suite at the top"}
CROSS_CUTTING = {
    "architecture": "the layout of every package",
    "bench": "the benchmark harness (bench/)",
    "claude_code_e2e": "a real client end to end",
    "codex_e2e": "a real client end to end",
    "container": "the image built from the Dockerfile",
    "context_standards_e2e": "the providers' context standards against strict and honouring upstreams",
    "deploy": "deploy/: manifests, compose, alerts, dashboards",
    "docs": "every page of docs/ and the README",
    "end_to_end": "the real serve and mock-upstream processes",
    "evidence": "what every chain keeps of an agent's evidence, over the corpus",
    "examples": "every example config, every filter's example and docs",
    "breakpoints_e2e": "OpenAI cache breakpoints end to end, per upstream mode",
    "compaction_e2e": "Responses compaction end to end against upstreams with and without it",
    "every_body_filtered_e2e": "every body carrying a conversation through the global policy end to end",
    "filter_registry": "one list of filter types across config, modules, examples, docs and tests",
    "fleet": "replicas behind nginx sharing a real Redis",
    "frameworks_e2e": "real multi-agent frameworks end to end",
    "gemini_cli_e2e": "a real client end to end",
    "litellm_engine_e2e": "a real gateway calling the engine end to end",
    "hardening_e2e": "hostile loads end to end",
    "hardening3_e2e": "round three's findings end to end: limits, memory, telemetry",
    "install": "a wheel installed outside the clone",
    "messages_unknown_properties": "properties over every filter on /v1/messages",
    "opaque_properties": "properties over every filter on every surface",
    "phoenix_e2e": "a real trace viewer end to end",
    "policy_everywhere_e2e": "the global policy on every surface end to end",
    "private_apis": "every dependency's private API the proxy reaches",
    "properties": "properties over every filter and random chains",
    "readme_walk": "the README top to bottom from an empty directory",
    "recall_e2e": "recall through serve on every surface, tenants apart",
    "refetch_end_to_end": "re-fetches counted end to end on every surface",
    "surfaces_end_to_end": "every surface end to end with the official SDKs",
    "surfaces_properties": "properties over every filter on Responses and Messages",
    "telemetry": "spans end to end with the official SDKs",
    "upstreams_e2e": "the default config's real upstreams and the chosen mock, with the SDKs",
    "views_on_real_traffic": "every default view over the corpus, and the docs table",
}
"""The suites that stay at the top of tests/, each crossing packages on purpose (CONTRIBUTING, "Tests")."""
TEST_MODULES = sorted(
    path for path in TESTS.rglob("test_*.py") if "corpus" not in path.relative_to(TESTS).parts
)


def test_each_test_folder_is_named_after_a_package_of_proxy() -> None:
    folders = {path.parent.relative_to(TESTS) for path in TEST_MODULES} - {Path()}
    assert {str(f) for f in folders if len(f.parts) > 1} == set(), "tests/<package>/ has no subfolders"
    assert {str(f) for f in folders} - TEST_PACKAGES == set(), (
        "a test folder names no package of history_proxy/"
    )
    assert {str(f) for f in folders if not (TESTS / f / "__init__.py").exists()} == set()


def test_each_package_of_proxy_has_its_test_folder() -> None:
    folders = {path.parent.name for path in TEST_MODULES if path.parent != TESTS}
    assert TEST_PACKAGES - folders == set(NO_TEST_FOLDER)


def test_only_the_suites_that_cross_packages_stay_at_the_top_of_tests() -> None:
    top_level = {path.stem.removeprefix("test_") for path in TEST_MODULES if path.parent == TESTS}
    assert top_level - set(CROSS_CUTTING) == set(), "a test of one package goes in tests/<package>/"
    assert set(CROSS_CUTTING) - top_level == set(), "a suite listed here is gone: take it off the list"


def imported_test_modules(path: Path) -> set[str]:
    """The test modules ``path`` imports (``tests.test_x``, ``tests.<package>.test_x``, relative or not)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = ".".join(path.relative_to(PACKAGE.parent).parent.parts)
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)] if node.level else []
            target = ".".join([*base, node.module] if node.module else base)
            names.add(target)
            names.update(f"{target}.{alias.name}" for alias in node.names)
    return {
        name for name in names if top(name) == "tests" and any(p.startswith("test_") for p in name.split("."))
    }


def test_no_module_of_tests_imports_a_test_module() -> None:
    """Shared helpers and fixtures live in tests/support/ (or conftest.py), never in a test module."""
    modules = sorted(TESTS.rglob("*.py"))  # the recording scripts of tests/corpus/ included
    found = {str(path.relative_to(TESTS)): imported_test_modules(path) for path in modules}
    assert {name: sorted(tests) for name, tests in found.items() if tests} == {}
