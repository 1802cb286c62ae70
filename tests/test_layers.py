"""The package layers import only downwards:

    core (rlx_mlir/core) < dialects < passes (with passes/lir_to_llvm) < API (rest of rlx_mlir) < tools

A module may import its own layer and the layers below it at module level; a function may
import upwards only where that is unavoidable (listed in `LAZY_UPWARD_IMPORTS`, each with
a comment at the import saying why).

The package's import graph (every import, function-local ones included, `TYPE_CHECKING`
ones not) has no cycle, and the API layer reaches the passes only through
`rlx_mlir/pipeline.py`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

LAYERS = ("core", "dialects", "passes", "api", "tools")
"""From the bottom up."""

FOLDERS = {"rlx_mlir/core": "core", "dialects": "dialects", "passes": "passes",
           "rlx_mlir": "api", "tools": "tools"}
"""Source folder -> layer (the most specific folder wins: rlx_mlir/core before rlx_mlir)."""

PACKAGES = {"rlx_mlir.core": "core", "rlx_mlir.dialects": "dialects", "rlx_mlir.passes": "passes",
            "rlx_mlir.tools": "tools", "rlx_mlir": "api"}
"""Imported package -> layer (longest prefix wins)."""

LAZY_UPWARD_IMPORTS: set[tuple[str, str]] = set()
"""(file, imported module) of the function-local imports that go upwards on purpose."""


def layer_of_file(path: Path) -> str:
    relative = path.relative_to(ROOT).as_posix()
    folder = max((f for f in FOLDERS if relative.startswith(f + "/")), key=len)
    return FOLDERS[folder]


def layer_of_module(module: str) -> str | None:
    """The layer of an imported module, None outside rlx_mlir."""
    for package in sorted(PACKAGES, key=len, reverse=True):
        if module == package or module.startswith(package + "."):
            return PACKAGES[package]
    return None


def source_files() -> list[Path]:
    files = []
    for folder in FOLDERS:
        files += [p for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts]
    return sorted(set(files))


def imports(tree: ast.Module) -> Iterator[tuple[ast.stmt, str, bool]]:
    """(statement, imported module, at module level) for every import of rlx_mlir; names
    imported from a package count as its submodules (`from rlx_mlir.dialects import lir`)."""

    def visit(node: ast.AST, top: bool) -> Iterator[tuple[ast.stmt, str, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield child, alias.name, top
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                for alias in child.names:
                    yield child, f"{child.module}.{alias.name}", top
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                continue  # typing-only imports never run
            else:
                inside_function = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
                yield from visit(child, top and not inside_function)

    yield from visit(tree, True)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def upward_imports(top_level: bool) -> list[str]:
    found = []
    for path in source_files():
        own = LAYERS.index(layer_of_file(path))
        tree = ast.parse(path.read_text(), str(path))
        for statement, module, top in imports(tree):
            layer = layer_of_module(module)
            if top == top_level and layer is not None and LAYERS.index(layer) > own:
                found.append(f"{path.relative_to(ROOT)}:{statement.lineno}: {layer_of_file(path)} "
                             f"imports {module} ({layer})")
    return found


def test_the_layer_map_covers_every_source_file():
    layers = {layer_of_file(p) for p in source_files()}
    assert layers == set(LAYERS)
    assert layer_of_file(ROOT / "rlx_mlir/core/abi.py") == "core"
    assert layer_of_file(ROOT / "passes/lir_to_llvm/vmath.py") == "passes"
    assert layer_of_module("rlx_mlir.passes.lir_to_llvm.matmul") == "passes"
    assert layer_of_module("rlx_mlir") == "api"
    assert layer_of_module("numpy") is None


def test_no_module_level_import_goes_up_a_layer():
    assert upward_imports(top_level=True) == []


def test_function_local_upward_imports_are_the_listed_ones():
    found = {(line.split(":")[0], line.split(" imports ")[1].split(" ")[0])
             for line in upward_imports(top_level=False)}
    assert found == LAZY_UPWARD_IMPORTS


@pytest.mark.parametrize("path", [p for p in source_files() if layer_of_file(p) == "core"],
                         ids=lambda p: p.name)
def test_core_imports_nothing_of_rlx_mlir_outside_core(path):
    tree = ast.parse(path.read_text(), str(path))
    outside = [module for _, module, _ in imports(tree)
               if layer_of_module(module) not in (None, "core")]
    assert outside == []


# ----------------------------------------------------------------------------- the import graph

PACKAGE_FOLDERS = {"rlx_mlir": "rlx_mlir", "dialects": "rlx_mlir.dialects",
                   "passes": "rlx_mlir.passes", "tools": "rlx_mlir.tools"}
"""Source folder -> the package it installs as (pyproject's package-dir)."""


def module_name(path: Path) -> str:
    """The dotted name `path` imports as (`passes/lir_to_llvm/kernels.py` ->
    `rlx_mlir.passes.lir_to_llvm.kernels`; a package's `__init__.py` -> the package)."""
    relative = path.relative_to(ROOT)
    package = PACKAGE_FOLDERS[relative.parts[0]]
    parts = list(relative.with_suffix("").parts[1:])
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join([package, *parts])


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (every import, function-local ones
    included, `TYPE_CHECKING` ones not; `from pkg import name` imports `pkg.name` when
    that is a module, else `pkg`; relative imports resolved)."""
    files = {module_name(p): p for p in source_files()}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = graph.setdefault(name, set())
        for node in _runtime_imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base
                           for a in node.names]
            edges |= {t for t in targets if t in files and t != name}
    return graph


def _runtime_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            yield from (n for s in child.orelse for n in _runtime_imports(ast.Module([s], [])))
        else:
            yield from _runtime_imports(child)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph` (its modules, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_import_graph_sees_every_kind_of_import():
    graph = import_graph()
    assert "rlx_mlir.passes.lir_to_llvm.kernels" in graph
    assert "rlx_mlir.core.abi" in graph["rlx_mlir.compiler"]  # from ... import names
    assert "rlx_mlir.dialects.lir" in graph["rlx_mlir.state"]  # from pkg import module
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    assert tangles({"a": {"b"}, "b": {"a", "c"}, "c": {"d"}, "d": {"c"}, "e": {"a"}}) == [
        {"a", "b"}, {"c", "d"}]


def tangles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module: each holds a cycle."""
    found: list[set[str]] = []
    remaining = dict(graph)
    while (cycle := find_cycle(remaining)) is not None:
        reach = {m: _reachable(remaining, m) for m in cycle}
        component = {m for m in remaining if m in reach[cycle[0]] and cycle[0] in _reachable(remaining, m)}
        found.append(component)
        remaining = {m: e - component for m, e in remaining.items() if m not in component}
    return found


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_no_import_cycle_in_the_package():
    graph = import_graph()
    cycles = tangles(graph)
    assert not cycles, "import cycle: " + " -> ".join(
        find_cycle({m: e & cycles[0] for m, e in graph.items() if m in cycles[0]}) or [])


PIPELINE_MODULE = "rlx_mlir.pipeline"
"""The one API module that imports the passes: the rest of the API reaches them through it."""


def test_the_api_imports_the_passes_only_through_the_pipeline_module():
    importers = {name: sorted(m for m in edges if layer_of_module(m) == "passes")
                 for name, edges in import_graph().items()
                 if layer_of_module(name) == "api"}
    assert {name for name, passes in importers.items() if passes} == {PIPELINE_MODULE}


def private_reads_from_elsewhere(path: Path) -> list[str]:
    """`obj._name` in `path` where `obj` is not `self`/`cls` and no code of the same file
    defines `_name` (as `self._name`, a method, or a class): a read of another module's
    private member; and `from rlx_mlir... import _name`."""
    tree = ast.parse(path.read_text(), str(path))
    own = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
           and isinstance(n.value, ast.Name) and n.value.id in ("self", "cls")}
    own |= {n.name for n in ast.walk(tree)
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not node.attr.startswith("__") and node.attr not in own
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls", "os"))):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rlx_mlir"):
            found += [f"{path.relative_to(ROOT)}:{node.lineno}: from {node.module} import {a.name}"
                      for a in node.names if a.name.startswith("_") and a.name != "__version__"]
    return found


def test_no_module_reads_another_modules_private_members():
    found = [line for p in source_files() if layer_of_file(p) in ("core", "api")
             for line in private_reads_from_elsewhere(p)]
    assert found == []
