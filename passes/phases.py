"""Streaming phases (RLX's `Phase::{Prologue, SteadyState, Epilogue}`): which part of a
graph's schedule each argument and op belongs to, by RLX's rules, defined once here.

The rules, over one function's arguments and top-level ops in schedule order:

- arguments (inputs, params, states) and constants (`mir.constant`, `lir.constant`) are
  **prologue**;
- sampling ops (`mir.sample`, `mir.top_k`, `mir.argmax` and their `lir.` kernels: argmax
  is greedy sampling) are **epilogue**;
- ops after the last compute op (any op whose name contains `matmul`, `attention` or
  `gated_delta_net`: matmul, fused_matmul, dequant_matmul, the merged-siblings matmul,
  attention, gated delta net; a `func.call` of a custom function that holds one) or
  after the last sampling op are **epilogue**, and so is
  the function's terminator (`func.return`: the end of the call, whatever precedes it);
- every other op is **steady state**. A graph with no compute op and no sampling op is
  steady state from its first kernel to its last.

Ops with regions (`fused_elementwise`, `scan`) are classified as one op, by their own
name; the ops of their bodies take the phase of the top-level op they belong to. Ops are
matched by name only (an unregistered op parsed in generic form counts by the name it
was written with), so the rules need no import of the ops they name.

`convert-mir-to-lir` writes each lir kernel's phase (that of the mir op it came from) as
the discardable attribute `rlx.phase = "steady_state"`; the profiled build records it per
call site, and the profile groups time by it (`rlx_mlir.profiling`). The Python API
(`rlx.Phase`, `rlx.PhaseSchedule`, `rlx.derive_phases`) is `rlx_mlir/phases.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr, UnregisteredOp
from xdsl.ir import BlockArgument, Operation
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern
from xdsl.traits import IsTerminator, SymbolTable

from rlx_mlir.dialects import lir

PHASE_ATTR = "rlx.phase"
"""Discardable attribute of an lir kernel (and `lir.scan`): its phase's value."""

COMPUTE_MARKS = ("matmul", "attention", "gated_delta_net")
"""An op whose name contains one of these is a compute op."""
SAMPLING_OPS = frozenset({f"{d}.{op}" for d in ("mir", "lir") for op in ("sample", "top_k", "argmax")})
"""The sampling ops (always epilogue)."""
CONSTANT_OPS = frozenset({"mir.constant", "lir.constant", "arith.constant"})
"""The constants (always prologue)."""


class Phase(Enum):
    """The streaming phase of a node of a graph's schedule (ordered by `.order`)."""

    PROLOGUE = "prologue"
    """Before the steady state: the arguments and constants (loaded, not computed)."""
    STEADY_STATE = "steady_state"
    """The body: from the first computed op to the last compute op."""
    EPILOGUE = "epilogue"
    """After the last compute op (or sample): sampling, post-processing, the return."""

    @property
    def order(self) -> int:
        """0, 1, 2 for prologue, steady state, epilogue."""
        return list(Phase).index(self)


def op_name(op: Operation) -> str:
    """The op's name; for an unregistered op (generic form), the name it was written with."""
    return op.op_name.data if isinstance(op, UnregisteredOp) else op.name


def is_compute(name: str) -> bool:
    """Whether the op `name` is a compute op of the phase rules."""
    return any(mark in name for mark in COMPUTE_MARKS)


def computes(op: Operation) -> bool:
    """Whether `op` is a compute op, or a call (`g.custom_fn`, before inlining) of a
    function of the module that holds one."""
    if is_compute(op_name(op)):
        return True
    if not isinstance(op, func.CallOp):
        return False
    callee = SymbolTable.lookup_symbol(op, op.callee)
    return callee is not None and any(is_compute(op_name(inner)) or isinstance(inner, func.CallOp)
                                      and computes(inner) for inner in callee.walk())


def op_phases(ops: Sequence[Operation]) -> list[Phase]:
    """The phase of each op of one block, in schedule order, by the rules above."""
    names = [op_name(op) for op in ops]
    compute = [i for i, op in enumerate(ops) if computes(op)]
    sampling = [i for i, name in enumerate(names) if name in SAMPLING_OPS]
    bounds = [found[-1] for found in (compute, sampling) if found]
    epilogue_after = min(bounds) if bounds else len(names)
    phases = []
    for index, (op, name) in enumerate(zip(ops, names, strict=True)):
        if name in CONSTANT_OPS:
            phases.append(Phase.PROLOGUE)
        elif name in SAMPLING_OPS or index > epilogue_after or op.has_trait(IsTerminator):
            phases.append(Phase.EPILOGUE)
        else:
            phases.append(Phase.STEADY_STATE)
    return phases


