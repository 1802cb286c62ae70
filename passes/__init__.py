"""rlx-mlir passes, one module per pass, named after the pass (`convert_hir_to_mir.py`
for `convert-hir-to-mir`); the llvm kernel generators of `convert-lir-to-llvm` live
beside it in `lir_to_llvm/`, and the stages of the whole pipeline in
`pipeline_stages.py`."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable

from xdsl.passes import ModulePass

_PASSES: dict[str, tuple[str, str]] = {
    "convert-hir-to-mir": ("convert_hir_to_mir", "ConvertHirToMirPass"),
    "mir-fuse": ("mir_fuse", "MirFusePass"),
    "mir-inline-functions": ("mir_inline_functions", "MirInlineFunctionsPass"),
    "convert-mir-to-lir": ("convert_mir_to_lir", "ConvertMirToLirPass"),
    "lir-plan-arena": ("lir_plan_arena", "LirPlanArenaPass"),
    "lir-pack-weights": ("lir_pack_weights", "LirPackWeightsPass"),
    "lir-parallelize": ("lir_parallelize", "LirParallelizePass"),
    "convert-lir-to-llvm": ("convert_lir_to_llvm", "ConvertLirToLlvmPass"),
    "rlx-lower": ("rlx_lower", "RlxLowerPass"),
}
"""Pass name -> (module in rlx_mlir.passes, class name)."""


def _factory(module: str, cls: str) -> Callable[[], type[ModulePass]]:
    def load() -> type[ModulePass]:
        return getattr(importlib.import_module(f"rlx_mlir.passes.{module}"), cls)

    return load


def get_all_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """Lazy factories of the rlx passes that exist, by pass name (imported on first use)."""
    found = {}
    for name, (module, cls) in _PASSES.items():
        if importlib.util.find_spec(f"rlx_mlir.passes.{module}") is not None:
            found[name] = _factory(module, cls)
    return found
