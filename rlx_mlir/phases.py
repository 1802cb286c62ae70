"""Streaming phases of a graph's schedule: `rlx.Phase`, `rlx.PhaseSchedule`,
`rlx.derive_phases` (RLX's `Phase`, `PhaseSchedule`, `derive_phases`).

```python
sched = rlx.derive_phases(g)           # a Graph, a GraphModule or a mir ModuleOp
sched.module                           # the mir module whose nodes the schedule holds
sched.get(node)                        # rlx.Phase.PROLOGUE | STEADY_STATE | EPILOGUE
sched.nodes_in(rlx.Phase.EPILOGUE)     # in schedule order
sched.set(node, rlx.Phase.EPILOGUE); len(sched)
```

The nodes are the mir module's graph function's arguments (inputs, params, states: xDSL
`BlockArgument`s) and its top-level operations (xDSL `Operation`s, `func.return`
included), in schedule order. The rules (defined once, in `rlx_mlir.passes.phases`):
arguments and constants are prologue; sampling ops (`mir.sample`, `mir.top_k`,
`mir.argmax`) are epilogue; ops after the last compute op (a name containing `matmul`,
`attention` or `gated_delta_net`) or after the last sampling op are epilogue, and so is
`func.return`; the rest is steady state. An op with a body (`fused_elementwise`, `scan`)
is one node.

The compiled model carries the same phases: each lir kernel has the phase of the mir op
it came from as `rlx.phase` (`model.mlir("lir")`), and `model.profile(...).by_phase()`
sums the kernels' time per phase.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import BlockArgument, Operation
from xdsl.utils.exceptions import PassFailedException

from rlx_mlir.core.abi import ARG_NAME
from rlx_mlir.core.errors import GraphError, RlxError
from rlx_mlir.graph import Graph
from rlx_mlir.pipeline import Phase, entry_function, function_phases, lower

Node = BlockArgument | Operation
"""A node of a schedule: an argument or a top-level op of the graph function."""


class PhaseSchedule:
    """The phase of every node of one mir module's graph function, in schedule order.

    The nodes are objects of `module` (`schedule.module`): `derive_phases` of a Graph or
    a GraphModule lowers a copy, so look nodes up in that module, not in another one.
    """

    def __init__(self, module: ModuleOp, nodes: Sequence[tuple[Node, Phase]]):
        self.module = module
        """The mir module the nodes belong to."""
        self._phases: dict[Node, Phase] = dict(nodes)

    def __len__(self) -> int:
        """The number of nodes (arguments and top-level ops)."""
        return len(self._phases)

    def __iter__(self) -> Iterator[Node]:
        """The nodes in schedule order: the arguments, then the ops."""
        return iter(self._phases)

    def __contains__(self, node: object) -> bool:
        return node in self._phases

    def items(self) -> list[tuple[Node, Phase]]:
        """(node, phase) in schedule order."""
        return list(self._phases.items())

    def get(self, node: Node) -> Phase:
        """The phase of `node`; an RlxError if it is not a node of this schedule."""
        self._check_node("get", node)
        return self._phases[node]

    def set(self, node: Node, phase: Phase) -> None:
        """Give `node` the phase `phase` (an `rlx.Phase`)."""
        self._check_node("set", node)
        if not isinstance(phase, Phase):
            raise RlxError(f"set: phase: expected an rlx.Phase "
                           f"({', '.join(p.name for p in Phase)}), got {phase!r}")
        self._phases[node] = phase

    def nodes_in(self, phase: Phase) -> list[Node]:
        """The nodes of `phase`, in schedule order."""
        if not isinstance(phase, Phase):
            raise RlxError(f"nodes_in: phase: expected an rlx.Phase "
                           f"({', '.join(p.name for p in Phase)}), got {phase!r}")
        return [node for node, p in self._phases.items() if p is phase]

    def counts(self) -> dict[Phase, int]:
        """The number of nodes of each phase (every phase present, in order)."""
        return {phase: sum(p is phase for p in self._phases.values()) for phase in Phase}

    def __str__(self) -> str:
        """One line per phase: its nodes in schedule order."""
        return "\n".join(f"{phase.value}: {', '.join(describe(n) for n in self.nodes_in(phase))}"
                         for phase in Phase)

    def __repr__(self) -> str:
        counts = ", ".join(f"{p.value}={n}" for p, n in self.counts().items())
        return f"PhaseSchedule({len(self)} nodes: {counts})"

    def _check_node(self, method: str, node: object) -> None:
        if node not in self._phases:
            raise RlxError(
                f"{method}: expected an argument or top-level op of the schedule's module "
                f"(schedule.module), got {describe(node)}, which is not one of its "
                f"{len(self)} nodes")


def describe(node: object) -> str:
    """A node as text: `%name` of an argument, `'mir.matmul'` of an op."""
    if isinstance(node, BlockArgument):
        fn = node.block.parent_op()
        attrs = getattr(fn, "arg_attrs", None)
        name = attrs.data[node.index].data.get(ARG_NAME) if attrs is not None else None
        return f"%{name.data if isinstance(name, StringAttr) else node.name_hint or node.index}"
    if isinstance(node, Operation):
        return f"'{node.name}'"
    return f"<{type(node).__name__}>"


def derive_phases(m: Any) -> PhaseSchedule:
    """The phases of `m`'s mir graph function by RLX's rules (see the module docstring).

    `m` is an `rlx.Graph` (lowered to mir on a copy), a GraphModule or anything with an
    `into_mir()` returning the mir ModuleOp (its nodes are that module's), or an xDSL
    ModuleOp: at the mir stage it is used as it is; with hir ops, a copy is lowered to mir.
    The nodes belong to `schedule.module`.
    """
    module = _mir_module(m)
    fn = entry_function(module)
    if fn is None:
        raise RlxError("derive_phases: expected a module with a graph function (func.func "
                       "with a body), got none")
    return PhaseSchedule(module, function_phases(fn))


def _mir_module(m: Any) -> ModuleOp:
    if isinstance(m, Graph):
        return _lowered(m.to_module())
    into_mir = getattr(m, "into_mir", None)
    if callable(into_mir):
        module = into_mir()
        if not isinstance(module, ModuleOp):
            raise RlxError(f"derive_phases: into_mir(): expected an xDSL ModuleOp, got "
                           f"{type(module).__name__}")
        return module
    if isinstance(m, ModuleOp):
        names = {op.name.split(".", 1)[0] for op in m.walk()}
        if names & {"lir", "llvm"}:
            raise RlxError("derive_phases: expected a module at the hir or mir stage, got one "
                           "with lir or llvm ops (the lir kernels carry their phase as rlx.phase)")
        return _lowered(m.clone()) if "hir" in names else m
    raise RlxError(f"derive_phases: expected an rlx.Graph, a GraphModule or an xDSL ModuleOp, "
                   f"got {type(m).__name__}")


def _lowered(module: ModuleOp) -> ModuleOp:
    """`module` (a copy) lowered to the mir stage; a failing pass is a GraphError."""
    try:
        return lower(module, "mir")
    except PassFailedException as err:
        raise GraphError(str(err.args[0] if err.args else err).split("\n")[0]) from None


__all__ = ["Node", "Phase", "PhaseSchedule", "derive_phases", "describe"]
