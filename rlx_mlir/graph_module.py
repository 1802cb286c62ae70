"""`rlx.GraphModule`: a module that knows its stage (HIR, MIR, LIR) and lowers one stage
at a time, with the passes `rlx.jit` runs for that step.

```python
def build(g):
    x = g.input("x", (4, 64))
    return g.gelu(g.linear(x, g.param("w", (64, 32)), g.param("b", (32,))))

m = rlx.GraphModule.define("mlp", build)       # stage HIR
print(m.inspect())                              # ops by kind, values and bytes
lir = m.with_fusion_policy(rlx.FusionPolicy.none()).lower().lower()   # MIR, then LIR
print(lir.inspect())                            # kernels, buffers, the arena plan
model = rlx.jit(lir)                            # the same code as rlx.jit(g, fusion=...)
```
`lower()` runs exactly the passes of `rlx_mlir.pipeline.STAGE_PASSES` for the next
stage, through `rlx_mlir.pipeline.lower` with the module's fusion policy, so a module
lowered step by step compiles to the same code as `rlx.jit` of its graph. A module
lowered to MIR carries `rlx.stage = "mir"` (module attribute) so its text round-trips
through `from_mlir` at its stage.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from enum import IntEnum

from xdsl.dialects import func
from xdsl.dialects.builtin import MemRefType, ModuleOp, StringAttr, TensorType
from xdsl.ir import Attribute, Operation

from rlx_mlir.binding import Signature
from rlx_mlir.core import shape_inference as si
from rlx_mlir.core.abi import entry_function
from rlx_mlir.core.dtypes import element_bytes
from rlx_mlir.core.errors import GraphError, RlxError
from rlx_mlir.core.fusion import FusionPolicy, check_fusion
from rlx_mlir.dialects import lir
from rlx_mlir.graph import Graph, Value
from rlx_mlir.introspection import arena_slots
from rlx_mlir.ir import module_text, parse_user_module
from rlx_mlir.pipeline import (
    STAGE_ATTR,
    PipelineOptions,
    kernel_origins,
    lower_checked,
    planned_bytes,
    stage_of,
)

DEFAULT_FUSION = FusionPolicy()
"""The policy of a module nobody set one on (and of `rlx.jit(graph)`)."""


class GraphStage(IntEnum):
    """The stage of a GraphModule, ordered: HIR < MIR < LIR."""

    HIR = 0
    """Tensors: hir blocks and unfused mir primitives, as the Graph builder makes them."""
    MIR = 1
    """Tensors: mir primitives only, canonicalized and fused per the fusion policy."""
    LIR = 2
    """Buffers: lir kernels on memrefs, the intermediates planned into one arena."""

    def __str__(self) -> str:
        return self.name

    @property
    def pipeline_name(self) -> str:
        """The pipeline's name of the stage ("hir", "mir", "lir")."""
        return self.name.lower()


class _MirGraph(Graph):
    """The builder of a `GraphModule.mir` module: mir primitives only. A method that
    builds an hir block (linear, attention, rms_norm, ...) is a GraphError, since a MIR
    module is past the lowering that expands it."""

    def _add_located(self, op: Operation) -> None:
        if op.name.startswith("hir."):
            method = op.name.split(".", 1)[1]
            raise GraphError(
                f"{method}: a MIR module's builder takes mir primitives only (matmul, add, "
                f"exp, reduce_sum, ...), got the hir block {op.name}; build it in "
                "GraphModule.hir(...) and lower() it"
            )
        super()._add_located(op)


