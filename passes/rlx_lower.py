"""rlx-lower: the whole pipeline, from whatever stage the module is at down to llvm."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from rlx_mlir.core.abi import name_arguments
from rlx_mlir.core.locations import name_unlocated
from rlx_mlir.passes.pipeline_stages import (
    DEFAULT_OPTIONS,
    PASS_OPTIONS,
    PipelineOptions,
    mark_stage,
    options_from,
    stage_pipeline,
)


@dataclass(frozen=True)
class RlxLowerPass(ModulePass):
    """convert-hir-to-mir, canonicalize, cse, mir-fuse, convert-mir-to-lir, lir-plan-arena,
    lir-pack-weights, lir-parallelize, convert-lir-to-llvm — the passes a module at its
    stage still needs, in order (`rlx_mlir.passes.pipeline_stages`), each given the
    options of the pipeline it takes. With every option of a `jit` build
    (`model.options.pipeline()`), it gives that build's `model.mlir("llvm")`."""

    name = "rlx-lower"

    alignment: int = DEFAULT_OPTIONS.alignment
    """lir-plan-arena: byte alignment of every arena slot."""
    strategy: str = DEFAULT_OPTIONS.strategy
    """lir-plan-arena: greedy-by-size or naive."""
    vector_width: int = DEFAULT_OPTIONS.vector_width
    """convert-lir-to-llvm: f32 lanes per vector, 0 for the target's."""
    params: tuple[str, ...] = DEFAULT_OPTIONS.packed_params
    """lir-pack-weights: the params bound at compile time (packed at bind time)."""
    max_dims: str = DEFAULT_OPTIONS.max_dims
    """lir-plan-arena: the symbols' bounds, `S=2048,T=512`."""
    profile: bool = DEFAULT_OPTIONS.profile
    """convert-lir-to-llvm: the instrumented build (time stamps around kernel calls)."""
    target: str = DEFAULT_OPTIONS.target
    """convert-lir-to-llvm: the target spec (`haswell`, `cpu:+feat,-feat`); "" for the
    module's `rlx.target`, else the generic x86-64."""
    matmul_epilogue: bool = DEFAULT_OPTIONS.fusion.matmul_epilogue
    """mir-fuse: fold bias and activation into the matmul (`rlx.FusionPolicy`)."""
    elementwise: bool = DEFAULT_OPTIONS.fusion.elementwise
    """mir-fuse: fuse trees of elementwise ops."""
    fuse_broadcast: bool = DEFAULT_OPTIONS.fusion.broadcast
    """mir-fuse: let elementwise trees take in broadcast values."""
    shared_input: bool = DEFAULT_OPTIONS.fusion.shared_input
    """mir-fuse: merge sibling matmuls on the same input."""
    q8_edges: bool = DEFAULT_OPTIONS.fusion.q8_edges
    """mir-fuse: fold an rms_norm and a residual add into the q8 products around them."""

    def __post_init__(self) -> None:
        self.options  # a bad value fails when the pipeline is built, naming the option  # noqa: B018

    @property
    def options(self) -> PipelineOptions:
        """This pass's options as the pipeline's (an OptionError for a bad value)."""
        return options_from({source: getattr(self, field)
                             for field, source in PASS_OPTIONS[self.name].items()})

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        name_arguments(op)  # hand-written modules may leave rlx.name / rlx.role out
        name_unlocated(op)  # and the ops' locations: every kernel gets an origin
        pipeline = stage_pipeline(op, "llvm", self.options)
        mark_stage(op, "llvm")  # an `rlx.stage` mark says where the pipeline starts, not ends
        pipeline.apply(ctx, op)
