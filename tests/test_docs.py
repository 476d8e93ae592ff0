"""Docs that cannot rot: the filter indexes are generated from docs/filters/, every relative link
resolves, the README stays a front page, and every Python, shell, YAML, TOML and JSON block in the
README and docs/ runs (Python and shell against `history-proxy serve` on the default config) unless its
fence says ``illustrative: <why>``."""

from __future__ import annotations

import contextlib
import json
import os
import re
import runpy
import shutil
import signal
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from history_proxy.config.loading import ConfigError, parse_config
from history_proxy.filters import FILTER_TYPES
from tests.support.serve_process import Server, offline_env, start

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
README_MAX_LINES = 300
BLOCK_TIMEOUT_S = 90
DOCS_PORT = "127.0.0.1:8080"
"""The address the docs use; the test serves on a free port and rewrites it."""


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    illustrative: bool
    code: str

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks() -> list[Block]:
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            info = match.group(1).strip()
            lang = info.split()[0] if info else ""
            line = text.count("\n", 0, match.start()) + 1
            found.append(Block(page, line, lang, "illustrative" in info, match.group(2)))
    return found


BLOCKS = blocks()


def of(*langs: str) -> list[Block]:
    return [b for b in BLOCKS if b.lang in langs and not b.illustrative]


# --- generated indexes and the front page ------------------------------------------------------


def test_every_package_is_on_the_map() -> None:
    """docs/architecture.md places every package of history_proxy/ on its floors and cites nothing outside the clone."""
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    packages = sorted(init.parent.name for init in (ROOT / "history_proxy").glob("*/__init__.py"))
    assert packages, "no package found under history_proxy/"
    missing = [name for name in packages if f"| `history_proxy/{name}/` |" not in page]
    assert missing == [], f"docs/architecture.md's floors table does not place {missing}"


def cited_texts() -> list[Path]:
    """Every file of the clone that may cite a design document: code, tests, scripts, docs."""
    skipped = ("tests/corpus", "bench/results")
    found = [ROOT / name for name in ("README.md", "CONTRIBUTING.md", "CHANGELOG.md")]
    for folder in ("history_proxy", "tests", "scripts", "bench", "docs"):
        for path in sorted((ROOT / folder).rglob("*")):
            relative = path.relative_to(ROOT).as_posix()
            if path.suffix in (".py", ".md") and not relative.startswith(skipped):
                found.append(path)
    return found


def test_every_citation_resolves_inside_the_clone() -> None:
    # written in pieces so that this line does not cite what it looks for
    spec, design, seeds_folder = "SP" + "EC", "DES" + "IGN", "shared" + "/seeds"
    outside = re.compile(rf"{spec} (section|invariant)|{spec}\.md|{design}\.md|{seeds_folder}|\bsection \d")
    seeds = {
        f"seed {number}"
        for number in re.findall(
            r"^## seed (\d{3})$", (ROOT / "docs" / "design-sources.md").read_text(encoding="utf-8"), re.M
        )
    }
    cited, unknown_seeds = [], []
    for path in cited_texts():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            where = f"{path.relative_to(ROOT)}:{number}"
            if outside.search(line):
                cited.append(where)
            unknown_seeds += [
                f"{where} {seed}" for seed in re.findall(r"\bseed \d{3}\b", line) if seed not in seeds
            ]
    assert cited == [], f"cite a page of docs/ instead: {cited}"
    assert seeds == {f"seed 00{n}" for n in range(5)}
    assert unknown_seeds == [], f"docs/design-sources.md has no section for {unknown_seeds}"


def test_filter_indexes_match_docs_filters() -> None:
    script = runpy.run_path(str(ROOT / "scripts" / "build_readme.py"))
    assert script["main"](["--check"]) == 0, "run: make readme"


def test_figures_quoted_in_the_docs_are_what_the_code_computes() -> None:
    script = runpy.run_path(str(ROOT / "scripts" / "docs_figures.py"))
    assert script["main"](["--check"]) == 0, "run: make docs-figures"


def test_every_filter_type_has_its_page_and_a_row_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name in FILTER_TYPES:
        page = ROOT / "docs" / "filters" / f"{name}.md"
        assert page.read_text(encoding="utf-8").startswith(f"### {name}\n")
        assert f"[`{name}`](docs/filters/{name}.md)" in readme
    rows = re.findall(r"^\| \[`\w+`\]\(docs/filters/\w+\.md\) \| (.+) \|$", readme, re.MULTILINE)
    assert len(rows) == len(FILTER_TYPES)
    cut = [row for row in rows if not row.endswith(".")]
    assert cut == [], "a filter's summary in the README stops short (issue 35, L8)"


def test_readme_first_code_block_holds_the_run_and_test_commands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("```", 2)[1]
    assert "make run" in block and "make test" in block
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "make test" in ci


def test_readme_is_a_front_page_and_the_reference_is_in_docs() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= README_MAX_LINES
    assert "(docs/README.md)" in readme
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    listed = {m for m in LINK.findall(index)}
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"README.md"}
    assert pages <= listed, f"docs/README.md does not list {sorted(pages - listed)}"


