"""The numpy reference kernels against independent hand-written formulas.

Every expected value here is computed element by element with explicit Python loops and
`math` (float64), never with the vectorized code under test; (de)quantization is compared
bit for bit with the `gguf` package and with a byte-level decoder.  Any numpy warning
fails a test (the oracle must give IEEE results silently).
"""

from __future__ import annotations

import math
import struct
from itertools import product

import gguf.quants
import numpy as np
import pytest

from rlx_mlir.core import reference_kernels as R
from rlx_mlir.core.errors import ArgumentError, DTypeError, RlxError, ShapeError

pytestmark = pytest.mark.filterwarnings("error")

RTOL, ATOL = 1e-5, 1e-6


def rand(shape, lo=-2.0, hi=2.0, seed=0):
    return np.random.default_rng(seed).uniform(lo, hi, size=shape).astype(np.float32)


def check(got, want, rtol=RTOL, atol=ATOL):
    want = np.asarray(want, dtype=np.float64)
    assert isinstance(got, np.ndarray), type(got)
    assert got.dtype == np.float32
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def loop_map(fn, x):
    x = np.asarray(x)
    out = np.empty(x.shape, dtype=np.float64)
    for idx in np.ndindex(x.shape):
        out[idx] = fn(float(x[idx]))
    return out


def bshape(*shapes):
    """numpy broadcasting, by hand."""
    rank = max(len(s) for s in shapes)
    padded = [(1,) * (rank - len(s)) + tuple(s) for s in shapes]
    out = []
    for dims in zip(*padded, strict=True):
        big = {d for d in dims if d != 1}
        assert len(big) <= 1
        out.append(big.pop() if big else 1)
    return tuple(out)


def bidx(idx, shape):
    """The element of an operand of `shape` that broadcasts to output index `idx`."""
    tail = idx[len(idx) - len(shape):] if shape else ()
    return tuple(0 if d == 1 else i for i, d in zip(tail, shape, strict=True))


# ----------------------------------------------------------------------------- formulas


def _sig(v):
    return 1.0 / (1.0 + math.exp(-v)) if v > -700 else 0.0


UNARY = {
    "neg": lambda v: -v,
    "exp": math.exp,
    "log": math.log,
    "sqrt": math.sqrt,
    "rsqrt": lambda v: 1.0 / math.sqrt(v),
    "tanh": math.tanh,
    "sigmoid": _sig,
    "silu": lambda v: v * _sig(v),
    "gelu": lambda v: 0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0))),
    "gelu_tanh": lambda v: 0.5 * v * (
        1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v**3))
    ),
    "relu": lambda v: v if v > 0 else 0.0,
    "abs": math.fabs,
    "softplus": lambda v: math.log1p(math.exp(v)) if v < 30 else v + math.log1p(math.exp(-v)),
}
BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "max": max,
    "min": min,
    "pow": math.pow,
}
POSITIVE = {"log", "sqrt", "rsqrt"}


