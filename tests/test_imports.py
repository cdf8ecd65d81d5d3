"""The package's shape: each package imports only the packages below it, and nothing imports itself back.

The order is declared once, in `BELOW`, and drawn in docs/design.md ("Layers"). Imports are read
from the source (ast): at module level, inside functions and under `if TYPE_CHECKING:` alike, and
`importlib.import_module("bootstrap....")` with a literal prefix too. A deferred import that closes
a cycle is a cycle all the same, and a type-only import ties a module to the one it names just as
much for a type checker, a reader and the next refactoring.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path
from typing import Mapping, Optional

from tests.fixtures import REPO

PACKAGE = REPO / "bootstrap"
SHARED = "shared"  # the top-level modules listed in SHARED_MODULES
TOP = "commands"  # with bootstrap.cli and bootstrap.__main__: the command line
# Each layer -> the layers right below it. A layer may import its own modules and everything its
# layers below reach; nothing above it. docs/design.md draws the same graph.
BELOW: dict[str, tuple] = {
    SHARED: (),
    "compat": (SHARED,),
    "lock": ("compat",),
    "install": ("lock",),
    "export": ("install",),
    "bench": ("compat",),
    "checks": ("bench", "install"),
    "monitor": ("compat",),
    TOP: ("export", "checks", "monitor"),
}
# The vocabulary every package may use: one module per noun, below every folder.
SHARED_MODULES = (
    "bootstrap",  # __init__: the version
    "bootstrap.aio",
    "bootstrap.errors",
    "bootstrap.fsutil",
    "bootstrap.platforms",
    "bootstrap.prefix",
    "bootstrap.project",
    "bootstrap.report",
    "bootstrap.runner",
    "bootstrap.torchrun",
    "bootstrap.urls",
    "bootstrap.yamlfile",
)
COMMAND_LINE = ("bootstrap.cli", "bootstrap.__main__")
# The package's own lazy `__getattr__` (PEP 562) hands a training script the benchmark's Python API,
# `from bootstrap import tune_loader`. It runs on first attribute access, never when a module imports the
# package, so it ties no layer to another; it is the one import allowed to reach up from the shared layer,
# and only to these modules (test_the_package_hands_out_only_the_bench_api_and_only_on_first_use).
FACADE_MODULE, FACADE_FUNCTION, FACADE_TARGETS = "bootstrap", "__getattr__", {"bootstrap.bench"}


# --------------------------------------------------------------------------- reading the imports


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path = REPO) -> dict[str, Path]:
    """Every module of the `bootstrap` package under `root`, by dotted name."""
    return {module_name(path, root): path for path in sorted((root / "bootstrap").rglob("*.py"))}


def _known(name: str, known: set[str]) -> Optional[str]:
    """`name`, or the nearest package above it, among the known modules (`bootstrap.x.y` of an
    f-string's prefix `bootstrap.x.y.` is that package)."""
    name = name.rstrip(".")
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _dynamic(node: ast.Call) -> Optional[str]:
    """The literal start of `importlib.import_module(...)`'s or `__import__(...)`'s first argument."""
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if called not in ("import_module", "__import__") or not node.args:
        return None
    arg = node.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr) and arg.values:
        first = arg.values[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            return first.value
    return None


def imports_of(name: str, path: Path, known: set[str], skip_function: Optional[str] = None) -> set[str]:
    """The bootstrap modules that module `name` (at `path`) imports, resolved to modules (`from
    bootstrap.install import store` is bootstrap.install.store), wherever the import statement is, except
    inside the module-level function `skip_function`."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = {
        id(inner)
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name == skip_function
        for inner in ast.walk(node)
    }
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: `from ..checks import doctor` in bootstrap.bench.plot
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([node.module] if node.module else []))
            for alias in node.names:
                child = f"{base}.{alias.name}"
                found.add(child if child in known else base)
        elif isinstance(node, ast.Call):
            target = _dynamic(node)
            if target is not None:
                found.add(target)
    resolved = {_known(target, known) for target in found if target.split(".")[0] == "bootstrap"}
    return {target for target in resolved if target is not None} - {name}


def import_graph(root: Path = REPO) -> dict[str, set[str]]:
    """Every module's imports, the package's lazy API (FACADE_FUNCTION) left out."""
    known = modules(root)
    skip = {FACADE_MODULE: FACADE_FUNCTION}
    return {name: imports_of(name, path, set(known), skip.get(name)) for name, path in known.items()}


# --------------------------------------------------------------------------- judging them


def layer_of(module: str) -> Optional[str]:
    """The layer of `bootstrap.x...`: its package folder, `shared` for the listed top-level modules,
    the command line's for cli and __main__; None for a top-level module that has no place yet."""
    if module in SHARED_MODULES:
        return SHARED
    if module in COMMAND_LINE:
        return TOP
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in BELOW else None


def reachable(layer: str, below: Mapping[str, tuple] = BELOW) -> set[str]:
    """The layers `layer` may import: itself and every layer under it."""
    seen = {layer}
    todo = [layer]
    while todo:
        for lower in below[todo.pop()]:
            if lower not in seen:
                seen.add(lower)
                todo.append(lower)
    return seen


def upward_imports(graph: Mapping[str, set[str]]) -> list[str]:
    """'importer -> imported (X may not import Y)' for every import that goes up or sideways between
    layers, and for every module that has no layer."""
    found = []
    for module, targets in sorted(graph.items()):
        layer = layer_of(module)
        if layer is None:
            found.append(f"{module}: no layer (add it to SHARED_MODULES or move it into a package)")
            continue
        allowed = reachable(layer)
        for target in sorted(targets):
            if layer_of(target) not in allowed:
                found.append(f"{module} -> {target} ({layer} may not import {layer_of(target)})")
    return found


def layer_graph(graph: Mapping[str, set[str]]) -> dict[str, set[str]]:
    """The module graph collapsed to layers (a module without one stands for itself)."""
    out: dict[str, set[str]] = {}
    for module, targets in graph.items():
        layer = layer_of(module) or module
        out.setdefault(layer, set()).update((layer_of(t) or t) for t in targets)
        for target in targets:
            out.setdefault(layer_of(target) or target, set())
    return {layer: targets - {layer} for layer, targets in out.items()}


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = stack[stack.index(node) :]  # `node` and all above it on the stack
            del stack[stack.index(node) :]
            on_stack.difference_update(component)
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


# --------------------------------------------------------------------------- the package


def test_every_package_and_top_level_module_has_its_layer() -> None:
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(BELOW) - {SHARED}, "each package folder is placed in BELOW"
    top_level = {module_name(path, REPO) for path in PACKAGE.glob("*.py")}
    assert top_level == set(SHARED_MODULES) | set(COMMAND_LINE)


def test_the_declared_order_is_a_tree_of_layers_with_the_command_line_on_top() -> None:
    assert cycles({layer: set(lower) for layer, lower in BELOW.items()}) == []
    assert reachable(TOP) == set(BELOW)
    assert all(SHARED in reachable(layer) for layer in BELOW)


def test_no_package_imports_one_above_it_or_beside_it() -> None:
    assert upward_imports(import_graph()) == []


def test_the_package_has_no_import_cycle() -> None:
    assert cycles(import_graph()) == []


def test_no_cycle_between_packages() -> None:
    assert cycles(layer_graph(import_graph())) == []


def test_the_package_hands_out_only_the_bench_api_and_only_on_first_use() -> None:
    """What the graph leaves out of the package's `__init__` is its lazy `__getattr__`, and that imports
    the bench's public face alone (tests/test_package.py checks that `import bootstrap` does not)."""
    known, path = set(modules()), PACKAGE / "__init__.py"
    lazy = imports_of(FACADE_MODULE, path, known) - imports_of(FACADE_MODULE, path, known, FACADE_FUNCTION)
    assert lazy == FACADE_TARGETS
    assert all(layer_of(target) == SHARED for target in import_graph()[FACADE_MODULE])


def test_the_core_never_imports_the_command_line() -> None:
    core = {name: targets for name, targets in import_graph().items() if layer_of(name) != TOP}
    offenders = {name: sorted(t for t in targets if layer_of(t) == TOP) for name, targets in core.items()}
    assert {name: targets for name, targets in offenders.items() if targets} == {}


# --------------------------------------------------------------------------- the checker itself


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]


