"""VJP rules of the neural-network ops: gather and scatter_add, rotary embedding, attention
and the depthwise convolution (`mir.dequant_gather`, a ui8 table of raw GGUF blocks read
at integer ids, has no gradient: its registry record says so).
The builder's hir blocks reach them through their mir expansion (`hir.embedding` is a
gather, `hir.depthwise_conv1d_causal` a concat and a valid `mir.depthwise_conv1d`).

Each backward is composed of mir primitives through the Graph builder (`ctx.g`), so it
compiles like any forward graph (fused, arena-planned, threaded):

- gather (an embedding): the table's gradient is the cotangent summed into its rows,
  `mir.scatter_add` (repeated ids accumulate); the ids get none. scatter_add's own
  gradient is a gather.
- rope: a rotation by the angle θ has the rotation by −θ as its transpose, so
  `dx = rope(dy, cos, −sin)`; cos and sin get the pairwise products summed over the
  batch and the heads.
- attention: recomputes the probabilities P from q and k (matmul, the mask, softmax),
  then dV = Pᵀ·dO, dP = dO·Vᵀ, dZ = P ∘ (dP − rowsum(dP ∘ P)), dQ = scale·dZ·K,
  dK = scale·dZᵀ·Q, and a bias mask gets dZ summed back to its shape. Query heads are
  stacked per kv head (`[B, Hkv, G·S, D]`), so the matmuls sum grouped-query gradients
  over the heads that share a kv head without a broadcast.
- depthwise_conv1d: dx is the full correlation of dy with the flipped taps (a causal
  convolution of dy padded with K−1 zeros), dw[k] the sum over batch and time of
  x shifted by k times dy.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.dialects import arith
from xdsl.ir import Operation, SSAValue

from rlx_mlir.autodiff.context import VjpContext, VjpRule
from rlx_mlir.autodiff.rules_elementwise import elementwise, zeros
from rlx_mlir.core import shape_inference as rules
from rlx_mlir.core.errors import RlxError
from rlx_mlir.dialects.elementwise_fns import ScalarBody
from rlx_mlir.graph import Value

MASKED = -1e30
"""The logit a dropped key gets in the recomputed scores: finite (a dropped key beside a
kept one gets probability exactly 0, and no inf − inf), the keep mask then zeroes the
rows that drop every key, as the forward does."""



def _int(op: Operation, name: str) -> int:
    return op.properties[name].value.data  # pyright: ignore[reportAttributeAccessIssue]


def _static(op: Operation, what: str, shape: rules.Shape) -> tuple[int, ...]:
    """`shape` when every dim is static, else an RlxError naming `op` and `what`."""
    if not rules.is_static_shape(shape):
        raise RlxError(f"{op.name}: the gradient needs a static {what}, got {rules.fmt(shape)}")
    return tuple(int(d) for d in shape)  # pyright: ignore[reportArgumentType]


# ----------------------------------------------------------------------------- gather, embedding


def gather_vjp(ctx: VjpContext, op: Operation, cts: Sequence[Value | None]) -> list[Value | None]:
    """`mir.gather(input, indices, axis)`: input gets the cotangent scattered back (summed
    at repeated indices); indices get none."""
    (dy,) = cts
    x = ctx.value(op.operands[0])
    if dy is None or x.dtype != "f32":
        return [None, None]
    axis = _int(op, "axis") % x.rank
    dim = _static(op, "gathered axis", (x.shape[axis],))[0]
    return [ctx.g.scatter_add(dy, ctx.value(op.operands[1]), axis, dim), None]


def scatter_add_vjp(ctx: VjpContext, op: Operation, cts: Sequence[Value | None]
                    ) -> list[Value | None]:
    """`mir.scatter_add(updates, indices, axis, dim_size)`: linear, its transpose is the
    gather of the cotangent; indices get none."""
    (dy,) = cts
    if dy is None:
        return [None, None]
    return [ctx.g.gather(dy, ctx.value(op.operands[1]), _int(op, "axis")), None]


# ----------------------------------------------------------------------------- rope


def _rope_pairs(g, x: Value, head_dim: int, n_rot: int, style: str) -> tuple[Value, Value]:
    """The two members (x1, x2) of every rotated pair of `x` [*B, S, H·D], each
    [*B, S, H, n_rot/2] (`reference_kernels._rope64`)."""
    heads = x.shape[-1] // head_dim  # pyright: ignore[reportOperatorIssue]
    half = n_rot // 2
    xh = g.reshape(x, (*x.shape[:-1], heads, head_dim))
    rotated = g.narrow(xh, -1, 0, n_rot) if n_rot < head_dim else xh
    if style == "half":
        return g.narrow(rotated, -1, 0, half), g.narrow(rotated, -1, half, half)
    pairs = g.reshape(rotated, (*rotated.shape[:-1], half, 2))
    lead = rotated.shape[:-1]
    return (g.reshape(g.narrow(pairs, -1, 0, 1), (*lead, half)),
            g.reshape(g.narrow(pairs, -1, 1, 1), (*lead, half)))


def rope_vjp(ctx: VjpContext, op: Operation, cts: Sequence[Value | None]) -> list[Value | None]:
    """`rope(x, cos, sin)`: each pair is rotated by θ, so x gets dy rotated by −θ
    (`rope(dy, cos, −sin)`, same head_dim, n_rot, style); with y1 = x1·c − x2·s and
    y2 = x2·c + x1·s, cos gets Σ dy1·x1 + dy2·x2 and sin Σ dy2·x1 − dy1·x2 over the batch
    and the heads."""
    (dy,) = cts
    if dy is None:
        return [None, None, None]
    g = ctx.g
    x, cos, sin = (ctx.value(v) for v in op.operands)
    head_dim, n_rot = _int(op, "head_dim"), _int(op, "n_rot")
    style = op.properties["style"].data.value  # pyright: ignore[reportAttributeAccessIssue]
    dx = g.rope(dy, cos, g.neg(sin), head_dim=head_dim, n_rot=n_rot, style=style)
    x1, x2 = _rope_pairs(g, x, head_dim, n_rot, style)
    d1, d2 = _rope_pairs(g, dy, head_dim, n_rot, style)
    # [*B, S, H, n_rot/2] summed over the batch and the heads -> [S, n_rot/2]
    axes = (*range(x.rank - 2), x.rank - 1)
    dcos = g.reduce_sum(g.add(g.mul(d1, x1), g.mul(d2, x2)), axes)
    dsin = g.reduce_sum(g.sub(g.mul(d2, x1), g.mul(d1, x2)), axes)
    return [dx, dcos, dsin]


# ----------------------------------------------------------------------------- attention


def _grouped(g, x: Value, batch, steps, kv_heads: int, group: int, head_dim: int) -> Value:
    """q-like `x` [B, S, H·D] as [B, Hkv, G·S, D]: query head h = kv·G + g reads kv head
    kv, so the G heads of one kv head are stacked along the rows."""
    x5 = g.transpose(g.reshape(x, (batch, steps, kv_heads, group, head_dim)), (0, 2, 3, 1, 4))
    return g.reshape(x5, (batch, kv_heads, group * steps, head_dim))


def _ungrouped(g, x: Value, batch, steps, kv_heads: int, group: int, head_dim: int) -> Value:
    """The inverse of `_grouped`: [B, Hkv, G·S, D] -> [B, S, H·D]."""
    x5 = g.transpose(g.reshape(x, (batch, kv_heads, group, steps, head_dim)), (0, 3, 1, 2, 4))
    return g.reshape(x5, (batch, steps, kv_heads * group * head_dim))


def _heads(g, x: Value, batch, steps, kv_heads: int, head_dim: int) -> Value:
    """k-like `x` [B, T, Hkv·D] as [B, Hkv, T, D]."""
    return g.transpose(g.reshape(x, (batch, steps, kv_heads, head_dim)), (0, 2, 1, 3))


def _unheads(g, x: Value, batch, steps, kv_heads: int, head_dim: int) -> Value:
    """The inverse of `_heads`: [B, Hkv, T, D] -> [B, T, Hkv·D]."""
    return g.reshape(g.transpose(x, (0, 2, 1, 3)), (batch, steps, kv_heads * head_dim))


def _causal_keep(s: int, t: int, window: int | None) -> np.ndarray:
    """keep[i, j] = 1 where query i sees key j (j ≤ i + (T−S), and j > i + (T−S) − W
    with a window), as `reference_kernels._attention64`."""
    i, j = np.arange(s)[:, None], np.arange(t)[None, :]
    keep = j <= i + (t - s)
    if window is not None:
        keep &= j > i + (t - s) - window
    return keep.astype(np.float32)


def _nonzero(b: ScalarBody, m: SSAValue) -> SSAValue:
    """1.0 where the custom mask keeps the key (m != 0, as the forward: nan keeps), else 0."""
    keeps = b.emit(arith.CmpfOp(m, b.const(0.0), "une"))
    return b.select(keeps, b.const(1.0), b.const(0.0))


def _mask5(g, mask: Value, num_heads: int, kv_heads: int, group: int) -> Value:
    """A mask [S, T] or [1|B, 1|H, S, T] as a broadcast operand of the scores
    [B, Hkv, G, S, T]."""
    if mask.rank == 2:
        return mask
    mb, mh, s, t = mask.shape
    if mh == num_heads and num_heads > 1:
        return g.reshape(mask, (mb, kv_heads, group, s, t))
    return g.reshape(mask, (mb, 1, 1, s, t))


def attention_vjp(ctx: VjpContext, op: Operation, cts: Sequence[Value | None]
                  ) -> list[Value | None]:
    """Grouped-query attention (every mask_kind, scale, window, GQA group): the
    probabilities recomputed, then the softmax-attention backward (module docstring). A
    bias mask gets the logits' gradient summed to its shape; a custom (0/1) mask none."""
    (dout,) = cts
    if dout is None:
        return [None] * len(op.operands)
    g = ctx.g
    q, k, v = (ctx.value(x) for x in op.operands[:3])
    mask = ctx.value(op.operands[3]) if len(op.operands) > 3 else None
    num_heads, head_dim = _int(op, "num_heads"), _int(op, "head_dim")
    kv_heads = _int(op, "num_kv_heads")
    group = num_heads // kv_heads
    kind = op.properties["mask_kind"].data.value  # pyright: ignore[reportAttributeAccessIssue]
    scale = op.properties["scale"].value.data  # pyright: ignore[reportAttributeAccessIssue]
    window = op.properties.get("window")
    window = None if window is None else window.value.data  # pyright: ignore[reportAttributeAccessIssue]

    if q.rank == 2:  # unbatched: B = 1, the gradients reshaped back at the end
        q, k, v, dout = (g.reshape(x, (1, *x.shape)) for x in (q, k, v, dout))
    # the recomputed scores are a matmul of two [?, D] operands: native kernels need one static
    batch, seq_q, seq_k = _static(op, "batch and sequence lengths (B, S, T)",
                                  (q.shape[0], q.shape[1], k.shape[1]))
    qg = _grouped(g, q, batch, seq_q, kv_heads, group, head_dim)      # [B, Hkv, G·S, D]
    dog = _grouped(g, dout, batch, seq_q, kv_heads, group, head_dim)
    kh = _heads(g, k, batch, seq_k, kv_heads, head_dim)              # [B, Hkv, T, D]
    vh = _heads(g, v, batch, seq_k, kv_heads, head_dim)
    scores_shape = (batch, kv_heads, group, seq_q, seq_k)
    rows_shape = (batch, kv_heads, group * seq_q, seq_k)

    z = g.reshape(g.mul(g.matmul(qg, g.transpose(kh, (0, 1, 3, 2))), scale), scores_shape)
    keep = None
    if kind == "causal":
        keep = g.constant(_causal_keep(seq_q, seq_k, window))
    elif kind == "custom":
        assert mask is not None
        keep = _mask5(g, elementwise(ctx, [mask], _nonzero), num_heads, kv_heads, group)
    elif kind == "bias":
        assert mask is not None
        z = g.add(z, _mask5(g, mask, num_heads, kv_heads, group))
    if keep is not None:  # dropped keys get MASKED, rows dropping every key P = 0
        z = g.add(z, g.mul(g.sub(keep, 1.0), -MASKED))
        p = g.mul(g.softmax(z, -1), keep)
    else:
        p = g.softmax(z, -1)
    p = g.reshape(p, rows_shape)                                     # [B, Hkv, G·S, T]

    dv = g.matmul(g.transpose(p, (0, 1, 3, 2)), dog)                # [B, Hkv, T, D]
    dp = g.matmul(dog, g.transpose(vh, (0, 1, 3, 2)))               # [B, Hkv, G·S, T]
    dz = g.mul(p, g.sub(dp, g.reduce_sum(g.mul(dp, p), -1, keepdim=True)))
    dq = g.mul(g.matmul(dz, kh), scale)
    dk = g.mul(g.matmul(g.transpose(dz, (0, 1, 3, 2)), qg), scale)

    grads = [_ungrouped(g, dq, batch, seq_q, kv_heads, group, head_dim),
             _unheads(g, dk, batch, seq_k, kv_heads, head_dim),
             _unheads(g, dv, batch, seq_k, kv_heads, head_dim)]
    grads = [g.reshape(d, ctx.value(x).shape) for d, x in zip(grads, op.operands[:3], strict=True)]
    if mask is None:
        return grads
    if kind != "bias":
        return [*grads, None]  # a 0/1 mask selects keys: no gradient
    dz4 = g.reshape(dz, (batch, num_heads, seq_q, seq_k))            # h = kv·G + g
    if mask.rank == 2:
        return [*grads, g.reduce_sum(dz4, (0, 1))]
    return [*grads, ctx.unbroadcast(dz4, mask.shape)]


