"""VJP rules of the sequence ops (scan, selective_scan, gated_delta_net).

`selective_scan` and `gated_delta_net` differentiate by their reverse-pass ops
(`Graph.selective_scan_backward`, `Graph.gated_delta_net_backward`): native kernels that
run the recurrence backwards over the states they save, not an unrolled graph.

`mir.scan` differentiates into a second scan, run over the steps in reverse: its body is
the VJP of the forward body (the body's ops cloned into a new Graph and walked by the
reverse-mode walker), fed each step's forward carry (from a trajectory of the forward).
Its carry packs, flat, the carry's cotangent, the consts' cotangents summed so far and
the step's xs cotangents (kept by the reverse scan's trajectory when there are float xs).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.ir import Operation, SSAValue

from rlx_mlir.autodiff.context import VjpContext, VjpRule
from rlx_mlir.core import shape_inference as rules
from rlx_mlir.dialects import mir
from rlx_mlir.graph import Graph, Value


def _zeros(ctx: VjpContext, shape: rules.Shape) -> Value:
    """A zero f32 tensor of `shape` (a broadcast scalar, not a dense constant)."""
    return ctx.g.broadcast_to(ctx.g.constant(np.float32(0.0)), shape)


def selective_scan_vjp(ctx: VjpContext, op: Operation, cotangents: Sequence[Value | None]
                       ) -> Sequence[Value | None]:
    """dx, dΔ, dA, dB, dC (and d initial_state) by `selective_scan_backward`."""
    assert isinstance(op, mir.SelectiveScanOp)
    x, delta, a, b, c = (ctx.value(v) for v in (op.x, op.delta, op.a, op.b, op.c))
    init = None if op.initial_state is None else ctx.value(op.initial_state)
    dy = cotangents[0] if cotangents[0] is not None else _zeros(ctx, x.shape)
    d_final = cotangents[1] if len(cotangents) > 1 else None
    if d_final is None:
        d_final = _zeros(ctx, rules.selective_scan_state(x.shape, a.shape))
    return ctx.g.selective_scan_backward(x, delta, a, b, c, dy, d_final, init)


def gated_delta_net_vjp(ctx: VjpContext, op: Operation, cotangents: Sequence[Value | None]
                        ) -> Sequence[Value | None]:
    """dq, dk, dv, dg, dβ (and d initial_state) by `gated_delta_net_backward`."""
    assert isinstance(op, mir.GatedDeltaNetOp)
    q, k, v, g, beta = (ctx.value(x) for x in (op.q, op.k, op.v, op.g, op.beta))
    init = None if op.initial_state is None else ctx.value(op.initial_state)
    do = cotangents[0] if cotangents[0] is not None else _zeros(ctx, v.shape)
    d_final = cotangents[1] if len(cotangents) > 1 else None
    if d_final is None:
        d_final = _zeros(ctx, rules.gated_delta_net_state(q.shape, v.shape))
    return ctx.g.gated_delta_net_backward(q, k, v, g, beta, do, d_final, init)


def _flat(g: Graph, v: Value) -> Value:
    return g.reshape(v, (_size(v.shape),))


def _size(shape: rules.Shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _reversed(g: Graph, v: Value) -> Value:
    """`v` with its axis 0 reversed."""
    order = np.arange(v.shape[0] - 1, -1, -1, dtype=np.int32)
    return g.gather(v, g.constant(order), axis=0)


def _carries(ctx: VjpContext, op: mir.ScanOp, init: Value, xs: list[Value],
             consts: list[Value], length: int) -> Value:
    """The carry before each step, [length, *carry]: init, then the forward's trajectory
    but its last (the forward's own result with `trajectory`, else a copy of the forward
    scan that keeps it)."""
    g = ctx.g
    if op.trajectory is not None:
        every = ctx.value(op.result)
    else:
        again = mir.ScanOp(init.ssa, [x.ssa for x in xs], [c.ssa for c in consts], length,
                           op.body.clone(), True)
        g.add_op(again)
        every = ctx.value(again.result)
    first = g.reshape(init, (1, *init.shape))
    return first if length == 1 else g.concat([first, g.narrow(every, 0, 0, length - 1)], 0)


def _body_vjp(op: mir.ScanOp, init: Value, xs: list[Value], consts: list[Value],
              float_xs: list[int], float_consts: list[int]) -> Graph:
    """The reverse scan's body: inputs (acc, the step's forward carry, its xs slices, the
    trajectory's cotangent at the step when the forward keeps one, the consts); acc packs
    [d carry | d consts so far (float ones) | d xs of the step (float ones)], flat."""
    from rlx_mlir.autodiff.core import Backward  # the walker imports the rule families

    sizes = [_size(init.shape), *(_size(consts[i].shape) for i in float_consts),
             *(_size(xs[i].shape[1:]) for i in float_xs)]
    b = Graph(f"{op.name}_vjp")
    acc = b.input("acc", (sum(sizes),))
    carry = b.input("carry", init.shape)
    slices = [b.input(f"x{i}", x.shape[1:], x.dtype) for i, x in enumerate(xs)]
    d_trajectory = b.input("d_trajectory", init.shape) if op.trajectory is not None else None
    inner = [b.input(f"c{i}", c.shape, c.dtype) for i, c in enumerate(consts)]
    block = op.body.block
    mapping: dict[SSAValue, SSAValue] = dict(
        zip(block.args, [v.ssa for v in (carry, *slices, *inner)], strict=True))
    ops = []
    for forward in block.ops:
        if isinstance(forward, mir.YieldOp):
            yielded = mapping.get(forward.arguments[0], forward.arguments[0])
            continue
        ops.append(clone := forward.clone(value_mapper=mapping))
        b.add_op(clone)
    offsets = np.cumsum([0, *sizes]).tolist()
    d_carry = b.reshape(b.narrow(acc, 0, 0, sizes[0]), init.shape)
    if d_trajectory is not None:
        d_carry = b.add(d_carry, d_trajectory)
    wrt = [carry, *(slices[i] for i in float_xs), *(inner[i] for i in float_consts)]
    walker = Backward(b, [v.ssa for v in wrt])
    walker.mark(ops)
    walker.cotangents[yielded] = d_carry
    walker.backprop(ops)
    grads = [_flat(b, walker.gradient(v.ssa)) for v in wrt]
    d_consts = [b.add(b.narrow(acc, 0, offsets[1 + j], sizes[1 + j]), grads[1 + len(float_xs) + j])
                for j in range(len(float_consts))]
    parts = [grads[0], *d_consts, *grads[1:1 + len(float_xs)]]
    b.output(parts[0] if len(parts) == 1 else b.concat(parts, 0))
    return b


def scan_vjp(ctx: VjpContext, op: Operation, cotangents: Sequence[Value | None]
             ) -> Sequence[Value | None]:
    """d init, d xs, d consts of a scan by a reverse scan over the VJP of its body (see
    the module docstring); integer operands get none."""
    assert isinstance(op, mir.ScanOp)
    g = ctx.g
    init = ctx.value(op.init)
    xs, consts = [ctx.value(v) for v in op.xs], [ctx.value(v) for v in op.consts]
    if init.dtype != "f32":
        return [None] * len(op.operands)
    length = op.length.value.data
    float_xs = [i for i, x in enumerate(xs) if x.dtype == "f32"]
    float_consts = [i for i, c in enumerate(consts) if c.dtype == "f32"]
    body = _body_vjp(op, init, xs, consts, float_xs, float_consts)
    cotangent = cotangents[0]
    assert cotangent is not None
    trajectory = op.trajectory is not None
    const_sizes = [_size(consts[i].shape) for i in float_consts]
    x_sizes = [_size(xs[i].shape[1:]) for i in float_xs]
    start = _flat(g, _zeros(ctx, init.shape) if trajectory else cotangent)
    rest = sum(const_sizes) + sum(x_sizes)
    acc = g.concat([start, _zeros(ctx, (rest,))], 0) if rest else start
    steps = [_reversed(g, _carries(ctx, op, init, xs, consts, length)),
             *(_reversed(g, x) for x in xs), *([_reversed(g, cotangent)] if trajectory else [])]
    if float_xs:
        last, every = g.scan(acc, body, length, xs=steps, consts=consts, trajectory=True)
    else:
        last = every = g.scan(acc, body, length, xs=steps, consts=consts)
    assert isinstance(last, Value) and isinstance(every, Value)
    size = _size(init.shape)
    d_init = g.reshape(g.narrow(last, 0, 0, size), init.shape)
    d_consts: list[Value | None] = [None] * len(consts)
    offset = size
    for i, n in zip(float_consts, const_sizes, strict=True):
        d_consts[i] = g.reshape(g.narrow(last, 0, offset, n), consts[i].shape)
        offset += n
    d_xs: list[Value | None] = [None] * len(xs)
    for i, n in zip(float_xs, x_sizes, strict=True):
        d_xs[i] = _reversed(g, g.reshape(g.narrow(every, 1, offset, n), xs[i].shape))
        offset += n
    return [d_init, *d_xs, *d_consts]


RULES: dict[str, VjpRule] = {
    "mir.selective_scan": selective_scan_vjp,
    "mir.gated_delta_net": gated_delta_net_vjp,
    "mir.scan": scan_vjp,
}
"""Op name (`mir.add`) -> its VJP rule."""
