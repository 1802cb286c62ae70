"""VJP rules of the sequence ops (scan, selective_scan, gated_delta_net).

`selective_scan` and `gated_delta_net` differentiate by their reverse-pass ops
(`Graph.selective_scan_backward`, `Graph.gated_delta_net_backward`): native kernels that
run the recurrence backwards over the states they save, not an unrolled graph."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.ir import Operation

from rlx_mlir.autodiff.context import VjpContext, VjpRule
from rlx_mlir.core import shape_inference as rules
from rlx_mlir.dialects import mir
from rlx_mlir.graph import Value


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


RULES: dict[str, VjpRule] = {
    "mir.selective_scan": selective_scan_vjp,
    "mir.gated_delta_net": gated_delta_net_vjp,
}
"""Op name (`mir.add`) -> its VJP rule."""
