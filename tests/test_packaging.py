"""Packaging: every Python package of the repository is installed under rlx_mlir."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_is_declared():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    declared = set(config["packages"])
    package_dir = config["package-dir"]
    found = set()
    for name, folder in package_dir.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([name, *rel.parts]))
    assert found <= declared, f"packages missing from pyproject.toml: {sorted(found - declared)}"
    assert all(p == "rlx_mlir" or p.startswith("rlx_mlir.") for p in declared)
