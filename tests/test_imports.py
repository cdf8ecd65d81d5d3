"""The package's shape: no import cycle, and the core never imports the CLI.

Imports are read from the source (ast), at module level and inside functions
alike, since a deferred import that closes a cycle is a cycle all the same;
only `if TYPE_CHECKING:` blocks are left out, as they never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.fixtures import REPO

PACKAGE = REPO / "bootstrap"
CLI = ("bootstrap.cli", "bootstrap.__main__", "bootstrap.commands")
# Generated from ../shared/reference/cuda_compat.yml by scripts/gen_compat_data.py: tables, not code to read.
GENERATED = ("bootstrap/compat/data.py",)


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The bootstrap modules `path` imports, resolved to modules (`from bootstrap.install import store`
    is bootstrap.install.store), outside `if TYPE_CHECKING:` blocks."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == "bootstrap")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "bootstrap":
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                found.add(child if child in known else node.module)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return {name for name in found if name in known}


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(path, set(known)) - {name} for name, path in known.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def test_the_package_has_no_import_cycle() -> None:
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_core_never_imports_the_command_line() -> None:
    core = {name: targets for name, targets in import_graph().items() if not name.startswith(CLI)}
    offenders = {name: sorted(t for t in targets if t.startswith(CLI)) for name, targets in core.items()}
    assert {name: targets for name, targets in offenders.items() if targets} == {}


def test_the_top_level_holds_the_cli_a_few_shared_modules_and_the_noun_folders() -> None:
    files = sorted(p.name for p in PACKAGE.glob("*.py"))
    folders = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists())
    assert len(files) <= 12, files
    assert {"lock", "install", "checks", "compat", "bench", "commands"} <= set(folders), folders
