"""rlx-mlir passes, one module per pass, named after the pass (`convert_hir_to_mir.py`
for `convert-hir-to-mir`)."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.passes import ModulePass


def get_all_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """Lazy factories of the rlx passes, by pass name (imported on first use)."""
    return {}
