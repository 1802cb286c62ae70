"""VJP rules of the sequence ops (scan, selective_scan, gated_delta_net).

`selective_scan` and `gated_delta_net` differentiate by their reverse-pass ops
(`Graph.selective_scan_backward`, `Graph.gated_delta_net_backward`): native kernels that
run the recurrence backwards over the states they save, not an unrolled graph.

`mir.scan` differentiates into scans run over the steps in reverse: their body is the
VJP of the forward body (the body's ops cloned into a new Graph and walked by the
reverse-mode walker), fed each step's forward carry (from a trajectory of the forward);
their carry packs the cotangents flat (`scan_vjp`). `g.scan(..., checkpoint_every=k)`
builds a scan of k-step scans, whose VJP recomputes each segment's carries.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.ir import Operation, SSAValue

from rlx_mlir.autodiff.context import VjpContext, VjpRule
from rlx_mlir.autodiff.rules_elementwise import zeros
from rlx_mlir.core import shape_inference as rules
from rlx_mlir.dialects import mir
from rlx_mlir.graph import Graph, Value


def selective_scan_vjp(ctx: VjpContext, op: Operation, cotangents: Sequence[Value | None]
                       ) -> Sequence[Value | None]:
    """dx, dΔ, dA, dB, dC (and d initial_state) by `selective_scan_backward`."""
    assert isinstance(op, mir.SelectiveScanOp)
    x, delta, a, b, c = (ctx.value(v) for v in (op.x, op.delta, op.a, op.b, op.c))
    init = None if op.initial_state is None else ctx.value(op.initial_state)
    dy = cotangents[0] if cotangents[0] is not None else zeros(ctx.g, x.shape)
    d_final = cotangents[1] if len(cotangents) > 1 else None
    if d_final is None:
        d_final = zeros(ctx.g, rules.selective_scan_state(x.shape, a.shape))
    return ctx.g.selective_scan_backward(x, delta, a, b, c, dy, d_final, init)


def gated_delta_net_vjp(ctx: VjpContext, op: Operation, cotangents: Sequence[Value | None]
                        ) -> Sequence[Value | None]:
    """dq, dk, dv, dg, dβ (and d initial_state) by `gated_delta_net_backward`."""
    assert isinstance(op, mir.GatedDeltaNetOp)
    q, k, v, g, beta = (ctx.value(x) for x in (op.q, op.k, op.v, op.g, op.beta))
    init = None if op.initial_state is None else ctx.value(op.initial_state)
    do = cotangents[0] if cotangents[0] is not None else zeros(ctx.g, v.shape)
    d_final = cotangents[1] if len(cotangents) > 1 else None
    if d_final is None:
        d_final = zeros(ctx.g, rules.gated_delta_net_state(q.shape, v.shape))
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


def _body_vjp(ctx: VjpContext, op: mir.ScanOp, init: Value, xs: list[Value], consts: list[Value],
              d_xs: list[int], d_consts: list[int], carry_in_acc: bool) -> Graph:
    """A reverse scan's body. Inputs: acc, the step's forward carry, its xs slices, the
    cotangent of the carry it yields (unless `carry_in_acc`), the trajectory's cotangent
    at the step (when the forward keeps one), the consts. acc packs, flat, [the carry's
    cotangent (with `carry_in_acc`) | the cotangents of consts `d_consts` summed so far |
    those of the step's xs `d_xs`]; the body yields acc one step earlier."""
    carry_size = _size(init.shape) if carry_in_acc else 0
    const_sizes = [_size(consts[i].shape) for i in d_consts]
    b = Graph(f"{op.name}_vjp")
    acc = b.input("acc", (carry_size + sum(const_sizes) + sum(_size(xs[i].shape[1:]) for i in d_xs),))
    carry = b.input("carry", init.shape)
    slices = [b.input(f"x{i}", x.shape[1:], x.dtype) for i, x in enumerate(xs)]
    given = None if carry_in_acc else b.input("d_carry", init.shape)
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
    d_carry = given if given is not None else b.reshape(b.narrow(acc, 0, 0, carry_size),
                                                        init.shape)
    if d_trajectory is not None:
        d_carry = b.add(d_carry, d_trajectory)
    wrt = [*([carry] if carry_in_acc else []), *(inner[i] for i in d_consts),
           *(slices[i] for i in d_xs)]
    walker = ctx.walker(b, [v.ssa for v in wrt])
    walker.mark(ops)
    walker.cotangents[yielded] = d_carry
    walker.backprop(ops)
    parts = [_flat(b, walker.gradient(v.ssa)) for v in wrt]
    offset = carry_size
    for j, size in enumerate(const_sizes):   # the consts' sums go on
        at = j + carry_in_acc
        parts[at] = b.add(b.narrow(acc, 0, offset, size), parts[at])
        offset += size
    b.output(parts[0] if len(parts) == 1 else b.concat(parts, 0))
    return b


def _unpack(g: Graph, flat: Value, offset: int, shapes: list[rules.Shape],
            lead: tuple[int, ...] = ()) -> tuple[list[Value], int]:
    """Values of `shapes` (after the `lead` axes) read in turn from the last axis of
    `flat` from `offset`; returns them and the offset after them."""
    out = []
    for shape in shapes:
        size = _size(shape)
        out.append(g.reshape(g.narrow(flat, len(lead), offset, size), (*lead, *shape)))
        offset += size
    return out, offset


def scan_vjp(ctx: VjpContext, op: Operation, cotangents: Sequence[Value | None]
             ) -> Sequence[Value | None]:
    """d init, d xs, d consts of a scan by reverse scans over the VJP of its body: one
    whose carry packs [d carry | d consts summed | d xs of the step] (its trajectory kept
    when there are float xs); with float xs and float consts both, two, so that no
    trajectory holds the consts' sums: the first packs [d carry | d xs of the step], the
    second sums the consts' cotangents from the first's carry cotangents. Integer
    operands get none."""
    assert isinstance(op, mir.ScanOp)
    g = ctx.g
    init = ctx.value(op.init)
    xs, consts = [ctx.value(v) for v in op.xs], [ctx.value(v) for v in op.consts]
    if init.dtype != "f32":
        return [None] * len(op.operands)
    length = op.length.value.data
    float_xs = [i for i, x in enumerate(xs) if x.dtype == "f32"]
    float_consts = [i for i, c in enumerate(consts) if c.dtype == "f32"]
    split = bool(float_xs and float_consts)
    summed = [] if split else float_consts
    cotangent = cotangents[0]
    assert cotangent is not None
    trajectory = op.trajectory is not None
    start = zeros(ctx.g, init.shape) if trajectory else cotangent    # d final carry
    carries = _reversed(g, _carries(ctx, op, init, xs, consts, length))
    steps = [carries, *(_reversed(g, x) for x in xs)]
    d_trajectory = [_reversed(g, cotangent)] if trajectory else []

    first = _body_vjp(ctx, op, init, xs, consts, float_xs, summed, True)
    rest = sum(_size(consts[i].shape) for i in summed) + sum(_size(xs[i].shape[1:])
                                                            for i in float_xs)
    acc = g.concat([_flat(g, start), zeros(ctx.g, (rest,))], 0) if rest else _flat(g, start)
    if float_xs:
        last, every = g.scan(acc, first, length, xs=[*steps, *d_trajectory], consts=consts,
                             trajectory=True)
    else:
        last = every = g.scan(acc, first, length, xs=[*steps, *d_trajectory], consts=consts)
    assert isinstance(last, Value) and isinstance(every, Value)
    (d_init,), offset = _unpack(g, last, 0, [init.shape])
    d_consts: list[Value | None] = [None] * len(consts)
    found, offset = _unpack(g, last, offset, [consts[i].shape for i in summed])
    for i, value in zip(summed, found, strict=True):
        d_consts[i] = value
    d_xs: list[Value | None] = [None] * len(xs)
    found, _ = _unpack(g, every, offset, [xs[i].shape[1:] for i in float_xs], (length,))
    for i, value in zip(float_xs, found, strict=True):
        d_xs[i] = _reversed(g, value)
    if split:
        # the cotangent of the carry each reverse step yields: d final, then the first
        # scan's carry cotangents but its last
        (d_carries,), _ = _unpack(g, every, 0, [init.shape], (length,))
        d_out = g.reshape(start, (1, *init.shape))
        if length > 1:
            d_out = g.concat([d_out, g.narrow(d_carries, 0, 0, length - 1)], 0)
        second = _body_vjp(ctx, op, init, xs, consts, [], float_consts, False)
        sums = g.scan(zeros(ctx.g, (sum(_size(consts[i].shape) for i in float_consts),)), second,
                      length, xs=[*steps, d_out, *d_trajectory], consts=consts)
        assert isinstance(sums, Value)
        found, _ = _unpack(g, sums, 0, [consts[i].shape for i in float_consts])
        for i, value in zip(float_consts, found, strict=True):
            d_consts[i] = value
    return [d_init, *d_xs, *d_consts]


RULES: dict[str, VjpRule] = {
    "mir.selective_scan": selective_scan_vjp,
    "mir.gated_delta_net": gated_delta_net_vjp,
    "mir.scan": scan_vjp,
}
"""Op name (`mir.add`) -> its VJP rule."""
