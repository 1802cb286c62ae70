"""rlx-lower: the whole pipeline, from whatever stage the module is at down to llvm."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from rlx_mlir.core.abi import name_arguments
from rlx_mlir.passes.pipeline_stages import PipelineOptions, stage_pipeline


@dataclass(frozen=True)
class RlxLowerPass(ModulePass):
    """convert-hir-to-mir, canonicalize, cse, mir-fuse, convert-mir-to-lir, lir-plan-arena,
    lir-pack-weights, lir-parallelize, convert-lir-to-llvm — the passes a module at its
    stage still needs, in order (`rlx_mlir.passes.pipeline_stages`)."""

    name = "rlx-lower"

    alignment: int = 64
    """lir-plan-arena: byte alignment of every arena slot."""
    strategy: str = "greedy-by-size"
    """lir-plan-arena: greedy-by-size or naive."""
    vector_width: int = 0
    """convert-lir-to-llvm: f32 lanes per vector, 0 for the target's."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        options = PipelineOptions(self.alignment, self.strategy, self.vector_width)
        name_arguments(op)  # hand-written modules may leave rlx.name / rlx.role out
        stage_pipeline(op, "llvm", options).apply(ctx, op)
