"""The rlx pipeline: which passes take a module from each stage to the next.

| stage  | reached after                                               |
|--------|-------------------------------------------------------------|
| `hir`  | the Graph builder (hir blocks and mir primitives on tensors) |
| `mir`  | convert-hir-to-mir, canonicalize, cse, mir-fuse             |
| `lir`  | convert-mir-to-lir, lir-plan-arena, lir-pack-weights        |
| `llvm` | convert-lir-to-llvm                                         |
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects import func, llvm
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from rlx_mlir.core.errors import OptionError
from rlx_mlir.dialects import lir
from rlx_mlir.dialects.rlx import ArenaStrategy
from rlx_mlir.ir import make_context
from rlx_mlir.signature import name_arguments

STAGES = ("hir", "mir", "lir", "llvm")

STAGE_PASSES: dict[str, tuple[str, ...]] = {
    "mir": ("convert-hir-to-mir", "canonicalize", "cse", "mir-fuse"),
    "lir": ("convert-mir-to-lir", "lir-plan-arena", "lir-pack-weights"),
    "llvm": ("convert-lir-to-llvm",),
}
"""The passes that produce each stage from the one before."""


@dataclass(frozen=True)
class PipelineOptions:
    """Options of the passes of the pipeline."""

    alignment: int = 64
    """lir-plan-arena: byte alignment of every arena slot."""
    strategy: str = "greedy-by-size"
    """lir-plan-arena: greedy-by-size (reuse) or naive (no reuse)."""
    vector_width: int = 0
    """convert-lir-to-llvm: f32 lanes per vector, 0 for the target's."""
    packed_params: tuple[str, ...] = ()
    """lir-pack-weights: the params bound at compile time (packed once at bind time)."""

    def __post_init__(self) -> None:
        """Refuse a bad option up front, with the valid values (not mid-pipeline)."""
        check_int_option("alignment", self.alignment, "a power of two >= 1",
                         lambda a: a >= 1 and not a & (a - 1))
        strategies = [s.value for s in ArenaStrategy]
        if self.strategy not in strategies:
            raise OptionError(f"strategy: expected one of {', '.join(map(repr, strategies))}, "
                              f"got {self.strategy!r}")
        check_int_option("vector_width", self.vector_width, "0 (the target's), 4, 8 or 16",
                         lambda w: w in VECTOR_WIDTHS)


VECTOR_WIDTHS = (0, 4, 8, 16)
"""Valid `vector_width` options: f32 lanes per vector, 0 for the target's."""


def check_int_option(name: str, value: object, valid: str, ok: Callable[[int], bool]) -> int:
    """`value` if it is an int (not a bool) for which `ok` holds, else an OptionError
    naming the option and its valid values."""
    if isinstance(value, bool) or not isinstance(value, int) or not ok(value):
        raise OptionError(f"{name}: expected {valid}, got {value!r}")
    return value


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


def stage_of(module: ModuleOp) -> str:
    """The stage a module is at: "hir" for any tensor-level module (hir and/or mir ops:
    the tensor passes are idempotent, so a mir module simply goes through them again),
    "lir" (planned or not) or "llvm"."""
    ops = list(module.walk())
    if any(isinstance(op, llvm.FuncOp) for op in ops) and not any(isinstance(op, func.FuncOp) for op in ops):
        return "llvm"
    if any(op.name.startswith("lir.") for op in ops) or any(
        isinstance(op, func.FuncOp) and not op.function_type.outputs.data for op in ops
    ):
        return "lir"
    return "hir"


def is_planned(module: ModuleOp) -> bool:
    return not any(isinstance(op, lir.AllocOp) for op in module.walk())


def make_pass(name: str, options: PipelineOptions) -> ModulePass:
    from rlx_mlir.passes import get_all_passes

    if name == "canonicalize":
        from xdsl.transforms.canonicalize import CanonicalizePass

        return CanonicalizePass()
    if name == "cse":
        from xdsl.transforms.common_subexpression_elimination import (
            CommonSubexpressionElimination,
        )

        return CommonSubexpressionElimination()
    cls = get_all_passes()[name]()
    if name == "lir-plan-arena":
        return cls(alignment=options.alignment, strategy=options.strategy)
    if name == "lir-pack-weights":
        return cls(params=tuple(options.packed_params))
    if name == "convert-lir-to-llvm":
        return cls(vector_width=options.vector_width)
    return cls()


def lower(module: ModuleOp, until: str = "llvm", options: PipelineOptions = PipelineOptions(),
          *, ctx: Context | None = None, timings: Timings | None = None,
          snapshot: Callable[[str, ModuleOp], None] | None = None) -> ModuleOp:
    """Run the passes that take `module` (in place) from its stage to `until`.

    `snapshot(stage, module)` is called at every stage boundary reached (and for the
    input's own stage), e.g. to keep a clone of each stage.
    """
    ctx = ctx or make_context()
    name_arguments(module)  # hand-written modules may leave rlx.name / rlx.role out
    stage = stage_of(module)
    if snapshot is not None:
        snapshot(stage, module)
    for target in STAGES[STAGES.index(stage) + 1 : STAGES.index(until) + 1]:
        names: Sequence[str] = STAGE_PASSES[target]
        if target == "llvm" and stage == "lir":  # lir input: plan it if needed, pack weights
            names = ("lir-pack-weights", *names)
            if not is_planned(module):
                names = ("lir-plan-arena", *names)
        for name in names:
            start = time.perf_counter()
            make_pass(name, options).apply(ctx, module)
            if timings is not None:
                timings.add(name, time.perf_counter() - start)
        if snapshot is not None:
            snapshot(target, module)
    return module
