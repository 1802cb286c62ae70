"""The interface between the reverse-mode walker (`rlx_mlir.autodiff.core`) and the VJP rules.

A VJP rule differentiates one forward op:

```python
def vjp(ctx: VjpContext, op: Operation, cotangents: Sequence[Value | None]) -> Sequence[Value | None]
```

- `op` is the forward op (mir, or an hir op with a rule of its own); its operands and
  results are SSA values of the graph being differentiated, `ctx.value(ssa)` wraps one as
  a `Value` of `ctx.g` so the rule can build with the Graph builder (`ctx.g.mul(...)`).
- `cotangents` has one entry per result of `op`: the gradient of the loss with respect to
  that result (same shape and dtype), or None where no gradient reaches it (read: zero).
  The walker calls a rule only when at least one entry is not None.
- The rule returns one entry per operand of `op` (`op.operands`, in order, optional
  operands that are present included, variadic ones flattened): the operand's cotangent,
  with exactly the operand's shape (`ctx.unbroadcast` sums a broadcast one back), or None
  for an operand no gradient flows to (ids, indices, quantized weights, 0/1 masks).
- Rules only build ops into `ctx.g`; they never mutate the forward ops.

`VJP_RULES` (`rlx_mlir.autodiff.rules`) maps an op's name (`mir.add`) to its rule; the
registry record says whether the op is differentiable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from xdsl.ir import Operation, SSAValue

from rlx_mlir.core import shape_inference as rules
from rlx_mlir.graph import Graph, Value


class VjpContext(Protocol):
    """What a VJP rule may use besides the Graph builder."""

    g: Graph
    """The graph the backward ops are built into (the forward graph itself)."""

    def value(self, ssa: SSAValue) -> Value:
        """The forward SSA value `ssa` as a Value of `g`."""
        ...

    def unbroadcast(self, cotangent: Value, shape: rules.Shape) -> Value:
        """`cotangent` summed over the axes that broadcasting added or stretched, so that
        it has `shape` (numpy broadcasting rules)."""
        ...

    def walker(self, g: Graph, wrt: Sequence[SSAValue]) -> Walker:
        """A fresh walker over another graph `g` (a region op's body rebuilt as a Graph)
        whose gradients are taken with respect to `wrt`."""
        ...


class Walker(VjpContext, Protocol):
    """A reverse walk over the ops of one graph (`ctx.walker`): what a rule of a region op
    uses to differentiate its body."""

    cotangents: dict[SSAValue, Value]
    """The cotangent of every value reached (set the body's result's before `backprop`)."""

    def mark(self, ops: Sequence[Operation]) -> None:
        """Forward over `ops`: which values depend on the `wrt` values."""
        ...

    def backprop(self, ops: Sequence[Operation]) -> None:
        """Reverse over `ops`, from the cotangents set in `cotangents`."""
        ...

    def gradient(self, value: SSAValue) -> Value:
        """The cotangent that reached `value`, or zeros."""
        ...


VjpRule = Callable[[VjpContext, Operation, Sequence[Value | None]], Sequence[Value | None]]
"""A VJP rule (see the module docstring)."""