# ----------------------------------------------------------------------------- depthwise conv




def _flipped_taps(g, w: Value) -> Value:
    """w [K, C] with its taps in reverse order."""
    taps = w.shape[0]
    order = g.constant(np.arange(taps - 1, -1, -1, dtype=np.int32))
    return g.gather(w, order, 0)


def _conv_grads(ctx: VjpContext, op: Operation, padded: Value, w: Value, dy: Value | None,
                dwindow: Value | None) -> tuple[Value | None, Value | None]:
    """(d padded, d w) of the valid convolution `y[b, t] = Σₖ w[k]·padded[b, t+k]` of
    `padded` [B, S+K−1, C] by `w` [K, C], with `dwindow` [B, K−1, C] the cotangent of
    the window (padded's last K−1 rows) when the op returns it."""
    g = ctx.g
    batch, length, channels = _static(op, "input", padded.shape)
    taps = _static(op, "kernel", w.shape)[0]
    steps = length - taps + 1
    dx = dw = None
    if dy is not None:
        if taps == 1:
            dx = g.mul(dy, g.reshape(w, (channels,)))
        else:
            # dx[t'] = Σₖ w[k]·dy[t'−k]: a causal conv of [dy, 0…0] by the flipped taps
            tail = zeros(g, (batch, taps - 1, channels))
            dx = g.depthwise_conv1d_causal(g.concat([dy, tail], 1), _flipped_taps(g, w))
        # dw[k] = Σ_{b,t} padded[b, t+k]·dy[b, t]: one shifted product per tap
        dw = g.reshape(g.concat([g.reduce_sum(g.mul(g.narrow(padded, 1, k, steps), dy), (0, 1),
                                              keepdim=True) for k in range(taps)], 0),
                       (taps, channels))
    if dwindow is not None:
        head = zeros(g, (batch, steps, channels))
        window = g.concat([head, dwindow], 1)
        dx = window if dx is None else g.add(dx, window)
    return dx, dw


def depthwise_conv1d_vjp(ctx: VjpContext, op: Operation, cts: Sequence[Value | None]
                         ) -> list[Value | None]:
    """`mir.depthwise_conv1d(input, weight)` (valid, pre-padded input; with return_state
    also the window): `_conv_grads`."""
    dy, dwindow = (list(cts) + [None])[:2]
    padded, w = ctx.value(op.operands[0]), ctx.value(op.operands[1])
    return list(_conv_grads(ctx, op, padded, w, dy, dwindow))


RULES: dict[str, VjpRule] = {
    "mir.gather": gather_vjp,
    "mir.scatter_add": scatter_add_vjp,
    "mir.rope": rope_vjp,
    "mir.attention": attention_vjp,
    "mir.depthwise_conv1d": depthwise_conv1d_vjp,
}
"""Op name (`mir.add`) -> its VJP rule."""
