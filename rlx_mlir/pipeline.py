"""The rlx pipeline from Python: `lower` takes a module from its stage down to `until`
through xDSL's `PassPipeline`, timing every pass and snapshotting every stage reached.

The stages (hir, mir, lir, llvm) and the passes that reach each one are defined one
layer down, in `rlx_mlir.passes.pipeline_stages` (the `rlx-lower` pass runs the same
list); they are re-exported here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass, PassPipeline

from rlx_mlir.core.abi import name_arguments
from rlx_mlir.ir import make_context
from rlx_mlir.passes.pipeline_stages import (
    DEFAULT_OPTIONS,
    STAGE_PASSES,
    STAGES,
    VECTOR_WIDTHS,
    PipelineOptions,
    check_int_option,
    is_planned,
    make_pass,
    stage_of,
    stage_passes,
)


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
    """Run the passes that take `module` (in place) from its stage to `until`.

    `snapshot(stage, module)` is called at every stage boundary reached (and for the
    input's own stage), e.g. to keep a clone of each stage.
    """
    ctx = ctx or make_context()
    name_arguments(module)  # hand-written modules may leave rlx.name / rlx.role out
    if snapshot is not None:
        snapshot(stage_of(module), module)
    stages = stage_passes(module, until, options)
    recorder = _StageRecorder([(stage, len(passes)) for stage, passes in stages], timings, snapshot)
    PassPipeline(tuple(p for _, passes in stages for p in passes), recorder).apply(ctx, module)
    return module


__all__ = [
    "STAGES",
    "STAGE_PASSES",
    "VECTOR_WIDTHS",
    "PipelineOptions",
    "Timings",
    "check_int_option",
    "is_planned",
    "lower",
    "make_pass",
    "stage_of",
]