def block_phases(fn: func.FuncOp) -> dict[Operation, Phase]:
    """The phase of every top-level op of `fn`'s body (empty for a declaration)."""
    if fn.is_declaration:
        return {}
    ops = list(fn.body.block.ops)
    return dict(zip(ops, op_phases(ops), strict=True))


def function_phases(fn: func.FuncOp) -> list[tuple[BlockArgument | Operation, Phase]]:
    """Every node of `fn`'s schedule with its phase: the arguments (inputs, params,
    states: prologue), then the top-level ops in order (`op_phases`)."""
    if fn.is_declaration:
        return []
    block = fn.body.block
    ops = list(block.ops)
    return [(arg, Phase.PROLOGUE) for arg in block.args] + list(zip(ops, op_phases(ops), strict=True))


def entry_function(module: ModuleOp) -> func.FuncOp | None:
    """The graph's function: the first public `func.func` with a body (custom functions
    are private), else the first with a body."""
    bodies = [op for op in module.ops if isinstance(op, func.FuncOp) and not op.is_declaration]
    public = [fn for fn in bodies if fn.sym_visibility is None or fn.sym_visibility.data == "public"]
    return (public or bodies or [None])[0]


def attached_phase(op: Operation | None) -> Phase | None:
    """The `rlx.phase` of `op` or of the nearest op around it that has one."""
    while op is not None:
        attr = op.attributes.get(PHASE_ATTR)
        if isinstance(attr, StringAttr):
            return Phase(attr.data)
        op = op.parent_op()
    return None


def carries_phase(op: Operation) -> bool:
    """The lir ops that carry a phase: the kernels and the ops with a body of kernels."""
    return isinstance(op, lir.KernelOp | lir.RegionOp)


def set_phase(op: Operation, phase: Phase) -> None:
    """Write `phase` as `op`'s `rlx.phase`."""
    op.attributes[PHASE_ATTR] = StringAttr(phase.value)


@dataclass
class WithPhases(RewritePattern):
    """`pattern`, with the lir kernels it inserts marked with the phase of the op it
    matched: its entry in `phases` (a top-level op), else the phase attached around it
    (an op in the body of a scan already lowered)."""

    pattern: RewritePattern
    phases: dict[Operation, Phase]

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter, /) -> None:
        phase = self.phases.get(op) or attached_phase(op.parent_op())
        if phase is None:
            self.pattern.match_and_rewrite(op, rewriter)
            return

        def mark(new: Operation) -> None:
            if carries_phase(new) and PHASE_ATTR not in new.attributes:
                set_phase(new, phase)

        rewriter.operation_insertion_handler.append(mark)
        try:
            self.pattern.match_and_rewrite(op, rewriter)
        finally:
            rewriter.operation_insertion_handler.remove(mark)


def module_phases(module: ModuleOp) -> dict[Operation, Phase]:
    """The phase of every top-level op of every function of `module`."""
    phases: dict[Operation, Phase] = {}
    for fn in module.ops:
        if isinstance(fn, func.FuncOp):
            phases.update(block_phases(fn))
    return phases


def name_phases(module: ModuleOp) -> None:
    """Give every lir kernel without an `rlx.phase` one (a module written at the lir
    stage): the rules applied to its function's top-level ops, inherited by bodies."""
    phases = module_phases(module)
    for op in module.walk():
        if carries_phase(op) and PHASE_ATTR not in op.attributes:
            phase = phases.get(op) or attached_phase(op.parent_op())
            set_phase(op, phase if phase is not None else Phase.STEADY_STATE)


__all__ = [
    "COMPUTE_MARKS", "CONSTANT_OPS", "PHASE_ATTR", "SAMPLING_OPS", "Phase", "WithPhases",
    "attached_phase", "block_phases", "entry_function", "function_phases", "is_compute", "module_phases",
    "name_phases", "op_name", "op_phases", "set_phase",
]