class GraphModule:
    """A module at one stage (see the module docstring). Make one with `define`, `hir`,
    `mir`, `from_graph` or `from_mlir`; every method returns a new module and leaves this
    one as it is."""

    def __init__(self, module: ModuleOp | None, stage: GraphStage,
                 fusion: FusionPolicy = DEFAULT_FUSION, graph: Graph | None = None):
        """Prefer the class methods; `module` (owned from now on) is at `stage`, or
        `graph` builds it (a `hir`/`mir` module under construction)."""
        self._module = module
        self._graph = graph
        self._built: tuple[int, ModuleOp] | None = None  # the graph's module at an op count
        self._stage = stage
        self._fusion = check_fusion(fusion)
        self._lowered: dict[GraphStage, tuple[ModuleOp, ModuleOp]] = {}  # into_*: (from, made)

    # ------------------------------------------------------------------ making one

    @classmethod
    def define(cls, name: str, build: Callable[[Graph], Value | Sequence[Value] | None]) -> GraphModule:
        """An HIR module built by `build(g)` on a fresh `Graph(name)`: it returns the
        output Value (or a tuple of them), or calls `g.output(...)` itself."""
        g = Graph(name)
        result = build(g)
        if not g.output_names:
            if result is None:
                raise GraphError(f"define: build of {name!r} returned nothing and called no "
                                 "g.output(...); return the output Value(s)")
            g.output(*(result if isinstance(result, tuple | list) else (result,)))
        return cls.from_graph(g)

    @classmethod
    def hir(cls, name: str) -> GraphModule:
        """An empty HIR module to build with `m.graph` (an `rlx.Graph`)."""
        return cls(None, GraphStage.HIR, graph=Graph(name))

    @classmethod
    def mir(cls, name: str) -> GraphModule:
        """An empty MIR module to build with `m.graph`: the Graph builder restricted to
        mir primitives (an hir block such as `linear` or `attention` is a GraphError).
        Lowering it runs no fusion: what is built is what becomes kernels."""
        return cls(None, GraphStage.MIR, graph=_MirGraph(name))

    @classmethod
    def from_graph(cls, graph: Graph) -> GraphModule:
        """The HIR module of `graph` as it is now (later builder calls do not change it)."""
        if not isinstance(graph, Graph):
            raise RlxError(f"from_graph: expected an rlx.Graph, got {type(graph).__name__}")
        return cls(graph.to_module(), GraphStage.HIR)

    @classmethod
    def from_mlir(cls, text: str) -> GraphModule:
        """The module of `text`, at the stage its ops say: any hir op -> HIR; lir ops or
        memref functions -> LIR; tensor ops only -> MIR when marked `rlx.stage = "mir"`
        (as `lower()` and `str(m)` write it), else HIR (a Graph's `x @ w` is a mir op
        before any pass ran; the tensor passes are idempotent). llvm text is an RlxError
        (`rlx.compile_mlir` runs it)."""
        module = parse_user_module("from_mlir", text)
        stage = stage_of(module)
        if stage == "llvm":
            raise RlxError("from_mlir: expected a module at the hir, mir or lir stage, got an "
                           "llvm-dialect module (compile it with rlx.compile_mlir)")
        return cls(module, GraphStage[stage.upper()])

    # ------------------------------------------------------------------ what it is

    @property
    def stage(self) -> GraphStage:
        """The module's stage."""
        return self._stage

    @property
    def name(self) -> str:
        """The graph function's name."""
        if self._graph is not None:
            return self._graph.name
        return entry_function(self._own()).sym_name.data

    @property
    def graph(self) -> Graph:
        """The builder of a `hir(...)` / `mir(...)` module (an RlxError for the others,
        whose IR is already made)."""
        if self._graph is None:
            raise RlxError(f"graph: module {self.name!r} was not made by GraphModule.hir/.mir; "
                           "only those have a builder")
        return self._graph

    @property
    def fusion_policy(self) -> FusionPolicy:
        """The fusion policy mir-fuse runs with when this module is lowered or compiled."""
        return self._fusion

    def with_fusion_policy(self, policy: FusionPolicy) -> GraphModule:
        """A copy of this HIR module that lowers (and compiles) with `policy`."""
        check_fusion(policy)
        if self._stage is not GraphStage.HIR:
            raise RlxError(f"with_fusion_policy: expected a module at the HIR stage, got "
                           f"{self._stage.name} (fusion ran when it was lowered to MIR)")
        return GraphModule(self._own().clone(), GraphStage.HIR, policy)

    def options(self) -> PipelineOptions:
        """The pipeline options `lower` and `rlx.jit` use for this module's passes."""
        return PipelineOptions(fusion=self._fusion)

    # ------------------------------------------------------------------ the IR

    def _own(self) -> ModuleOp:
        """This module's ModuleOp (a builder's: made again only after the graph grew)."""
        if self._graph is None:
            assert self._module is not None
            return self._module
        count = self._graph.op_count()
        if self._built is None or self._built[0] != count:
            module = self._graph.to_module()
            if self._stage is GraphStage.MIR:
                module.attributes[STAGE_ATTR] = StringAttr("mir")
            self._built = (count, module)
        return self._built[1]

    def as_hir(self) -> ModuleOp | None:
        """The module's own ModuleOp if it is at HIR, else None (do not change it)."""
        return self._own() if self._stage is GraphStage.HIR else None

    def as_mir(self) -> ModuleOp | None:
        """The module's own ModuleOp if it is at MIR, else None (do not change it)."""
        return self._own() if self._stage is GraphStage.MIR else None

    def as_lir(self) -> ModuleOp | None:
        """The module's own ModuleOp if it is at LIR, else None (do not change it)."""
        return self._own() if self._stage is GraphStage.LIR else None

    def into_mir(self) -> ModuleOp:
        """The module at MIR, lowered from a copy if needed (made once; do not change it)."""
        return self._into(GraphStage.MIR)

    def into_lir(self) -> ModuleOp:
        """The module at LIR, lowered from a copy if needed (made once; do not change it)."""
        return self._into(GraphStage.LIR)

    def _into(self, stage: GraphStage) -> ModuleOp:
        if stage is self._stage:
            return self._own()
        if stage < self._stage:
            raise RlxError(f"into_{stage.pipeline_name}: module {self.name!r} is at "
                           f"{self._stage.name}, past {stage.name} (modules lower, never raise)")
        own = self._own()
        made = self._lowered.get(stage)
        if made is None or made[0] is not own:  # a builder's graph grew since
            made = self._lowered[stage] = (own, self._lowered_copy(stage))
        return made[1]

    def _lowered_copy(self, stage: GraphStage) -> ModuleOp:
        """A copy of this module lowered to `stage` by the pipeline's passes."""
        return lower_checked(self._own().clone(), stage.pipeline_name, self.options())

    def lower(self) -> GraphModule:
        """The module at the next stage (HIR -> MIR -> LIR): the passes `rlx.jit` runs for
        that step (`rlx_mlir.pipeline.STAGE_PASSES`), with this module's fusion policy.
        LIR is the last stage here (`rlx.jit` takes it on to native code)."""
        if self._stage is GraphStage.LIR:
            raise RlxError(f"lower: module {self.name!r} is at LIR, the last stage of a "
                           "GraphModule; compile it with rlx.jit(m)")
        stage = GraphStage(self._stage + 1)
        return GraphModule(self._lowered_copy(stage), stage, self._fusion)

    def module_for_compile(self) -> ModuleOp:
        """A copy of the module for a compiler or executor to own and lower in place."""
        return self._own().clone()

    def to_mlir(self) -> str:
        """The module's text with the ops' locations (`from_mlir` reads it back)."""
        return module_text(self._own(), debuginfo=True)

    def __str__(self) -> str:
        return self.to_mlir()

    def __repr__(self) -> str:
        return f"<GraphModule {self.name!r} at {self._stage.name}>"

    # ------------------------------------------------------------------ inspect

    def inspect(self) -> str:
        """A text report of the module at its stage: the ops by kind with counts, the
        arguments with their bytes, the intermediate values (tensors) or buffers with
        their bytes; at LIR also the arena plan (planned vs naive bytes, slots)."""
        module = self._own()
        fn = entry_function(module)
        lines = [f"GraphModule @{self.name}: {self._stage.name}"
                 + (f", fusion {_policy_text(self._fusion)}" if self._stage is GraphStage.HIR else "")]
        counts = Counter(op.name for op in fn.walk() if _counted(op))
        lines.append(f"  ops: {sum(counts.values())}")
        lines += [f"    {name:<28}{n:>6}" for name, n in sorted(counts.items(), key=lambda c: (-c[1], c[0]))]
        lines += _argument_lines(fn)
        if self._stage is GraphStage.LIR:
            lines += _lir_lines(fn)
        else:
            lines += _value_lines(fn)
        return "\n".join(lines)