def test_license_changelog_and_version_agree() -> None:
    assert (ROOT / "LICENSE").read_text(encoding="utf-8").startswith("MIT License")
    version = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert re.search(rf"^## {re.escape(version)} ", changelog, re.MULTILINE), (
        f"CHANGELOG.md has no {version} entry"
    )


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors of a page."""
    found = set()
    for heading in re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    broken = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists() or (anchor and file.suffix == ".md" and anchor not in anchors(file)):
            broken.append(target)
    assert broken == []


# --- blocks that run ---------------------------------------------------------------------------


class AnyEnv(dict[str, str]):
    """Every ``${VAR}`` a doc's YAML names is set (to a placeholder)."""

    def get(self, key: str, default: Any = None) -> str:
        if key == "REDIS_URL":
            return "redis://127.0.0.1:6379/0"
        return super().get(key, "https://placeholder.invalid/v1" if key.endswith("URL") else "placeholder")


DOC_UPSTREAMS = ("openai", "anthropic", "claude", "primary", "backup", "cheap", "cheap-backup", "local")


def as_config(document: Any) -> Any:
    """A YAML block as a whole config: a fragment gets mock upstreams under the names docs use."""
    if isinstance(document, list):  # a chain
        document = {"policies": {"roles": {"r": document}}}
    if isinstance(document, dict) and "type" in document:  # one filter
        document = {"policies": {"roles": {"r": [document]}}}
    if isinstance(document, dict) and "upstreams" not in document:
        document = {"upstreams": {name: {"base_url": "mock://"} for name in DOC_UPSTREAMS}, **document}
    return document


@pytest.mark.parametrize("block", of("yaml", "yml"), ids=lambda b: b.id)
def test_yaml_blocks_are_valid_configs(block: Block) -> None:
    document = yaml.safe_load(block.code)
    try:
        parse_config(as_config(document), env=AnyEnv())
    except ConfigError as exc:
        pytest.fail(f"{block.id}: {exc.errors}")


@pytest.mark.parametrize("block", of("toml"), ids=lambda b: b.id)
def test_toml_blocks_parse(block: Block) -> None:
    tomllib.loads(block.code)


@pytest.mark.parametrize("block", of("json"), ids=lambda b: b.id)
def test_json_blocks_parse(block: Block) -> None:
    json.loads(block.code)


@pytest.fixture(scope="module")
def docs_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """`history-proxy serve` on the default config (the mock answers), as the docs start it."""
    log = tmp_path_factory.mktemp("docs-proxy") / "serve.log"
    yield from start("serve", "--mock", log=log, ready_path="/healthz")


def workdir(tmp_path: Path) -> Path:
    """The files the docs' shell blocks name, in a fresh directory."""
    corpus = ROOT / "tests" / "corpus"
    shutil.copy(corpus / "swe-agent-marshmallow-1867-fc.json", tmp_path / "conversation.json")
    shutil.copy(ROOT / "config" / "default.yaml", tmp_path / "my-config.yaml")
    (tmp_path / "broken.yaml").write_text(
        "upstreams: {openai: {base_url: 'mock://'}}\n"
        "policies: {roles: {worker: [{type: worker_view}, {type: last_n_observations, n: 0}]}}\n"
    )
    (tmp_path / "request.json").write_text(
        json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Hello"}]})
    )
    (tmp_path / ".venv").symlink_to(sys.prefix)  # the README's `. .venv/bin/activate`: this test's venv
    (tmp_path / "tests").symlink_to(ROOT / "tests")
    (tmp_path / "config").symlink_to(ROOT / "config")
    return tmp_path


def run_block(block: Block, server: Server, tmp_path: Path, command: list[str]) -> str:
    """Run a block (the docs' address rewritten to the server's) and return what it printed."""
    code = block.code.replace(DOCS_PORT, f"127.0.0.1:{server.port}")
    env = {**offline_env(), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    with subprocess.Popen(
        [*command, code],
        cwd=workdir(tmp_path),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: whatever a block leaves running is stopped
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=BLOCK_TIMEOUT_S)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
    assert process.returncode == 0, f"{block.id} failed:\n{stdout[-2000:]}\n{stderr[-3000:]}"
    return stdout + stderr


SHOWN = re.compile(r"^# (.+)$", re.MULTILINE)
PRINTED = re.compile(r"^\s*print\(.*\)\s+# (.+)$", re.MULTILINE)
"""``print(x)  # what it shows``: the comment is checked against the output (up to a ``...``)."""


@pytest.mark.parametrize("block", of("python"), ids=lambda b: b.id)
def test_python_blocks_run_against_the_proxy(block: Block, docs_proxy: Server, tmp_path: Path) -> None:
    output = run_block(block, docs_proxy, tmp_path, [sys.executable, "-c"])
    for shown in PRINTED.findall(block.code):
        assert shown.partition("...")[0].strip() in output, f"{block.id}: the docs say it prints {shown!r}"


@pytest.mark.parametrize("block", of("sh", "bash", "shell"), ids=lambda b: b.id)
def test_shell_blocks_run_against_the_proxy(block: Block, docs_proxy: Server, tmp_path: Path) -> None:
    output = run_block(block, docs_proxy, tmp_path, ["bash", "-euo", "pipefail", "-c"])
    for shown in SHOWN.findall(block.code):  # a whole-line comment in a shell block is the output shown
        assert shown.partition("...")[0].strip() in output, f"{block.id}: the docs say it prints {shown!r}"


def test_every_block_runs_or_says_why_not() -> None:
    unmarked = [
        b.id
        for b in BLOCKS
        if b.lang not in ("python", "sh", "bash", "shell", "yaml", "yml", "toml", "json", "text", "")
        and not b.illustrative
    ]
    assert unmarked == []
