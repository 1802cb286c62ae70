"""The reverse-mode walker: `grad_values` appends the backward pass of a loss to its graph,
`grad` builds a new graph computing `(loss, *grads)` (SPEC "Automatic differentiation").

The walk goes over the graph's ops in reverse from the loss, keeping one cotangent per SSA
value (summed over its uses). An op is differentiated only when some result has a
cotangent and some operand needs one (depends on a `wrt` argument through float values):

- a mir op by its rule, `VJP_RULES[op.name]` (`rlx_mlir.autodiff.rules`);
- an hir block through its mir expansion (`pipeline.expand_hir`), recomputed in the
  backward section (CSE merges the copies with the forward after lowering);
- a `func.call` of a `custom_fn` by its user VJP when it has one, else through the
  callee's body, cloned onto the call's operands.

The backward ops are built with the Graph builder into the graph itself, under the
scope `grad` (their locations read `grad.mul#3`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import IndexType, TensorType
from xdsl.ir import BlockArgument, Operation, SSAValue

from rlx_mlir import pipeline
from rlx_mlir.autodiff.rules import VJP_RULES
from rlx_mlir.autodiff.rules_elementwise import zeros_like
from rlx_mlir.core import shape_inference as rules
from rlx_mlir.core.abi import ROLE_POSITION
from rlx_mlir.core.errors import RlxError
from rlx_mlir.dialects import registry
from rlx_mlir.dialects.common import dtype_of
from rlx_mlir.graph import Graph, Value

GRAD_SCOPE = "grad"
"""The scope of the backward ops (their locations read `grad.<method>#n`)."""


class Backward:
    """The `VjpContext` of one backward pass: the graph, the cotangent of every value
    reached so far, and the values that need one."""

    def __init__(self, g: Graph, wrt: Sequence[SSAValue]):
        self.g = g
        self.cotangents: dict[SSAValue, Value] = {}
        self.needs: set[SSAValue] = set(wrt)
        """The values that depend on a `wrt` argument through float values."""

    # ------------------------------------------------------------------ VjpContext

    def value(self, ssa: SSAValue) -> Value:
        """The forward SSA value `ssa` as a Value of `g`, of its symbolic shape
        (`Graph.shape_of`); one whose symbols cannot be told is refused."""
        shape = self.g.shape_of(ssa)
        if rules.UNKNOWN in shape:
            owner = ssa.owner.name if isinstance(ssa.owner, Operation) else "a block"
            raise RlxError(f"rlx.grad: a result of {owner} has a shape {ssa.type} whose symbolic "
                           "dims are unknown here; differentiating through it is not supported")
        return Value(self.g, ssa, shape, dtype_of(ssa))

    def unbroadcast(self, cotangent: Value, shape: rules.Shape) -> Value:
        """`cotangent` summed over the leading axes broadcasting added and (kept) over the
        size-1 axes it stretched, then reshaped to `shape`."""
        shape = tuple(shape)
        if cotangent.shape == shape:
            return cotangent
        lead = cotangent.rank - len(shape)
        axes = list(range(lead)) + [lead + i for i, d in enumerate(shape)
                                    if d == 1 and cotangent.shape[lead + i] != 1]
        summed = self.g.reduce_sum(cotangent, axes, keepdim=True) if axes else cotangent
        return summed if summed.shape == shape else self.g.reshape(summed, shape)

    def walker(self, g: Graph, wrt: Sequence[SSAValue]) -> Backward:
        """A fresh walker over `g` (a region op's body) with respect to `wrt`."""
        return Backward(g, wrt)

    # ------------------------------------------------------------------ cotangents

    def accumulate(self, ssa: SSAValue, cotangent: Value, what: Callable[[], str]) -> None:
        """Add `cotangent` to the one of `ssa` (checked against its shape)."""
        want = self.value(ssa).shape
        if cotangent.shape != want or cotangent.dtype != "f32":
            raise RlxError(f"{what()}: expected a cotangent f32{list(want)}, got "
                           f"{cotangent.dtype}{list(cotangent.shape)}")
        known = self.cotangents.get(ssa)
        self.cotangents[ssa] = cotangent if known is None else self.g.add(known, cotangent)

    def gradient(self, arg: SSAValue) -> Value:
        """The cotangent reached `arg`, or zeros."""
        cotangent = self.cotangents.get(arg)
        return zeros_like(self, self.value(arg)) if cotangent is None else cotangent

    # ------------------------------------------------------------------ the walk

    def mark(self, ops: Sequence[Operation]) -> None:
        """Forward: the float results of an op some operand of which needs a cotangent
        need one too."""
        for op in ops:
            if any(o in self.needs for o in op.operands):
                self.needs.update(r for r in op.results if _is_float(r))

    def backprop(self, ops: Sequence[Operation]) -> None:
        """Reverse over `ops` (in program order), differentiating each op reached."""
        for op in reversed(ops):
            cotangents = [self.cotangents.get(r) for r in op.results]
            if all(c is None for c in cotangents):
                continue
            if not any(o in self.needs for o in op.operands):
                continue
            self.visit(op, cotangents)

    def visit(self, op: Operation, cotangents: list[Value | None]) -> None:
        if op.dialect_name() == "hir":
            self.through(op, *pipeline.expand_hir(op), cotangents)
            return
        if isinstance(op, func.CallOp):
            self.call(op, cotangents)
            return
        rule = VJP_RULES.get(op.name)
        if rule is None:
            record = registry.MIR.get(type(op))
            why = " (the op is not differentiable)" if record and not record.differentiable else ""
            raise RlxError(f"rlx.grad: no VJP rule for {op.name}{why}; the loss depends on a "
                           "wrt argument through it")
        results = list(rule(self, op, cotangents))
        self.take(op.name, op.operands, results)

    def take(self, what: str, operands: Sequence[SSAValue], results: Sequence[Value | None]
             ) -> None:
        """Accumulate the operand cotangents a rule returned (one per operand)."""
        if len(results) != len(operands):
            raise RlxError(f"rlx.grad: the VJP of {what} returned {len(results)} cotangents, "
                           f"expected {len(operands)} (one per operand)")
        for i, (operand, cotangent) in enumerate(zip(operands, results, strict=True)):
            if cotangent is not None and operand in self.needs:
                self.accumulate(operand, cotangent, lambda i=i: f"rlx.grad: {what}: operand {i}")

    def through(self, op: Operation, ops: list[Operation], results: Sequence[SSAValue],
                cotangents: list[Value | None]) -> None:
        """Differentiate `op` through `ops` (detached, reading op's operands; `results`
        stand for op's results): they are added to the graph and walked."""
        for new in ops:
            if new.results:  # an assign of an expansion is the forward's business
                self.g.add_op(new)
        self.mark([new for new in ops if new.results])
        for result, cotangent in zip(results, cotangents, strict=True):
            if cotangent is not None:
                self.accumulate(result, cotangent, lambda: f"rlx.grad: {op.name}")
        self.backprop([new for new in ops if new.results])

    def call(self, op: func.CallOp, cotangents: list[Value | None]) -> None:
        """A custom function: its user VJP, or its body cloned onto the call's operands."""
        name = op.callee.string_value()
        function = self.g.custom_function(name)
        if function is None:
            raise RlxError(f"rlx.grad: no VJP rule for func.call @{name} (not a custom_fn)")
        if function.vjp is not None:
            self.user_vjp(name, function.vjp, op, cotangents)
            return
        body = function.op.body.block
        mapping: dict[SSAValue, SSAValue] = dict(zip(body.args, op.operands, strict=True))
        ops = [inner.clone(value_mapper=mapping) for inner in body.ops
               if not isinstance(inner, func.ReturnOp)]
        ret = body.last_op
        assert isinstance(ret, func.ReturnOp)
        results = [mapping.get(v, v) for v in ret.arguments]
        self.through(op, ops, results, cotangents)

    def user_vjp(self, name: str, vjp: Callable[..., Sequence[Value | None]], op: func.CallOp,
                 cotangents: list[Value | None]) -> None:
        what = f"rlx.grad: custom_fn {name!r}: vjp"
        inputs = [self.value(v) for v in op.operands]
        outputs = [self.value(v) for v in op.results]
        cts = [c if c is not None else zeros_like(self, v) for c, v in zip(cotangents, outputs,
                                                                           strict=True)]
        returned = vjp(self.g, inputs, outputs, cts)
        if isinstance(returned, Value) or returned is None:
            returned = [returned]
        returned = list(returned)
        if len(returned) != len(inputs):
            raise RlxError(f"{what}: expected {len(inputs)} cotangents (one per input), got "
                           f"{len(returned)}")
        for i, (ct, v) in enumerate(zip(returned, inputs, strict=True)):
            if ct is None:
                continue
            if not isinstance(ct, Value) or ct.graph is not self.g:
                raise RlxError(f"{what}: cotangent {i}: expected a Value of the graph being "
                               f"differentiated or None, got {type(ct).__name__}")
            if ct.shape != v.shape or ct.dtype != "f32":
                raise RlxError(f"{what}: cotangent {i}: expected f32{list(v.shape)} (the "
                               f"input's shape), got {ct.dtype}{list(ct.shape)}")
        self.take(f"custom_fn {name!r}", list(op.operands), returned)


def _is_float(value: SSAValue) -> bool:
    return isinstance(value.type, TensorType) and dtype_of(value) == "f32"


def _wrt_arguments(g: Graph, wrt: Sequence[str] | str) -> list[BlockArgument]:
    """The arguments `wrt` names: float inputs, params or states of `g`."""
    names = [wrt] if isinstance(wrt, str) else list(wrt)
    arguments = {name: (role, arg) for name, role, arg, _ in g.arguments()}
    args = []
    for name in names:
        if not isinstance(name, str) or name not in arguments:
            known = ", ".join(n for n, (r, _) in arguments.items() if r != ROLE_POSITION)
            raise RlxError(f"rlx.grad: wrt: {name!r} is not an input, param or state of graph "
                           f"{g.name!r} (its arguments: {known or 'none'})")
        role, arg = arguments[name]
        if isinstance(arg.type, IndexType) or dtype_of(arg) != "f32":
            got = "the position" if isinstance(arg.type, IndexType) else \
                f"the {dtype_of(arg)} {role} {name!r}"
            raise RlxError(f"rlx.grad: wrt: {name!r} is not differentiable: expected an f32 "
                           f"input, param or state, got {got} (ids, indices and bytes have "
                           "no gradient)")
        args.append(arg)
    return args


def _check_loss_owner(g: Graph, loss: Value) -> None:
    """`loss` must be a Value of `g`."""
    if not isinstance(loss, Value) or loss.graph is not g:
        got = type(loss).__name__ if not isinstance(loss, Value) else \
            f"a Value of graph {loss.graph.name!r}"
        raise RlxError(f"rlx.grad: loss: expected a Value of graph {g.name!r}, got {got}")


def grad_values(g: Graph, loss: Value, wrt: Sequence[str] | str) -> list[Value]:
    """The gradients of the rank-0 f32 `loss` with respect to the arguments `wrt` names
    (inputs, params or states of `g`; a state: its value at the start of the call), one
    Value per name, of the argument's shape. The backward ops are appended to `g`, so
    an optimizer update can be built on them before `g.output`. A name the loss does not
    depend on gets zeros."""
    _check_loss_owner(g, loss)
    if loss.shape != () or loss.dtype != "f32":
        raise RlxError(f"rlx.grad: loss: expected a rank-0 f32 Value, got {loss.dtype} of "
                       f"shape {rules.fmt(loss.shape)}")
    args = _wrt_arguments(g, wrt)
    forward = g.body_ops()
    backward = Backward(g, args)
    with g.scope(GRAD_SCOPE):
        backward.mark(forward)
        backward.cotangents[loss.ssa] = g.constant(np.float32(1.0))
        backward.backprop(forward)
        _check_reached(loss.ssa, args, backward.cotangents, wrt)
        return [backward.gradient(arg) for arg in args]


def _check_reached(loss: SSAValue, args: Sequence[BlockArgument],
                   cotangents: dict[SSAValue, Value], wrt: Sequence[str] | str) -> None:
    """A `wrt` argument the loss depends on but no cotangent reached is used only as an
    operand without a gradient (a 0/1 mask, through ids or an argmax): an error, not a
    silent zero."""
    names = [wrt] if isinstance(wrt, str) else list(wrt)
    depends: set[SSAValue] = set()
    pending = [loss]
    while pending:
        value = pending.pop()
        if value in depends:
            continue
        depends.add(value)
        if isinstance(value.owner, Operation):
            pending.extend(value.owner.operands)
    for name, arg in zip(names, args, strict=True):
        if arg in depends and arg not in cotangents:
            raise RlxError(f"rlx.grad: wrt: the loss depends on {name!r} only through operands "
                           "that have no gradient (a 0/1 mask, ids, an argmax): expected a "
                           "differentiable use")


def grad(g: Graph, loss: Value, wrt: Sequence[str] | str) -> Graph:
    """A new graph with `g`'s inputs, params and states whose outputs are `(loss,
    *grads)` (named `loss`, `grad_<name>`): `g` is copied (it stays as it is) and the
    copy gets `grad_values`. `loss` is a rank-0 f32 Value of `g`, usually its output."""
    _check_loss_owner(g, loss)
    copy, mapping = g.duplicate()
    loss_copy = Value(copy, mapping[loss.ssa], loss.shape, loss.dtype)
    grads = grad_values(copy, loss_copy, wrt)
    names = ["loss", *(f"grad_{n}" for n in ([wrt] if isinstance(wrt, str) else wrt))]
    clash = set(names) & {a[0] for a in g.arguments()} or len(set(names)) != len(names)
    copy.output(loss_copy, *grads, names=None if clash else names)
    return copy


__all__ = ["Backward", "grad", "grad_values"]