def _policy_text(policy: FusionPolicy) -> str:
    on = [name for name, value in vars(policy).items() if value]
    return "(" + (", ".join(on) if on else "none") + ")"


def _counted(op: Operation) -> bool:
    return op.name not in ("func.func", "func.return")


def _bytes(ty: Attribute) -> int | None:
    """Bytes of a tensor or memref type, None when a dim is dynamic."""
    if not isinstance(ty, TensorType | MemRefType):
        return None
    shape = ty.get_shape()
    if any(d < 0 for d in shape):
        return None
    count = 1
    for d in shape:
        count *= d
    return count * element_bytes(ty.get_element_type())


def _size_text(size: int | None) -> str:
    return "? B (symbolic)" if size is None else f"{size} B"


def _argument_lines(fn: func.FuncOp) -> list[str]:
    signature = Signature.of(fn)
    lines = [f"  arguments: {len(signature.args)}"]
    for spec, arg in zip(signature.args, fn.args, strict=True):
        lines.append(f"    {spec.role:<8}{spec.name:<20}{spec.dtype}{si.fmt(spec.shape):<20}"
                     f"{_size_text(_bytes(arg.type))}")
    return lines


def _value_lines(fn: func.FuncOp) -> list[str]:
    """The tensors the ops compute (outside nested bodies): count and bytes."""
    sizes = [_bytes(r.type) for op in fn.body.block.ops for r in op.results]
    known = [s for s in sizes if s is not None]
    symbolic = len(sizes) - len(known)
    return [f"  values: {len(sizes)} tensors, {sum(known)} B"
            + (f" (+ {symbolic} of symbolic size)" if symbolic else "")]


