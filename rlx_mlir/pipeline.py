"""The rlx pipeline from Python: `lower` takes a module from its stage down to `until`
through xDSL's `PassPipeline`, timing every pass and snapshotting every stage reached.

The stages (hir, mir, lir, llvm) and the passes that reach each one are defined one
layer down, in `rlx_mlir.passes.pipeline_stages` (the `rlx-lower` pass runs the same
list); they are re-exported here.

This is the one module of the API layer that imports the passes (`tests/test_layers.py`):
what the rest of the API needs of them (the arena plan's sizes, the kernels' origins, the
ticket functions of the thread team, ...) is re-exported here too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import FunctionType, ModuleOp
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass, PassPipeline
from xdsl.pattern_rewriter import PatternRewriteWalker
from xdsl.utils.exceptions import PassFailedException

import rlx_mlir.dialects
import rlx_mlir.passes
from rlx_mlir.core.abi import name_arguments
from rlx_mlir.core.errors import GraphError
from rlx_mlir.core.locations import name_unlocated
from rlx_mlir.ir import make_context
from rlx_mlir.passes.convert_hir_to_mir import HIR_TO_MIR
from rlx_mlir.passes.lir_plan_arena import planned_bytes
from rlx_mlir.passes.lir_to_llvm.dynamic import is_dynamic
from rlx_mlir.passes.lir_to_llvm.kernels import reads_dims, runtime_dims_kernels
from rlx_mlir.passes.lir_to_llvm.parallel import build_ticket_functions
from rlx_mlir.passes.lir_to_llvm.profile import kernel_origins
from rlx_mlir.passes.phases import PHASE_ATTR, Phase, entry_function, function_phases
from rlx_mlir.passes.pipeline_stages import (
    DEFAULT_OPTIONS,
    STAGE_ATTR,
    STAGE_PASSES,
    STAGES,
    VECTOR_WIDTHS,
    PipelineOptions,
    check_int_option,
    is_planned,
    make_pass,
    mark_stage,
    stage_of,
    stage_passes,
)
from rlx_mlir.passes.utils import fn_symbols


@dataclass
class Timings:
    """Seconds spent per pass (and in LLVM), in order, like --time-passes."""

    entries: list[tuple[str, float]] = field(default_factory=list)

    def add(self, name: str, seconds: float) -> None:
        self.entries.append((name, seconds))

    def report(self) -> str:
        total = sum(s for _, s in self.entries) or 1e-12
        lines = [f"{'pass':<28}{'ms':>10}{'%':>8}"]
        lines += [f"{n:<28}{s * 1e3:>10.1f}{100 * s / total:>8.1f}" for n, s in self.entries]
        lines.append(f"{'total':<28}{total * 1e3:>10.1f}")
        return "\n".join(lines)


Snapshot = Callable[[str, ModuleOp], None]


class _StageRecorder:
    """The `PassPipeline` callback of `lower`: times each pass as it finishes and calls
    `snapshot` after the last pass of every stage."""

    def __init__(self, stages: list[tuple[str, int]], timings: Timings | None,
                 snapshot: Snapshot | None):
        ends, count = {}, 0
        for stage, passes in stages:
            count += passes
            ends[count] = stage
        self.stage_ends = ends
        """Number of passes run -> the stage reached then."""
        self.timings = timings
        self.snapshot = snapshot
        self.finished = 0
        self.start = time.perf_counter()

    def __call__(self, previous: ModulePass | None, module: ModuleOp, _next: ModulePass | None) -> None:
        if previous is not None:
            if self.timings is not None:
                self.timings.add(previous.name, time.perf_counter() - self.start)
            self.finished += 1
            stage = self.stage_ends.get(self.finished)
            if stage is not None and self.snapshot is not None:
                self.snapshot(stage, module)
        self.start = time.perf_counter()  # a snapshot's time is not the next pass's


def lower(module: ModuleOp, until: str = "llvm", options: PipelineOptions = DEFAULT_OPTIONS,
          *, ctx: Context | None = None, timings: Timings | None = None,
          snapshot: Snapshot | None = None) -> ModuleOp:
    """Run the passes that take `module` (in place) from its stage to `until`. A module
    left at mir is marked `rlx.stage = "mir"` (`stage_of` reads it back).

    `snapshot(stage, module)` is called at every stage boundary reached (and for the
    input's own stage), e.g. to keep a clone of each stage.
    """
    ctx = ctx or make_context()
    name_arguments(module)  # hand-written modules may leave rlx.name / rlx.role out
    name_unlocated(module)  # and the ops' locations: every kernel gets an origin
    if snapshot is not None:
        snapshot(stage_of(module), module)
    stages = stage_passes(module, until, options)
    if not stages:
        return module
    mark_stage(module, "hir")  # drops an `rlx.stage` mark: it said where to start
    recorder = _StageRecorder([(stage, len(passes)) for stage, passes in stages], timings, snapshot)
    PassPipeline(tuple(p for _, passes in stages for p in passes), recorder).apply(ctx, module)
    mark_stage(module, stages[-1][0])  # a module left at mir says so (`STAGE_ATTR`)
    return module


def lower_stages(module: ModuleOp, options: PipelineOptions,
                 timings: Timings | None = None) -> dict[str, ModuleOp]:
    """Lower `module` (in place) to llvm; a clone of it at every stage reached. A pass
    that fails is a GraphError (`lower_checked`)."""
    stages: dict[str, ModuleOp] = {}
    lower_checked(module, "llvm", options, timings=timings,
                  snapshot=lambda stage, m: stages.__setitem__(stage, m.clone()))
    return stages


def lower_checked(module: ModuleOp, until: str, options: PipelineOptions,
                  timings: Timings | None = None, snapshot: Snapshot | None = None) -> ModuleOp:
    """`lower`, where a pass that fails is a GraphError naming the pass and the op
    (without the IR dump)."""
    try:
        return lower(module, until, options, ctx=make_context(), timings=timings, snapshot=snapshot)
    except PassFailedException as err:  # its message names the pass and the op; the IR dump goes
        raise GraphError(str(err.args[0] if err.args else err).split("\n")[0]) from None


def source_folders() -> list[Path]:
    """The folders of the compiler's own source (the API, the dialects, the passes)."""
    folders = [Path(__file__).resolve().parent]
    for package in (rlx_mlir.dialects, rlx_mlir.passes):
        folders += [Path(folder) for folder in package.__path__]
    return folders


__all__ = [
    "PHASE_ATTR",
    "Phase",
    "entry_function",
    "function_phases",
    "STAGES",
    "STAGE_ATTR",
    "build_ticket_functions",
    "fn_symbols",
    "is_dynamic",
    "kernel_origins",
    "lower_checked",
    "lower_stages",
    "planned_bytes",
    "reads_dims",
    "runtime_dims_kernels",
    "source_folders",
    "STAGE_PASSES",
    "VECTOR_WIDTHS",
    "PipelineOptions",
    "Timings",
    "check_int_option",
    "expand_hir",
    "is_planned",
    "lower",
    "make_pass",
    "stage_of",
]


# ----------------------------------------------------------------------------- autodiff


def expand_hir(op: Operation) -> tuple[list[Operation], list[SSAValue]]:
    """The mir ops convert-hir-to-mir expands the hir op `op` into, detached, reading
    `op`'s own operands, and the values that stand for `op`'s results (reverse-mode
    differentiates an hir block through its expansion: `rlx_mlir.autodiff.core`)."""
    block = Block(arg_types=[o.type for o in op.operands])
    clone = op.clone(value_mapper=dict(zip(op.operands, block.args, strict=True)))
    block.add_op(clone)
    block.add_op(func.ReturnOp(*clone.results))
    scratch = func.FuncOp("expand", FunctionType.from_lists(
        list(block.arg_types), [r.type for r in clone.results]), Region(block))
    PatternRewriteWalker(HIR_TO_MIR[type(op)](), apply_recursively=False).rewrite_module(
        ModuleOp([scratch]))
    ret = block.last_op
    assert isinstance(ret, func.ReturnOp)
    results = list(ret.arguments)
    ret.detach()
    ret.erase()
    for arg, operand in zip(block.args, op.operands, strict=True):
        arg.replace_all_uses_with(operand)
    ops = list(block.ops)
    for expanded in ops:
        expanded.detach()
    return ops, results
