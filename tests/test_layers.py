"""The package layers import only downwards:

    core (rlx_mlir/core) < dialects < passes (with passes/lir_to_llvm) < API (rest of rlx_mlir) < tools

A module may import its own layer and the layers below it at module level; a function may
import upwards only where that is unavoidable (listed in `LAZY_UPWARD_IMPORTS`, each with
a comment at the import saying why).
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