INSPECT_SLOTS = 16
"""The most arena slots `inspect` lists one by one (in schedule order)."""


def _lir_lines(fn: func.FuncOp) -> list[str]:
    """Buffers (arena slots, allocations) and the arena plan."""
    slots = [op for op in fn.walk() if isinstance(op, lir.SlotOp)]
    allocs = [op for op in fn.walk() if isinstance(op, lir.AllocOp)]
    lines = [f"  buffers: {len(slots)} arena slots, {len(allocs)} allocations"]
    arena, naive, peak = planned_bytes(fn)
    if slots:
        saved = f", {100 * (1 - arena / naive):.0f}% saved by reuse" if naive else ""
        lines.append(f"  arena: {arena} B planned vs {naive} B naive (no reuse){saved}; "
                     f"lower bound {peak} B (most bytes live at once)")
        origins = kernel_origins(fn)
        boxes = [box for op in fn.walk() if isinstance(op, lir.ArenaOp)
                 for box in arena_slots(op, origins)]
        for box in boxes[:INSPECT_SLOTS]:
            lines.append(f"    slot [{box.offset}, {box.offset + box.size}) {box.type:<20} live "
                         f"[{box.start}, {box.end}]  {box.origin}")
        if len(boxes) > INSPECT_SLOTS:
            lines.append(f"    ... and {len(boxes) - INSPECT_SLOTS} more slots")
    else:
        sizes = [_bytes(op.results[0].type) for op in allocs]
        lines.append("  arena: none planned; allocations "
                     f"{sum(s for s in sizes if s is not None)} B")
    return lines


def compile_input(graph: object, fusion: FusionPolicy | None, what: str
                  ) -> tuple[ModuleOp, FusionPolicy]:
    """What `rlx.jit` compiles for `graph` (a Graph or a GraphModule): a module it may
    lower in place, and the fusion policy: `fusion` when given, else the module's. A
    policy other than a MIR/LIR module's is an RlxError (it was fused when lowered)."""
    if isinstance(graph, Graph):
        return graph.to_module(), DEFAULT_FUSION if fusion is None else check_fusion(fusion)
    if not isinstance(graph, GraphModule):
        raise RlxError(f"{what}: expected an rlx.Graph or rlx.GraphModule, got {type(graph).__name__}")
    if fusion is None:
        return graph.module_for_compile(), graph.fusion_policy
    check_fusion(fusion)
    if graph.stage is not GraphStage.HIR and fusion != graph.fusion_policy:
        raise RlxError(f"{what}: fusion: module {graph.name!r} is at {graph.stage.name}, fused "
                       f"with {graph.fusion_policy} when lowered; got {fusion} (set the policy "
                       "at HIR: m.with_fusion_policy(...))")
    return graph.module_for_compile(), fusion


__all__ = ["GraphModule", "GraphStage", "compile_input"]