def _plant(path: Path, text: str) -> None:
    path.write_text(path.read_text(encoding="utf-8") + "\n" + text, encoding="utf-8")


def test_the_checker_finds_imports_planted_into_a_copy_of_the_package(tmp_path: Path) -> None:
    """Each way of importing upward, or back, that the package never uses yet is still seen."""
    shutil.copytree(PACKAGE, tmp_path / "bootstrap", ignore=shutil.ignore_patterns("__pycache__"))
    copy = tmp_path / "bootstrap"
    assert upward_imports(import_graph(tmp_path)) == [] and cycles(import_graph(tmp_path)) == []

    # upward, deferred into a function
    _plant(copy / "compat" / "pick.py", "def _planted():\n    from bootstrap.checks.doctor import run_doctor\n")
    # type-only, and closing a cycle between modules of one package
    _plant(copy / "install" / "fetch.py", "if TYPE_CHECKING:\n    from bootstrap.install.bundle import Bundle\n")
    # type-only and upward, from a shared module: a cycle between layers too
    _plant(
        copy / "yamlfile.py", "import typing\nif typing.TYPE_CHECKING:\n    from bootstrap.lock.spec import EnvSpec\n"
    )
    # sideways, relative
    _plant(copy / "bench" / "plot.py", "def _planted():\n    from ..monitor import log\n")
    # upward, by name
    _plant(copy / "monitor" / "log.py", "def _planted():\n    importlib.import_module(f'bootstrap.commands.{x}')\n")
    # a top-level module without a layer
    (copy / "helpers.py").write_text("from bootstrap import errors\n", encoding="utf-8")

    graph = import_graph(tmp_path)
    assert upward_imports(graph) == [
        "bootstrap.bench.plot -> bootstrap.monitor.log (bench may not import monitor)",
        "bootstrap.compat.pick -> bootstrap.checks.doctor (compat may not import checks)",
        "bootstrap.helpers: no layer (add it to SHARED_MODULES or move it into a package)",
        "bootstrap.monitor.log -> bootstrap.commands (monitor may not import commands)",
        "bootstrap.yamlfile -> bootstrap.lock.spec (shared may not import lock)",
    ]
    found = cycles(graph)
    assert ["bootstrap.install.bundle", "bootstrap.install.fetch"] in found
    assert any({"bootstrap.yamlfile", "bootstrap.lock.spec"} <= set(cycle) for cycle in found), found
    assert any({SHARED, "lock"} <= set(cycle) for cycle in cycles(layer_graph(graph)))