def loop_binary(fn, a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    shape = bshape(a.shape, b.shape)
    out = np.empty(shape)
    for idx in np.ndindex(shape):
        out[idx] = fn(float(a[bidx(idx, a.shape)]), float(b[bidx(idx, b.shape)]))
    return out


def loop_matmul(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    batch = bshape(a2.shape[:-2], b2.shape[:-2])
    m, k, n = a2.shape[-2], a2.shape[-1], b2.shape[-1]
    out = np.zeros(batch + (m, n))
    for bi in np.ndindex(batch):
        ai, bj = bidx(bi, a2.shape[:-2]), bidx(bi, b2.shape[:-2])
        for i, j in product(range(m), range(n)):
            out[bi + (i, j)] = sum(a2[ai + (i, p)] * b2[bj + (p, j)] for p in range(k))
    if a.ndim == 1:
        out = out[..., 0, :]
    if b.ndim == 1:
        out = out[..., 0]
    return out


def loop_rows(fn, x):
    """Apply fn(list of floats) -> list of floats to every last-axis row."""
    x = np.asarray(x, np.float64)
    out = np.empty(x.shape)
    for idx in np.ndindex(x.shape[:-1]):
        out[idx] = fn([float(v) for v in x[idx]])
    return out


def rms_row(row, gamma, beta, eps):
    r = math.sqrt(sum(v * v for v in row) / len(row) + eps)
    return [
        v / r * float(gamma[i]) + (0.0 if beta is None else float(beta[i]))
        for i, v in enumerate(row)
    ]


def ln_row(row, gamma, beta, eps):
    mu = sum(row) / len(row)
    var = sum((v - mu) ** 2 for v in row) / len(row)
    return [
        (v - mu) / math.sqrt(var + eps) * float(gamma[i])
        + (0.0 if beta is None else float(beta[i]))
        for i, v in enumerate(row)
    ]


def loop_rope(x, cos, sin, head_dim, n_rot, style):
    x = np.asarray(x, np.float64)
    out = x.copy()
    heads = x.shape[-1] // head_dim
    for idx in np.ndindex(x.shape[:-1]):
        s = idx[-1]
        for h in range(heads):
            for i in range(n_rot // 2):
                if style == "half":
                    p1, p2 = h * head_dim + i, h * head_dim + i + n_rot // 2
                else:
                    p1, p2 = h * head_dim + 2 * i, h * head_dim + 2 * i + 1
                x1, x2 = x[idx + (p1,)], x[idx + (p2,)]
                c, sn = float(cos[s, i]), float(sin[s, i])
                out[idx + (p1,)] = x1 * c - x2 * sn
                out[idx + (p2,)] = x2 * c + x1 * sn
    return out


def loop_attention(q, k, v, mask, num_heads, head_dim, num_kv_heads, mask_kind, scale):
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    unbatched = q.ndim == 2
    if unbatched:
        q, k, v = q[None], k[None], v[None]
    mask = None if mask is None else np.asarray(mask, np.float64)
    bsz, s_len, t_len = q.shape[0], q.shape[1], k.shape[1]
    group = num_heads // num_kv_heads
    out = np.zeros(q.shape)
    for b, h, i in product(range(bsz), range(num_heads), range(s_len)):
        kv = h // group
        logits = []
        for j in range(t_len):
            sc = scale * sum(
                q[b, i, h * head_dim + d] * k[b, j, kv * head_dim + d] for d in range(head_dim)
            )
            if mask is not None:
                mv = mask[i, j] if mask.ndim == 2 else mask[
                    b if mask.shape[0] > 1 else 0, h if mask.shape[1] > 1 else 0, i, j
                ]
            if mask_kind == "causal" and j > i + (t_len - s_len):
                continue
            if mask_kind == "custom" and mv == 0:
                continue
            if mask_kind == "bias":
                sc += mv
            if sc == -math.inf:
                continue
            logits.append((j, sc))
        if not logits:
            continue  # every key dropped: the row stays zero
        mx = max(sc for _, sc in logits)
        ws = [(j, math.exp(sc - mx)) for j, sc in logits]
        tot = sum(w for _, w in ws)
        for d in range(head_dim):
            out[b, i, h * head_dim + d] = sum(w * v[b, j, kv * head_dim + d] for j, w in ws) / tot
    return out[0] if unbatched else out


def loop_swiglu(x, up, gate, down):
    g = loop_matmul(x, gate)
    u = loop_matmul(x, up)
    return loop_matmul(loop_map(UNARY["silu"], g) * u, down)


# ----------------------------------------------------------------------------- elementwise

UNARY_SHAPES = [(), (1,), (7,), (3, 1, 5), (2, 3)]


@pytest.mark.parametrize("name", R.UNARY_OPS)
@pytest.mark.parametrize("shape", UNARY_SHAPES)
def test_unary(name, shape):
    lo, hi = (0.05, 4.0) if name in POSITIVE else (-5.0, 5.0)
    x = rand(shape, lo, hi, seed=len(shape))
    check(R.ELEMENTWISE[name](x), loop_map(UNARY[name], x))


@pytest.mark.parametrize("name", R.BINARY_OPS)
@pytest.mark.parametrize(
    "sa,sb",
    [((), ()), ((5,), ()), ((), (2, 3)), ((2, 1, 3), (4, 1)), ((1,), (3, 1)), ((3, 4), (3, 4))],
)
def test_binary_broadcasting(name, sa, sb):
    a = rand(sa, 0.1 if name == "pow" else -3.0, 3.0, seed=1)
    b = rand(sb, 0.5, 2.0, seed=2)
    fn = R.ELEMENTWISE[name]
    check(fn(a, b), loop_binary(BINARY[name], a, b))
    check(fn(b, a), loop_binary(BINARY[name], b, a))


def test_elementwise_table_and_scalars():
    assert set(R.ELEMENTWISE) == set(R.UNARY_OPS) | set(R.BINARY_OPS)
    assert len(R.ELEMENTWISE) == len(R.UNARY_OPS) + len(R.BINARY_OPS)  # no name twice
    x = rand((2, 3), seed=3)
    check(R.mul(x, 2.0), loop_map(lambda v: 2 * v, x))
    check(R.sub(2.0, x), loop_map(lambda v: 2 - v, x))
    check(R.div(1, x), loop_map(lambda v: 1 / v, x))
    check(R.add(1.5, 2), np.array(3.5))
    check(R.power(np.float32(-2.0), 3.0), np.array(-8.0))


def test_elementwise_special_values_are_ieee_and_silent():
    assert R.div(1.0, 0.0) == np.inf and R.div(-1.0, 0.0) == -np.inf
    assert np.isnan(R.div(0.0, 0.0))
    assert R.log(0.0) == -np.inf and np.isnan(R.log(-1.0))
    assert np.isnan(R.sqrt(-1.0)) and R.rsqrt(0.0) == np.inf
    assert R.exp(100.0) == np.inf and R.exp(-200.0) == 0.0
    assert R.sigmoid(-1000.0) == 0.0 and R.sigmoid(1000.0) == 1.0
    assert R.tanh(50.0) == 1.0 and R.relu(-3.0) == 0.0
    assert np.isnan(R.power(-2.0, 0.5))
    assert np.isnan(R.maximum(np.nan, 1.0)) and np.isnan(R.minimum(1.0, np.nan))


INT_BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "max": max, "min": min,
}
INT_UNARY = {"neg": lambda v: -v, "abs": abs, "relu": lambda v: max(v, 0)}


def wrap(value: int, bits: int) -> int:
    """Two's complement wrap-around of a Python int to `bits` bits."""
    half = 1 << (bits - 1)
    return (value + half) % (1 << bits) - half


def int_operand(dtype, shape, seed):
    """Random values with the extremes of the dtype mixed in."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed)
    x = rng.integers(-1000, 1000, size=shape).astype(dtype)
    flat = x.reshape(-1)
    for i, v in enumerate((info.max, info.min, -1, 0, info.max - 1)):
        if i < flat.size:
            flat[(i * 7) % flat.size] = v
    return x


def int_loop(fn, bits, *xs):
    shape = bshape(*(x.shape for x in xs))
    out = np.empty(shape, dtype=object)
    for idx in np.ndindex(shape):
        out[idx] = wrap(fn(*(int(x[bidx(idx, x.shape)]) for x in xs)), bits)
    return out


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("name", sorted(INT_BINARY))
@pytest.mark.parametrize("sa,sb", [((), ()), ((6,), (6,)), ((2, 1, 3), (4, 1)), ((5,), ())])
def test_integer_binary_keeps_dtype_and_wraps(dtype, name, sa, sb):
    a, b = int_operand(dtype, sa, 1), int_operand(dtype, sb, 2)
    bits = np.iinfo(dtype).bits
    for x, y in ((a, b), (b, a)):
        got = R.ELEMENTWISE[name](x, y)
        assert isinstance(got, np.ndarray) and got.dtype == dtype
        assert got.tolist() == int_loop(INT_BINARY[name], bits, x, y).tolist()


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("name", sorted(INT_UNARY))
@pytest.mark.parametrize("shape", [(), (7,), (2, 5)])
def test_integer_unary_keeps_dtype_and_wraps(dtype, name, shape):
    x = int_operand(dtype, shape, 3)
    got = R.ELEMENTWISE[name](x)
    assert isinstance(got, np.ndarray) and got.dtype == dtype
    assert got.tolist() == int_loop(INT_UNARY[name], np.iinfo(dtype).bits, x).tolist()


def test_integer_edges_and_scalars():
    i32 = np.array([np.iinfo(np.int32).max, np.iinfo(np.int32).min], dtype=np.int32)
    assert R.add(i32, np.int32(1)).tolist() == [-(2**31), -(2**31) + 1]
    assert R.neg(i32).tolist() == [-(2**31) + 1, -(2**31)]
    assert R.absolute(i32).tolist() == [2**31 - 1, -(2**31)]
    # A Python int takes the array's dtype; a float anywhere gives float32.
    assert R.mul(i32, 2).dtype == np.int32 and R.sub(3, i32).dtype == np.int32
    assert R.mul(i32, 2).tolist() == [-2, 0]
    check(R.add(np.arange(3, dtype=np.int64), 0.5), [0.5, 1.5, 2.5])
    check(R.add(1, 2), np.array(3.0))  # Python ints alone: float32 as before
    r = R.relu(np.array(-3, dtype=np.int64))
    assert r.dtype == np.int64 and r.shape == () and int(r) == 0
    # Fresh arrays, never the input.
    x = np.arange(4, dtype=np.int32)
    assert not np.shares_memory(R.absolute(x), x)


def test_gelu_reference_values():
    # Exact erf gelu, not the tanh form: known values to float32 precision.
    check(R.gelu(np.array([0.0, 1.0, -1.0, 3.0])),
          [0.0, 0.8413447460685429, -0.15865525393145707, 2.9959504514742566])
    xs = np.linspace(-12, 12, 97, dtype=np.float32)
    want = [0.5 * v * math.erfc(-v / math.sqrt(2.0)) for v in map(float, xs)]
    np.testing.assert_allclose(R.gelu(xs), want, rtol=RTOL, atol=1e-30)
    assert abs(float(R.gelu(1.0)) - float(R.gelu_tanh(1.0))) > 1e-5  # they differ


@pytest.mark.parametrize("act", [None, *R.ACTIVATIONS])
def test_activation(act):
    x = rand((3, 4), -4, 4, seed=4)
    want = x if act is None else loop_map(UNARY[act], x)
    check(R.activation(act, x), want)
    x0 = np.float32(0.7)
    check(R.activation(act, x0), float(x0) if act is None else UNARY[act](float(x0)))
    with pytest.raises(ArgumentError, match="activation"):
        R.activation("swish", x)


# ----------------------------------------------------------------------------- linear algebra

MATMUL_SHAPES = [
    ((3, 4), (4, 5)), ((1, 1), (1, 1)), ((4,), (4, 3)), ((3, 4), (4,)), ((5,), (5,)),
    ((2, 3, 4), (4, 2)), ((2, 1, 3, 4), (5, 4, 2)), ((3,), (2, 3, 1)),
]


@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES)
def test_matmul(sa, sb):
    a, b = rand(sa, seed=5), rand(sb, seed=6)
    check(R.matmul(a, b), loop_matmul(a, b))


def test_matmul_errors():
    with pytest.raises(ShapeError, match="inner"):
        R.matmul(rand((3, 4)), rand((5, 2)))
    with pytest.raises(ShapeError):
        R.matmul(np.float32(1), rand((1, 2)))


@pytest.mark.parametrize("act", [None, *R.ACTIVATIONS])
@pytest.mark.parametrize("with_bias", [False, True])
def test_fused_matmul_and_linear(act, with_bias):
    a, b, bias = rand((2, 3, 5), seed=7), rand((5, 4), seed=8), rand((4,), seed=9)
    y = loop_matmul(a, b)
    if with_bias:
        y = loop_binary(lambda p, q: p + q, y, bias)
    want = y if act is None else loop_map(UNARY[act], y)
    bb = bias if with_bias else None
    check(R.fused_matmul(a, b, bb, act), want)
    check(R.linear(a, b, bb, act), want)


def test_linear_shapes():
    x, w, b = rand((6,), seed=10), rand((6, 1), seed=11), rand((1,), seed=12)
    check(R.linear(x, w, b), loop_matmul(x, w) + float(b[0]))
    with pytest.raises(ShapeError, match="bias"):
        R.linear(x, w, rand((2,)))
    with pytest.raises(ShapeError, match="w"):
        R.linear(x, rand((5, 1)))


@pytest.mark.parametrize("xs", [(5,), (3, 5), (2, 1, 5)])
def test_swiglu_ffn(xs):
    x = rand(xs, seed=13)
    up, gate, down = rand((5, 7), seed=14), rand((5, 7), seed=15), rand((7, 3), seed=16)
    check(R.swiglu_ffn(x, up, gate, down), loop_swiglu(x, up, gate, down))


# ----------------------------------------------------------------------------- reductions, norms


def loop_reduce(x, kind, axes, keepdim):
    x = np.asarray(x, np.float64)
    axes = {a % x.ndim for a in ((axes,) if isinstance(axes, int) else axes)}
    acc: dict[tuple, list[float]] = {}
    for idx in np.ndindex(x.shape):
        if keepdim:
            key = tuple(0 if d in axes else i for d, i in enumerate(idx))
        else:
            key = tuple(i for d, i in enumerate(idx) if d not in axes)
        acc.setdefault(key, []).append(float(x[idx]))
    shape = tuple(1 if d in axes else n for d, n in enumerate(x.shape)) if keepdim else tuple(
        n for d, n in enumerate(x.shape) if d not in axes
    )
    fn = {"sum": math.fsum, "max": max, "min": min, "mean": lambda v: math.fsum(v) / len(v)}[kind]
    out = np.empty(shape)
    for key, vals in acc.items():
        out[key] = fn(vals)
    return out


@pytest.mark.parametrize("kind", R.REDUCE_KINDS)
@pytest.mark.parametrize(
    "shape,axes",
    [((3, 4, 5), 0), ((3, 4, 5), -1), ((3, 4, 5), (0, 2)), ((3, 4, 5), (2, 0, 1)),
     ((1,), 0), ((7,), (-1,)), ((2, 1, 3), 1)],
)
@pytest.mark.parametrize("keepdim", [False, True])
def test_reduce(kind, shape, axes, keepdim):
    x = rand(shape, seed=17)
    check(R.reduce(x, kind, axes, keepdim), loop_reduce(x, kind, axes, keepdim))


def test_reduce_all_axes_and_errors():
    x = rand((2, 3), seed=18)
    check(R.reduce(x, "sum", None), np.asarray(math.fsum(map(float, x.ravel()))))
    check(R.reduce(x, "mean", (0, 1), True), loop_reduce(x, "mean", (0, 1), True))
    with pytest.raises(ArgumentError, match="kind"):
        R.reduce(x, "prod", 0)
    with pytest.raises(ShapeError):
        R.reduce(x, "sum", 2)
    with pytest.raises(ShapeError):
        R.reduce(x, "sum", (0, -2))


def loop_softmax(x, axis):
    x = np.asarray(x, np.float64)
    axis %= x.ndim
    out = np.empty(x.shape)
    outer = tuple(1 if d == axis else n for d, n in enumerate(x.shape))
    for idx in np.ndindex(outer):
        pos = [idx[:axis] + (j,) + idx[axis + 1:] for j in range(x.shape[axis])]
        mx = max(float(x[p]) for p in pos)
        es = [math.exp(float(x[p]) - mx) for p in pos]
        for p, e in zip(pos, es, strict=True):
            out[p] = e / sum(es)
    return out


@pytest.mark.parametrize(
    "shape,axis", [((5,), 0), ((2, 3, 4), 0), ((2, 3, 4), 1), ((2, 3, 4), -1), ((3, 1), -1)]
)
def test_softmax(shape, axis):
    x = rand(shape, -3, 3, seed=19)
    check(R.softmax(x, axis), loop_softmax(x, axis))


def test_softmax_is_stable():
    x = np.array([[1000.0, 1001.0, 999.0], [-1000.0, -1000.0, -1002.0]], np.float32)
    check(R.softmax(x), loop_softmax(x, -1))
    with pytest.raises(ShapeError):
        R.softmax(np.float32(1.0))


@pytest.mark.parametrize("shape", [(1,), (7,), (3, 5), (2, 1, 4)])
@pytest.mark.parametrize("with_beta", [False, True])
def test_norms(shape, with_beta):
    x, r = rand(shape, seed=20), rand(shape, seed=21)
    n = shape[-1]
    g, b = rand((n,), 0.5, 1.5, seed=22), rand((n,), seed=23)
    beta = b if with_beta else None
    eps = 1e-5 if n > 1 else 1e-2
    check(R.rms_norm(x, g, beta, eps), loop_rows(lambda row: rms_row(row, g, beta, eps), x))
    check(R.layer_norm(x, g, beta, eps), loop_rows(lambda row: ln_row(row, g, beta, eps), x),
          atol=1e-5 if n == 1 else ATOL)
    h = (x + r).astype(np.float32)
    check(R.residual_rms_norm(x, r, g, beta, eps),
          loop_rows(lambda row: rms_row(row, g, beta, eps), h))


def test_norm_defaults_and_errors():
    x, g = rand((2, 4), seed=24), rand((4,), seed=25)
    check(R.rms_norm(x, g), loop_rows(lambda row: rms_row(row, g, None, 1e-5), x))
    with pytest.raises(ShapeError, match="gamma"):
        R.rms_norm(x, rand((1, 4)))
    with pytest.raises(ShapeError, match="beta"):
        R.layer_norm(x, g, rand((3,)))
    with pytest.raises(ShapeError, match="residual"):
        R.residual_rms_norm(x, rand((1, 4)), g)


# ----------------------------------------------------------------------------- rope


@pytest.mark.parametrize("style", R.ROPE_STYLES)
@pytest.mark.parametrize(
    "xshape,head_dim,n_rot",
    [((3, 8), 4, 4), ((2, 3, 8), 4, 2), ((1, 10), 5, 4), ((2, 1, 15), 5, 2), ((4, 6), 6, 6)],
)
def test_rope(style, xshape, head_dim, n_rot):
    x = rand(xshape, seed=26)
    ang = rand((xshape[-2], n_rot // 2), -3, 3, seed=27)
    cos, sin = np.cos(ang), np.sin(ang)
    want = loop_rope(x, cos, sin, head_dim, n_rot, style)
    check(R.rope(x, cos, sin, head_dim, n_rot, style), want)
    if n_rot == head_dim:
        check(R.rope(x, cos, sin, head_dim, style=style), want)


def test_rope_half_matches_hf_rotate_half():
    # HF: q·cos + rotate_half(q)·sin with cos/sin [S, D] = concat(c, c).
    s, heads, d = 3, 2, 6
    x = rand((s, heads * d), seed=28)
    ang = rand((s, d // 2), -3, 3, seed=29)
    c_full = np.concatenate([np.cos(ang), np.cos(ang)], -1).astype(np.float64)
    s_full = np.concatenate([np.sin(ang), np.sin(ang)], -1).astype(np.float64)
    want = np.empty((s, heads * d))
    for i, h in product(range(s), range(heads)):
        q = [float(v) for v in x[i, h * d:(h + 1) * d]]
        rot = [-v for v in q[d // 2:]] + q[: d // 2]
        for j in range(d):
            want[i, h * d + j] = q[j] * c_full[i, j] + rot[j] * s_full[i, j]
    check(R.rope(x, np.cos(ang), np.sin(ang), d), want)


def test_rope_errors():
    x, cs = rand((3, 8)), rand((3, 2))
    with pytest.raises(ShapeError, match="n_rot"):
        R.rope(x, rand((3, 1)), rand((3, 1)), 4, 3)
    with pytest.raises(ShapeError, match="cos"):
        R.rope(x, rand((2, 2)), cs, 4)
    with pytest.raises(ArgumentError, match="style"):
        R.rope(x, cs, cs, 4, style="neox")


# ----------------------------------------------------------------------------- attention


def run_attention(q, k, v, mask=None, *, num_heads, head_dim, num_kv_heads=None,
                  mask_kind="none", scale=None):
    hkv = num_heads if num_kv_heads is None else num_kv_heads
    sc = 1.0 / math.sqrt(head_dim) if scale is None else scale
    got = R.attention(q, k, v, mask, num_heads=num_heads, head_dim=head_dim,
                      num_kv_heads=num_kv_heads, mask_kind=mask_kind, scale=scale)
    check(got, loop_attention(q, k, v, mask, num_heads, head_dim, hkv, mask_kind, sc))
    return got


@pytest.mark.parametrize(
    "b,s,t,h,hkv,d,kind",
    [
        (2, 3, 3, 2, 2, 4, "none"),
        (None, 4, 4, 2, 1, 3, "causal"),
        (2, 2, 5, 4, 2, 3, "causal"),  # S < T
        (1, 1, 4, 4, 1, 5, "causal"),  # decode step
        (2, 3, 5, 6, 3, 2, "none"),
        (None, 1, 1, 1, 1, 1, "none"),
    ],
)
def test_attention_masks_none_causal(b, s, t, h, hkv, d, kind):
    lead = () if b is None else (b,)
    q = rand(lead + (s, h * d), seed=30)
    k = rand(lead + (t, hkv * d), seed=31)
    v = rand(lead + (t, hkv * d), seed=32)
    run_attention(q, k, v, num_heads=h, head_dim=d, num_kv_heads=hkv, mask_kind=kind)


def test_attention_gqa_head_mapping():
    # kv head 0 carries values 1, kv head 1 values 2: query heads 0,1 read 1; heads 2,3 read 2.
    b, s, t, d = 1, 2, 3, 2
    q, k = rand((b, s, 4 * d), seed=33), rand((b, t, 2 * d), seed=34)
    v = np.concatenate([np.ones((b, t, d)), 2 * np.ones((b, t, d))], -1).astype(np.float32)
    out = run_attention(q, k, v, num_heads=4, head_dim=d, num_kv_heads=2)
    np.testing.assert_allclose(out[..., : 2 * d], 1.0, rtol=1e-6)
    np.testing.assert_allclose(out[..., 2 * d:], 2.0, rtol=1e-6)


def test_attention_scale():
    q, k, v = rand((2, 4), seed=35), rand((3, 4), seed=36), rand((3, 4), seed=37)
    run_attention(q, k, v, num_heads=2, head_dim=2, scale=0.3)
    run_attention(q, k, v, num_heads=1, head_dim=4, scale=2.0)


def test_attention_custom_mask_fully_dropped_row_is_zero():
    s, t, h, d = 3, 4, 2, 3
    q = rand((2, s, h * d), seed=38)
    k, v = rand((2, t, h * d), seed=39), rand((2, t, h * d), seed=40)
    mask = np.array([[1, 0, 0.5, -3], [0, 0, 0, 0], [0, 1, 1, 0]], np.float32)
    out = run_attention(q, k, v, mask, num_heads=h, head_dim=d, mask_kind="custom")
    assert np.all(out[:, 1] == 0) and np.all(np.isfinite(out))
    out2 = run_attention(q[0], k[0], v[0], mask, num_heads=h, head_dim=d, mask_kind="custom")
    assert np.all(out2[1] == 0)


def test_attention_bias_with_neg_inf():
    s, t, h, d = 3, 4, 2, 2
    q = rand((1, s, h * d), seed=41)
    k, v = rand((1, t, h * d), seed=42), rand((1, t, h * d), seed=43)
    bias = rand((s, t), -1, 1, seed=44)
    bias[0, 1] = -np.inf
    bias[2, :] = -np.inf
    out = run_attention(q, k, v, bias, num_heads=h, head_dim=d, mask_kind="bias")
    assert np.all(out[:, 2] == 0) and np.all(np.isfinite(out))


@pytest.mark.parametrize("kind", ["custom", "bias"])
@pytest.mark.parametrize("mb,mh", [(1, 1), (2, 1), (1, 3), (2, 3)])
def test_attention_4d_masks_broadcast(kind, mb, mh):
    b, s, t, h, d = 2, 3, 4, 3, 2
    q = rand((b, s, h * d), seed=45)
    k, v = rand((b, t, h * d), seed=46), rand((b, t, h * d), seed=47)
    if kind == "custom":
        mask = (np.random.default_rng(48).uniform(size=(mb, mh, s, t)) > 0.4).astype(np.float32)
        mask[0, 0, 1] = 0.0  # a fully dropped row in at least one (b, h)
    else:
        mask = rand((mb, mh, s, t), -2, 2, seed=48)
        mask[0, 0, 0, :2] = -np.inf
    run_attention(q, k, v, mask, num_heads=h, head_dim=d, mask_kind=kind)


def test_attention_unbatched_4d_mask():
    s, t, h, d = 2, 3, 2, 2
    q, k, v = rand((s, h * d), seed=49), rand((t, h * d), seed=50), rand((t, h * d), seed=51)
    mask = rand((1, h, s, t), seed=52)
    run_attention(q, k, v, mask, num_heads=h, head_dim=d, mask_kind="bias")


def test_attention_errors():
    q, k = rand((1, 3, 4)), rand((1, 2, 4))
    with pytest.raises(ShapeError, match="S <= T"):
        R.attention(q, k, k, num_heads=2, head_dim=2, mask_kind="causal")
    with pytest.raises(ShapeError, match="mask"):
        R.attention(q, q, q, rand((3, 3)), num_heads=2, head_dim=2, mask_kind="causal")
    with pytest.raises(ShapeError, match="mask"):
        R.attention(q, q, q, num_heads=2, head_dim=2, mask_kind="bias")
    with pytest.raises(ShapeError, match="num_kv_heads"):
        R.attention(q, q, q, num_heads=2, head_dim=2, num_kv_heads=3)
    with pytest.raises(ArgumentError, match="mask_kind"):
        R.attention(q, q, q, num_heads=2, head_dim=2, mask_kind="alibi")


# ----------------------------------------------------------------------------- llama block


def loop_llama(x, p, cos, sin, mask, h, d, hkv, eps, kind, style):
    a = loop_rows(lambda row: rms_row(row, p["ln1_g"], p["ln1_b"], eps), x)
    q = loop_rope(loop_matmul(a, p["q_w"]), cos, sin, d, d, style)
    k = loop_rope(loop_matmul(a, p["k_w"]), cos, sin, d, d, style)
    v = loop_matmul(a, p["v_w"])
    att = loop_attention(q, k, v, mask, h, d, hkv, kind, 1.0 / math.sqrt(d))
    hid = np.asarray(x, np.float64) + loop_matmul(att, p["o_w"])
    n2 = loop_rows(lambda row: rms_row(row, p["ln2_g"], p["ln2_b"], eps), hid)
    return hid + loop_swiglu(n2, p["up_w"], p["gate_w"], p["down_w"])


@pytest.mark.parametrize(
    "lead,s,h,hkv,d,betas,kind,style",
    [
        ((), 3, 2, 2, 4, False, "causal", "half"),
        ((2,), 3, 4, 2, 2, True, "causal", "half"),
        ((1,), 1, 2, 1, 4, False, "causal", "interleaved"),
        ((2,), 2, 2, 1, 4, True, "none", "interleaved"),
        ((), 3, 2, 2, 2, False, "custom", "half"),
    ],
)
def test_llama_decoder_block(lead, s, h, hkv, d, betas, kind, style):
    dm, f = 6, 7
    rng = iter(range(60, 100))

    def r(shape, lo=-0.8, hi=0.8):
        return rand(shape, lo, hi, seed=next(rng))

    p = {
        "ln1_g": r((dm,), 0.5, 1.5), "ln1_b": r((dm,)) if betas else None,
        "q_w": r((dm, h * d)), "k_w": r((dm, hkv * d)), "v_w": r((dm, hkv * d)),
        "o_w": r((h * d, dm)), "ln2_g": r((dm,), 0.5, 1.5), "ln2_b": r((dm,)) if betas else None,
        "gate_w": r((dm, f)), "up_w": r((dm, f)), "down_w": r((f, dm)),
    }
    x = r(lead + (s, dm), -2, 2)
    ang = r((s, d // 2), -3, 3)
    cos, sin = np.cos(ang), np.sin(ang)
    mask = None
    if kind == "custom":
        mask = np.tril(np.ones((s, s), np.float32))
    got = R.llama_decoder_block(
        x, p["ln1_g"], p["ln1_b"], p["q_w"], p["k_w"], p["v_w"], p["o_w"], p["ln2_g"],
        p["ln2_b"], p["gate_w"], p["up_w"], p["down_w"], cos, sin, mask, num_heads=h,
        head_dim=d, num_kv_heads=hkv, eps=1e-5, mask_kind=kind, rope_style=style,
    )
    check(got, loop_llama(x, p, cos, sin, mask, h, d, hkv, 1e-5, kind, style))


# ----------------------------------------------------------------------------- data movement


def test_reshape():
    x = rand((2, 3, 4), seed=100)
    flat = [float(v) for v in x.ravel()]
    for target, shape in [((6, -1), (6, 4)), ([24], (24,)), ((-1, 1, 2), (12, 1, 2))]:
        got = R.reshape(x, target)
        assert got.shape == shape and [float(v) for v in got.ravel()] == flat
    one = rand((1, 1), seed=101)
    got = R.reshape(one, ())
    assert got.shape == () and float(got) == float(one[0, 0])
    assert R.reshape(got, (1, 1, 1)).shape == (1, 1, 1)
    with pytest.raises(ShapeError):
        R.reshape(x, (5, -1))
    with pytest.raises(ShapeError):
        R.reshape(x, (-1, -1))


@pytest.mark.parametrize("shape,perm", [((2, 3, 4), (2, 0, 1)), ((2, 3), (-1, 0)), ((5,), (0,)),
                                        ((1, 3, 1, 2), (3, 2, 1, 0)), ((), ())])
def test_transpose(shape, perm):
    x = rand(shape, seed=102)
    got = R.transpose(x, perm)
    p = [a % len(shape) for a in perm] if shape else []
    assert got.shape == tuple(shape[a] for a in p) and got.flags.c_contiguous
    for idx in np.ndindex(got.shape):
        src = [0] * len(shape)
        for out_axis, in_axis in enumerate(p):
            src[in_axis] = idx[out_axis]
        assert got[idx] == x[tuple(src)]


def test_transpose_errors():
    with pytest.raises(ShapeError, match="perm"):
        R.transpose(rand((2, 3)), (0, 0))
    with pytest.raises(ShapeError, match="perm"):
        R.transpose(rand((2, 3)), (0,))


@pytest.mark.parametrize(
    "shape,axis,start,length",
    [((5, 3), 0, 1, 3), ((5, 3), -1, 2, 1), ((2, 7, 1), 1, 0, 7), ((4,), 0, 3, 1)],
)
def test_narrow(shape, axis, start, length):
    x = rand(shape, seed=103)
    got = R.narrow(x, axis, start, length)
    ax = axis % len(shape)
    assert got.shape == shape[:ax] + (length,) + shape[ax + 1:]
    for idx in np.ndindex(got.shape):
        src = list(idx)
        src[ax] += start
        assert got[idx] == x[tuple(src)]
    got[...] = 0  # a fresh array, not a view of x
    assert not np.all(x == 0)


def test_narrow_errors():
    with pytest.raises(ShapeError, match="narrow"):
        R.narrow(rand((4,)), 0, 3, 2)
    with pytest.raises(ShapeError, match="narrow"):
        R.narrow(rand((4,)), 0, -1, 1)


@pytest.mark.parametrize("shapes,axis", [([(2, 3), (4, 3)], 0), ([(2, 1), (2, 2), (2, 3)], -1),
                                         ([(3,)], 0), ([(1, 2, 1), (1, 2, 1)], 2)])
def test_concat(shapes, axis):
    xs = [rand(s, seed=104 + i) for i, s in enumerate(shapes)]
    got = R.concat(xs, axis)
    ax = axis % len(shapes[0])
    offset = 0
    for x in xs:
        for idx in np.ndindex(x.shape):
            dst = list(idx)
            dst[ax] += offset
            assert got[tuple(dst)] == x[idx]
        offset += x.shape[ax]
    assert got.shape[ax] == offset


def test_concat_errors():
    with pytest.raises(ShapeError, match="concat"):
        R.concat([rand((2, 3)), rand((2, 4))], 0)
    with pytest.raises(ShapeError, match="concat"):
        R.concat([], 0)


@pytest.mark.parametrize("shape,target", [((), (2, 3)), ((3,), (2, 3)), ((2, 1), (2, 4)),
                                          ((1, 1), (1, 1)), ((1, 3, 1), (2, 1, 3, 5))])
def test_broadcast_to(shape, target):
    x = rand(shape, seed=110)
    got = R.broadcast_to(x, target)
    assert got.shape == target and got.flags.writeable
    for idx in np.ndindex(target):
        assert got[idx] == x[bidx(idx, shape)]


def test_broadcast_to_errors():
    with pytest.raises(ShapeError):
        R.broadcast_to(rand((3,)), (2, 4))
    with pytest.raises(ShapeError):
        R.broadcast_to(rand((2, 3)), (3,))


@pytest.mark.parametrize("xshape,ishape,axis", [((5, 3), (4,), 0), ((5, 3), (2, 2), 1),
                                                ((2, 3, 4), (), -1), ((1,), (3,), 0),
                                                ((3, 1, 2), (1, 1), 1)])
@pytest.mark.parametrize("idt", [np.int32, np.int64])
def test_gather(xshape, ishape, axis, idt):
    x = rand(xshape, seed=111)
    ax = axis % len(xshape)
    ind = np.random.default_rng(112).integers(0, xshape[ax], size=ishape).astype(idt)
    got = R.gather(x, ind, axis)
    assert got.shape == xshape[:ax] + ishape + xshape[ax + 1:] and got.dtype == np.float32
    for idx in np.ndindex(got.shape):
        pre, mid, post = idx[:ax], idx[ax:ax + len(ishape)], idx[ax + len(ishape):]
        assert got[idx] == x[pre + (int(ind[mid]),) + post]


def test_gather_keeps_integer_dtype():
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    got = R.gather(x, np.array([2, 0]), 0)
    assert got.dtype == np.int32 and got.tolist() == [[8, 9, 10, 11], [0, 1, 2, 3]]
    assert R.transpose(x, (1, 0)).dtype == np.int32


@pytest.mark.parametrize("bad", [[-1], [0, 5], [[1, 2], [7, 0]]])
def test_gather_and_embedding_reject_bad_indices(bad):
    x = rand((5, 3), seed=113)
    with pytest.raises(ArgumentError, match="out of range") as e:
        R.gather(x, np.array(bad), 0)
    assert isinstance(e.value, RlxError)
    with pytest.raises(ArgumentError, match="out of range"):
        R.embedding(x, np.array(bad, dtype=np.int32))
    with pytest.raises(DTypeError):
        R.gather(x, np.array([0.0, 1.0]), 0)


@pytest.mark.parametrize("ids_shape", [(), (1,), (4,), (2, 3)])
def test_embedding(ids_shape):
    table = rand((6, 5), seed=114)
    ids = np.random.default_rng(115).integers(0, 6, size=ids_shape).astype(np.int64)
    got = R.embedding(table, ids)
    assert got.shape == ids_shape + (5,) and got.dtype == np.float32
    for idx in np.ndindex(ids_shape):
        for j in range(5):
            assert got[idx + (j,)] == table[int(ids[idx]), j]


# ----------------------------------------------------------------------------- GGUF quantization

QT = gguf.GGMLQuantizationType
GGUF_TYPE = {"q8_0": QT.Q8_0, "q4_0": QT.Q4_0}


def quant_data(n, k, seed):
    w = rand((n, k), -3, 3, seed=seed)
    if k >= 64:
        w[0, 32:64] = 0.0  # an all-zero block (scale 0)
    w[-1, :4] = [1.0, -1.0, 0.5, -0.5]  # ties for the rounding
    w[-1, 4] = 127.0 if n > 1 else -8.0
    return w


def decode_bytes(row_bytes, scheme):
    """Byte-level decoder of one row, written from the GGUF layout description."""
    out = []
    step = 34 if scheme == "q8_0" else 18
    for off in range(0, len(row_bytes), step):
        blk = bytes(row_bytes[off:off + step])
        (d,) = struct.unpack("<e", blk[:2])
        if scheme == "q8_0":
            out += [d * q for q in struct.unpack("<32b", blk[2:])]
        else:
            lo = [(byte & 0x0F) - 8 for byte in blk[2:]]
            hi = [(byte >> 4) - 8 for byte in blk[2:]]
            out += [d * q for q in lo + hi]
    return out


@pytest.mark.parametrize("scheme", R.QUANT_SCHEMES)
@pytest.mark.parametrize("n,k", [(1, 32), (3, 64), (5, 96)])
def test_quantize_dequantize_bit_exact_with_gguf(scheme, n, k):
    w = quant_data(n, k, seed=120 + n)
    ours = R.QUANTIZE[scheme](w)
    ref = gguf.quants.quantize(w, GGUF_TYPE[scheme])
    assert ours.dtype == np.uint8 and ours.shape == ref.shape
    assert np.array_equal(ours, ref)
    deq = R.DEQUANTIZE[scheme](ours, k)
    gref = gguf.quants.dequantize(ref, GGUF_TYPE[scheme])
    assert deq.dtype == np.float32 and deq.shape == (n, k)
    assert np.array_equal(deq.view(np.uint32), gref.view(np.uint32))
    assert np.array_equal(R.DEQUANTIZE[scheme](ours), deq)  # k inferred from the bytes
    for i in range(n):
        assert deq[i].tolist() == decode_bytes(ours[i], scheme)


@pytest.mark.parametrize("scheme", R.QUANT_SCHEMES)
def test_dequantize_random_bytes(scheme):
    # Arbitrary bytes with finite f16 scales: every nibble/int8 pattern decodes like gguf.
    n, k = 4, 64
    step = 34 if scheme == "q8_0" else 18
    raw = np.random.default_rng(130).integers(0, 256, size=(n, k // 32 * step), dtype=np.uint8)
    scales = rand((n, k // 32), -2, 2, seed=131).astype("<f2").view(np.uint8)
    for blk in range(k // 32):
        raw[:, blk * step:blk * step + 2] = scales[:, 2 * blk:2 * blk + 2]
    deq = R.DEQUANTIZE[scheme](raw, k)
    assert np.array_equal(deq, gguf.quants.dequantize(raw, GGUF_TYPE[scheme]))
    for i in range(n):
        assert deq[i].tolist() == decode_bytes(raw[i], scheme)


@pytest.mark.parametrize("scheme", R.QUANT_SCHEMES)
@pytest.mark.parametrize("xshape", [(32,), (2, 32), (2, 1, 64)])
def test_dequant_matmul(scheme, xshape):
    k, n = xshape[-1], 3
    w = R.QUANTIZE[scheme](quant_data(n, k, seed=140))
    x = rand(xshape, seed=141)
    wd = gguf.quants.dequantize(w, GGUF_TYPE[scheme])
    check(R.dequant_matmul(x, w, scheme), loop_matmul(x, wd.T))


def test_quant_errors():
    w = R.quantize_q8_0(rand((2, 32)))
    with pytest.raises(DTypeError, match="ui8"):
        R.dequantize_q8_0(w.view(np.int8))
    with pytest.raises(ShapeError):
        R.dequantize_q8_0(w, 64)
    with pytest.raises(ShapeError):
        R.dequantize_q4_0(w)  # 34 bytes per row is not a multiple of 18
    with pytest.raises(ShapeError):
        R.quantize_q4_0(rand((2, 48)))
    with pytest.raises(ShapeError):
        R.dequant_matmul(rand((2, 64)), w, "q8_0")
    with pytest.raises(ArgumentError, match="scheme"):
        R.dequant_matmul(rand((2, 32)), w, "q7_k")  # not a scheme


# ----------------------------------------------------------------------------- convolution


def loop_conv(xp, w):
    b, tin, c = xp.shape
    k = w.shape[0]
    out = np.zeros((b, tin - k + 1, c))
    for bi, t, ci in product(range(b), range(tin - k + 1), range(c)):
        out[bi, t, ci] = sum(float(w[j, ci]) * float(xp[bi, t + j, ci]) for j in range(k))
    return out


@pytest.mark.parametrize("b,s,c,k", [(1, 1, 1, 1), (2, 5, 3, 3), (1, 4, 7, 4), (3, 2, 2, 5)])
@pytest.mark.parametrize("with_pad", [False, True])
def test_depthwise_conv1d_causal(b, s, c, k, with_pad):
    x, w = rand((b, s, c), seed=150), rand((k, c), seed=151)
    if with_pad and k == 1:
        with pytest.raises(ShapeError, match="K=1"):  # an empty left_pad is refused
            R.depthwise_conv1d_causal(x, w, np.zeros((b, 1, c), np.float32))
        return
    pad = rand((b, k - 1, c), seed=152) if with_pad else None
    xp = np.concatenate([pad if with_pad else np.zeros((b, k - 1, c), np.float32), x], axis=1)
    want = np.zeros((b, s, c))
    for bi, t, ci in product(range(b), range(s), range(c)):
        want[bi, t, ci] = sum(float(w[j, ci]) * float(xp[bi, t + j, ci]) for j in range(k))
    check(R.depthwise_conv1d_causal(x, w, pad), want)


@pytest.mark.parametrize("b,tin,c,k", [(1, 1, 1, 1), (2, 6, 3, 3), (1, 4, 5, 4)])
def test_depthwise_conv1d_valid(b, tin, c, k):
    xp, w = rand((b, tin, c), seed=153), rand((k, c), seed=154)
    check(R.depthwise_conv1d(xp, w), loop_conv(xp, w))


def test_depthwise_conv_errors():
    with pytest.raises(ShapeError, match="left_pad"):
        R.depthwise_conv1d_causal(rand((1, 3, 2)), rand((3, 2)), rand((1, 3, 2)))
    with pytest.raises(ShapeError, match="w"):
        R.depthwise_conv1d_causal(rand((1, 3, 2)), rand((3, 4)))
    with pytest.raises(ShapeError, match="time"):
        R.depthwise_conv1d(rand((1, 2, 2)), rand((3, 2)))
