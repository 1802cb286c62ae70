"""The Graph builder: shape inference and build-time errors of every method."""

from __future__ import annotations

import numpy as np
import pytest

import rlx_mlir as rlx
from rlx_mlir.ir import parse_module


@pytest.fixture
def g() -> rlx.Graph:
    return rlx.Graph("t")


# ---------------------------------------------------------------------------- arguments


def test_input_param_defaults_and_dtypes(g):
    x = g.input("x", (4, 64))
    ids = g.input("ids", [3], dtype="i32")
    w = g.param("w", (2, 34), dtype="ui8")
    s = g.input("s", ())
    assert (x.shape, x.dtype) == ((4, 64), "f32")
    assert (ids.shape, ids.dtype) == ((3,), "i32")
    assert (w.shape, w.dtype) == ((2, 34), "ui8")
    assert s.shape == ()
    assert g.inputs == ["x", "ids", "s"] and g.params == ["w"]


@pytest.mark.parametrize(
    "name, shape, dtype, error, words",
    [
        ("x", (4, 0), "f32", rlx.ShapeError, "every dimension must be >= 1"),
        ("x", (4, -2), "f32", rlx.ShapeError, "every dimension must be >= 1"),
        ("x", (4,), "f16", rlx.DTypeError, "dtype: expected one of f32, i32, i64, ui8 .*got 'f16'"),
        ("1x", (4,), "f32", rlx.GraphError, "Python identifier"),
        ("x", "abc", "f32", rlx.RlxError, "expected a shape"),
        ("x", (2.5,), "f32", rlx.RlxError, "expected a shape"),
    ],
)
def test_argument_errors(g, name, shape, dtype, error, words):
    with pytest.raises(error, match=words):
        g.input(name, shape, dtype)


def test_duplicate_argument_name(g):
    g.input("x", (2,))
    with pytest.raises(rlx.GraphError, match="'x' is already an argument"):
        g.param("x", (2,))


def test_output_errors(g):
    x = g.input("x", (2,))
    with pytest.raises(rlx.GraphError, match="at least one"):
        g.output()
    with pytest.raises(rlx.GraphError, match="expected a graph Value"):
        g.output(3.0)
    other = rlx.Graph("other").input("y", (2,))
    with pytest.raises(rlx.GraphError, match="belongs to graph 'other'"):
        g.output(other)
    with pytest.raises(rlx.GraphError, match="belongs to graph 'other'"):
        g.add(x, other)
    with pytest.raises(rlx.GraphError, match="has no output"):
        g.to_mlir()


def test_value_has_no_truth_value(g):
    with pytest.raises(rlx.GraphError):
        bool(g.input("x", (2,)))


# ---------------------------------------------------------------------------- elementwise


@pytest.mark.parametrize("method", ["add", "sub", "mul", "div", "maximum", "minimum", "pow"])
@pytest.mark.parametrize(
    "a, b, out",
    [((4, 8), (4, 8), (4, 8)), ((4, 1), (8,), (4, 8)), ((), (3, 2), (3, 2)), ((2, 1, 5), (3, 1), (2, 3, 5))],
)
def test_binary_broadcasting(g, method, a, b, out):
    y = getattr(g, method)(g.input("a", a), g.input("b", b))
    assert y.shape == out and y.dtype == "f32"


@pytest.mark.parametrize("method", ["add", "sub", "mul", "div", "maximum", "minimum", "pow"])
def test_binary_errors(g, method):
    a, b = g.input("a", (4, 3)), g.input("b", (4,))
    with pytest.raises(rlx.ShapeError, match=rf"{method}: lhs \[4, 3\] and rhs \[4\] are not broadcast-compatible"):
        getattr(g, method)(a, b)
    with pytest.raises(rlx.DTypeError, match=f"{method}: rhs: expected element type f32, got i32"):
        getattr(g, method)(a, g.input("i", (3,), dtype="i32"))
    with pytest.raises(rlx.GraphError, match="at least one operand"):
        getattr(g, method)(1.0, 2.0)


def test_operators_and_python_scalars(g):
    x = g.input("x", (2, 3))
    for y in (x + 1, 1 + x, x - 2.0, 2.0 - x, x * 2, 2 * x, x / 2, 2 / x, -x, x**2.0):
        assert y.shape == (2, 3) and y.dtype == "f32"
    w = g.param("w", (3, 5))
    assert (x @ w).shape == (2, 5)
    assert g.add(x, np.float32(1.5)).shape == (2, 3)
    with pytest.raises(rlx.GraphError, match="expected a Value or a Python scalar"):
        x + "a"


UNARY = ["neg", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "silu", "gelu", "gelu_tanh", "relu", "abs",
         "softplus"]


@pytest.mark.parametrize("method", UNARY)
@pytest.mark.parametrize("shape", [(), (7,), (2, 3, 1)])
def test_unary_shapes(g, method, shape):
    y = getattr(g, method)(g.input("x", shape))
    assert y.shape == shape and y.dtype == "f32"


@pytest.mark.parametrize("method", UNARY)
def test_unary_errors(g, method):
    with pytest.raises(rlx.DTypeError, match=f"{method}: x: expected element type f32, got i64"):
        getattr(g, method)(g.input("i", (3,), dtype="i64"))
    with pytest.raises(rlx.GraphError):
        getattr(g, method)(np.ones(3))


# ---------------------------------------------------------------------------- linear algebra


@pytest.mark.parametrize(
    "a, b, out",
    [((2, 3), (3, 4), (2, 4)), ((3,), (3, 4), (4,)), ((2, 3), (3,), (2,)), ((3,), (3,), ()),
     ((5, 2, 3), (3, 4), (5, 2, 4)), ((5, 1, 2, 3), (7, 3, 4), (5, 7, 2, 4))],
)
def test_matmul_shapes(g, a, b, out):
    assert g.matmul(g.input("a", a), g.input("b", b)).shape == out


def test_matmul_errors(g):
    with pytest.raises(rlx.ShapeError, match="matmul: matmul inner dimensions differ: lhs \\[2, 3\\] has K=3, rhs \\[4, 5\\] has K=4"):
        g.matmul(g.input("a", (2, 3)), g.input("b", (4, 5)))
    with pytest.raises(rlx.ShapeError, match="rank >= 1"):
        g.matmul(g.input("s", ()), g.input("c", (3,)))
    with pytest.raises(rlx.ShapeError, match="not broadcast-compatible"):
        g.matmul(g.input("d", (2, 2, 3)), g.input("e", (4, 3, 5)))


def test_linear(g):
    x, w, b = g.input("x", (2, 5, 8)), g.param("w", (8, 16)), g.param("b", (16,))
    assert g.linear(x, w).shape == (2, 5, 16)
    for act in ("relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh"):
        assert g.linear(x, w, b, activation=act).shape == (2, 5, 16)
    with pytest.raises(rlx.ShapeError, match=r"linear: w: expected shape \[8, N\]"):
        g.linear(x, g.param("w2", (7, 16)))
    with pytest.raises(rlx.ShapeError, match=r"linear: bias: expected shape \[16\]"):
        g.linear(x, w, g.param("b2", (15,)))
    with pytest.raises(rlx.RlxError, match="activation: expected one of .*got 'swish'"):
        g.linear(x, w, activation="swish")
    with pytest.raises(rlx.ShapeError, match="w: expected rank 2"):
        g.linear(x, g.param("w3", (8,)))


def test_swiglu_ffn(g):
    x = g.input("x", (3, 8))
    up, gate, down = g.param("up", (8, 12)), g.param("gate", (8, 12)), g.param("down", (12, 8))
    assert g.swiglu_ffn(x, up, gate, down).shape == (3, 8)
    with pytest.raises(rlx.ShapeError, match=r"swiglu_ffn: gate: expected shape \[8, 12\] \(same as up\)"):
        g.swiglu_ffn(x, up, g.param("gate2", (8, 11)), down)
    with pytest.raises(rlx.ShapeError, match=r"swiglu_ffn: down: expected shape \[12, 4\]"):
        g.swiglu_ffn(x, up, gate, g.param("down2", (11, 4)))


def test_dequant_matmul(g):
    x = g.input("x", (3, 64))
    assert g.dequant_matmul(x, g.param("w8", (5, 68), "ui8"), "q8_0").shape == (3, 5)
    assert g.dequant_matmul(x, g.param("w4", (5, 36), "ui8"), "q4_0").shape == (3, 5)
    with pytest.raises(rlx.ShapeError, match=r"w: expected shape \[5, 68\]"):
        g.dequant_matmul(x, g.param("wbad", (5, 36), "ui8"), "q8_0")
    with pytest.raises(rlx.ShapeError, match="multiple of 32"):
        g.dequant_matmul(g.input("x2", (3, 40)), g.param("w5", (5, 34), "ui8"), "q8_0")
    with pytest.raises(rlx.DTypeError, match="w: expected element type ui8, got f32"):
        g.dequant_matmul(x, g.param("wf", (5, 68)), "q8_0")
    with pytest.raises(rlx.RlxError, match="scheme: expected one of"):
        g.dequant_matmul(x, g.param("w6", (5, 68), "ui8"), "q4_2")  # (q3_k is a scheme now)


# ---------------------------------------------------------------------------- reductions, norms


@pytest.mark.parametrize("method", ["reduce_sum", "reduce_max", "reduce_min", "reduce_mean"])
def test_reductions(g, method):
    x = g.input("x", (2, 3, 4))
    f = getattr(g, method)
    assert f(x, -1).shape == (2, 3)
    assert f(x, (0, 2), keepdim=True).shape == (1, 3, 1)
    assert f(x, (0, 1, 2)).shape == ()
    assert f(x, [1]).shape == (2, 4)
    with pytest.raises(rlx.ShapeError, match=f"{method}: axes: axis 3 is out of range for rank 3"):
        f(x, 3)
    with pytest.raises(rlx.ShapeError, match="repeat an axis"):
        f(x, (1, -2))


def test_softmax(g):
    x = g.input("x", (2, 3))
    assert g.softmax(x).shape == g.softmax(x, axis=0).shape == (2, 3)
    with pytest.raises(rlx.ShapeError, match="softmax: axis: axis -3 is out of range for rank 2"):
        g.softmax(x, axis=-3)


@pytest.mark.parametrize("method", ["rms_norm", "layer_norm"])
def test_norms(g, method):
    x, gamma, beta = g.input("x", (2, 3, 8)), g.param("g", (8,)), g.param("b", (8,))
    assert getattr(g, method)(x, gamma, beta, eps=1e-6).shape == (2, 3, 8)
    with pytest.raises(rlx.ShapeError, match=rf"{method}: gamma: expected shape \[8\] \(N = last dim of x\), got \[2, 8\]"):
        getattr(g, method)(x, g.param("g2", (2, 8)), beta)
    with pytest.raises(rlx.ShapeError, match=rf"{method}: beta: expected shape \[8\]"):
        getattr(g, method)(x, gamma, g.param("b2", (4,)))
    with pytest.raises(rlx.RlxError, match="eps: expected a finite positive float"):
        getattr(g, method)(x, gamma, beta, eps=0.0)


def test_rms_norm_without_beta_and_layer_norm_needs_beta(g):
    x, gamma = g.input("x", (8,)), g.param("g", (8,))
    assert g.rms_norm(x, gamma).shape == (8,)
    with pytest.raises(rlx.RlxError, match="layer_norm: beta"):
        g.layer_norm(x, gamma, None)


def test_residual_rms_norm(g):
    x, r, gamma = g.input("x", (3, 8)), g.input("r", (3, 8)), g.param("g", (8,))
    assert g.residual_rms_norm(x, r, gamma).shape == (3, 8)
    with pytest.raises(rlx.ShapeError, match=r"residual_rms_norm: residual: expected shape \[3, 8\]"):
        g.residual_rms_norm(x, g.input("r2", (1, 8)), gamma)


# ---------------------------------------------------------------------------- data movement


def test_reshape(g):
    x = g.input("x", (2, 3, 4))
    assert g.reshape(x, (6, 4)).shape == (6, 4)
    assert g.reshape(x, [-1, 2]).shape == (12, 2)
    assert g.reshape(g.input("one", (1, 1)), ()).shape == ()
    with pytest.raises(rlx.ShapeError, match="element counts differ"):
        g.reshape(x, (5, 5))
    with pytest.raises(rlx.ShapeError, match="at most one -1"):
        g.reshape(x, (-1, -1))
    with pytest.raises(rlx.ShapeError, match="cannot reshape"):
        g.reshape(x, (-1, 5))


def test_transpose(g):
    x = g.input("x", (2, 3, 4))
    assert g.transpose(x, (2, 0, 1)).shape == (4, 2, 3)
    assert g.transpose(x, (-1, -2, -3)).shape == (4, 3, 2)
    with pytest.raises(rlx.ShapeError, match="transpose: perm: expected a permutation"):
        g.transpose(x, (0, 0, 1))
    with pytest.raises(rlx.ShapeError, match="expected 3 entries"):
        g.transpose(x, (1, 0))


def test_narrow(g):
    x = g.input("x", (4, 10))
    assert g.narrow(x, 1, 2, 5).shape == (4, 5)
    assert g.narrow(x, -2, 3, 1).shape == (1, 10)
    with pytest.raises(rlx.ShapeError, match="narrow: narrow: start=8, length=5"):
        g.narrow(x, 1, 8, 5)
    with pytest.raises(rlx.ShapeError, match="axis 2 is out of range"):
        g.narrow(x, 2, 0, 1)


def test_concat(g):
    a, b = g.input("a", (2, 3)), g.input("b", (2, 5))
    assert g.concat([a, b], axis=1).shape == (2, 8)
    assert g.concat([a], axis=-1).shape == (2, 3)
    with pytest.raises(rlx.ShapeError, match=r"concat: input 1 has shape \[2, 5\], expected \[2, 3\] except along axis 0"):
        g.concat([a, b], axis=0)
    with pytest.raises(rlx.ShapeError, match="at least one input"):
        g.concat([], axis=0)
    with pytest.raises(rlx.DTypeError, match=r"values\[1\]: expected element type f32, got i32"):
        g.concat([a, g.input("i", (2, 1), dtype="i32")], axis=1)


def test_broadcast_to(g):
    x = g.input("x", (3, 1))
    assert g.broadcast_to(x, (2, 3, 4)).shape == (2, 3, 4)
    with pytest.raises(rlx.ShapeError, match=r"cannot be broadcast to \[4, 4\]"):
        g.broadcast_to(x, (4, 4))
    with pytest.raises(rlx.ShapeError, match="cannot be broadcast"):
        g.broadcast_to(x, (3,))


def test_gather_and_embedding(g):
    x = g.input("x", (5, 6, 7))
    idx = g.input("idx", (2, 3), dtype="i64")
    assert g.gather(x, idx).shape == (2, 3, 6, 7)
    assert g.gather(x, idx, axis=-1).shape == (5, 6, 2, 3)
    with pytest.raises(rlx.DTypeError, match="gather: indices: expected element type i32 or i64, got f32"):
        g.gather(x, g.input("fidx", (2,)))
    table = g.param("table", (100, 16))
    assert g.embedding(table, g.input("ids", (4, 9), dtype="i32")).shape == (4, 9, 16)
    with pytest.raises(rlx.ShapeError, match="table: expected rank 2"):
        g.embedding(x, idx)


def test_constant(g):
    assert g.constant(np.ones((2, 3))).dtype == "f32"
    assert g.constant(np.arange(3, dtype=np.int32)).dtype == "i32"
    assert g.constant(np.arange(3)).dtype == "i64"
    assert g.constant(2.5).shape == ()
    with pytest.raises(rlx.DTypeError, match="expected a float or integer array"):
        g.constant(np.array(["a"]))
    with pytest.raises(rlx.ShapeError, match="every dimension must be >= 1"):
        g.constant(np.ones((0, 3)))


# ---------------------------------------------------------------------------- transformer blocks


def test_rope(g):
    x = g.input("x", (2, 5, 4 * 6))
    cos, sin = g.input("cos", (5, 3)), g.input("sin", (5, 3))
    assert g.rope(x, cos, sin, head_dim=6).shape == (2, 5, 24)
    assert g.rope(x, g.input("c2", (5, 2)), g.input("s2", (5, 2)), 6, n_rot=4, style="interleaved").shape == (2, 5, 24)
    with pytest.raises(rlx.ShapeError, match=r"n_rot: expected an even value in \[2, head_dim=6\], got 5"):
        g.rope(x, cos, sin, 6, n_rot=5)
    with pytest.raises(rlx.ShapeError, match="n_rot: expected an even value"):
        g.rope(x, cos, sin, 6, n_rot=8)
    with pytest.raises(rlx.ShapeError, match="head_dim: must divide"):
        g.rope(x, cos, sin, 5)
    with pytest.raises(rlx.ShapeError, match=r"cos: expected shape \[5, 3\]"):
        g.rope(x, g.input("c3", (4, 3)), sin, 6)
    with pytest.raises(rlx.RlxError, match="style: expected one of"):
        g.rope(x, cos, sin, 6, style="full")


def _qkv(g, s=4, t=6, h=4, hkv=2, d=8, batch=(2,)):
    q = g.input("q", batch + (s, h * d))
    k = g.input("k", batch + (t, hkv * d))
    v = g.input("v", batch + (t, hkv * d))
    return q, k, v


def test_attention_shapes(g):
    q, k, v = _qkv(g)
    assert g.attention(q, k, v, num_heads=4, head_dim=8, num_kv_heads=2).shape == (2, 4, 32)
    assert g.attention(q, k, v, num_heads=4, head_dim=8, num_kv_heads=2, mask_kind="causal").shape == (2, 4, 32)
    for mshape in [(4, 6), (1, 1, 4, 6), (2, 4, 4, 6), (2, 1, 4, 6)]:
        m = g.input(f"m{len(mshape)}_{mshape[0]}_{mshape[1]}", mshape)
        for kind in ("custom", "bias"):
            assert g.attention(q, k, v, m, num_heads=4, head_dim=8, num_kv_heads=2, mask_kind=kind, scale=0.5).shape == (2, 4, 32)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(num_heads=4, head_dim=8, num_kv_heads=3), "num_kv_heads: must divide num_heads=4"),
        (dict(num_heads=3, head_dim=8, num_kv_heads=1), "q: last dim must be num_heads\\*head_dim = 3\\*8 = 24, got 32"),
        (dict(num_heads=4, head_dim=8, num_kv_heads=1), r"k: expected shape \[2, 6, 8\]"),
        (dict(num_heads=4, head_dim=8, num_kv_heads=2, mask_kind="custom"), "needs a mask operand"),
        (dict(num_heads=4, head_dim=8, num_kv_heads=2, mask_kind="diagonal"), "mask_kind: expected one of"),
        (dict(num_heads=0, head_dim=8, num_kv_heads=2), "must be >= 1"),
    ],
)
def test_attention_errors(g, kwargs, words):
    q, k, v = _qkv(g)
    with pytest.raises(rlx.RlxError, match=words):
        g.attention(q, k, v, **kwargs)


def test_attention_mask_errors(g):
    q, k, v = _qkv(g)
    m = g.input("m", (4, 6))
    with pytest.raises(rlx.ShapeError, match="mask_kind 'causal' takes no mask"):
        g.attention(q, k, v, m, num_heads=4, head_dim=8, num_kv_heads=2, mask_kind="causal")
    with pytest.raises(rlx.ShapeError, match=r"mask: expected \[S, T\] = \[4, 6\] or \[1\|2, 1\|4, 4, 6\]"):
        g.attention(q, k, v, g.input("m3", (3, 4, 4, 6)), num_heads=4, head_dim=8, num_kv_heads=2, mask_kind="bias")
    q2, k2, v2 = g.input("q2", (7, 32)), g.input("k2", (6, 16)), g.input("v2", (6, 16))
    with pytest.raises(rlx.ShapeError, match="causal attention needs S <= T, got S=7 > T=6"):
        g.attention(q2, k2, v2, num_heads=4, head_dim=8, num_kv_heads=2, mask_kind="causal")


def test_depthwise_conv1d_causal(g):
    x, w = g.input("x", (2, 9, 4)), g.param("w", (3, 4))
    assert g.depthwise_conv1d_causal(x, w).shape == (2, 9, 4)
    assert g.depthwise_conv1d_causal(x, w, g.input("pad", (2, 2, 4))).shape == (2, 9, 4)
    with pytest.raises(rlx.ShapeError, match=r"left_pad: expected shape \[2, 2, 4\] \(\[B, K-1, C\]\)"):
        g.depthwise_conv1d_causal(x, w, g.input("pad2", (2, 3, 4)))
    with pytest.raises(rlx.ShapeError, match=r"w: expected shape \[3, 4\]"):
        g.depthwise_conv1d_causal(x, g.param("w2", (3, 5)))
    with pytest.raises(rlx.ShapeError, match="x: expected rank 3"):
        g.depthwise_conv1d_causal(g.input("x2", (9, 4)), w)


def _llama(g, d=32, h=4, hkv=2, hd=8, ff=48, s=5, **overrides):
    args = dict(
        x=g.input("x", (s, d)), ln1_g=g.param("ln1_g", (d,)), ln1_b=None,
        q_w=g.param("q_w", (d, h * hd)), k_w=g.param("k_w", (d, hkv * hd)),
        v_w=g.param("v_w", (d, hkv * hd)), o_w=g.param("o_w", (h * hd, d)),
        ln2_g=g.param("ln2_g", (d,)), ln2_b=None, gate_w=g.param("gate_w", (d, ff)),
        up_w=g.param("up_w", (d, ff)), down_w=g.param("down_w", (ff, d)),
        cos=g.input("cos", (s, hd // 2)), sin=g.input("sin", (s, hd // 2)),
    )
    args.update(overrides)
    return g.llama_decoder_block(**args, num_heads=h, head_dim=hd, num_kv_heads=hkv)


def test_llama_decoder_block(g):
    assert _llama(g).shape == (5, 32)


def test_llama_decoder_block_errors(g):
    with pytest.raises(rlx.ShapeError, match=r"llama_decoder_block: o_w: expected shape \[32, 32\]"):
        _llama(g, o_w=g.param("bad_o", (32, 16)))


# ---------------------------------------------------------------------------- the module


def every_method_graph() -> rlx.Graph:
    """A graph that calls every builder method at least once."""
    g = rlx.Graph("every_op")
    x = g.input("x", (2, 4, 32))
    ids = g.input("ids", (2, 3), dtype="i64")
    y = x
    for name in UNARY:
        y = getattr(g, name)(y)
    y = g.maximum(g.minimum(y, 1.0), -1.0)
    y = g.pow(g.abs(y) + 1.0, 2.0)
    y = g.div(g.sub(g.mul(y, 2.0), 0.5), g.add(y, 3.0))
    w = g.param("w", (32, 32))
    y = g.linear(y, w, g.param("b", (32,)), activation="silu") + g.matmul(y, w)
    first, second = g.shared_linear_pair(y, w, g.param("w_pair", (32, 32)))
    y = g.linear_fused(first, w, g.param("b_fused", (32,)), activation="gelu") + second
    y = g.rms_norm(y, g.param("g1", (32,)))
    y = g.residual_rms_norm(y, x, g.param("g2", (32,)), g.param("b2", (32,)))
    y = g.layer_norm(y, g.param("g3", (32,)), g.param("b3", (32,)))
    cos, sin = g.input("cos", (4, 4)), g.input("sin", (4, 4))
    q = g.rope(y, cos, sin, head_dim=8)
    kv = g.rope(g.narrow(y, 2, 0, 16), cos, sin, head_dim=8, style="interleaved")
    a = g.attention(q, kv, kv, num_heads=4, head_dim=8, num_kv_heads=2, mask_kind="causal")
    a = a + g.attention(q, kv, kv, num_heads=4, head_dim=8, num_kv_heads=2, mask_kind="causal",
                        window=2)
    a = a + g.attention(q, kv, kv, g.input("mask", (4, 4)), num_heads=4, head_dim=8,
                        num_kv_heads=2, mask_kind="bias")
    slot_kv = g.reshape(kv, (2, 4, 16))  # 2 slots of 4 rows (batched decoding)
    slots = g.constant(np.array([0, 1, 1, 0, 1, 0, 0, 1], np.int32))
    positions = g.constant(np.array([0, 3, 2, 1, 0, 2, 3, 3], np.int32))
    sa = g.slot_attention(g.reshape(q, (8, 32)), slot_kv, slot_kv, slots, positions,
                          num_heads=4, head_dim=8, num_kv_heads=2, window=3)
    a = a + g.reshape(sa, (2, 4, 32))
    a = g.swiglu_ffn(a, g.param("up", (32, 48)), g.param("gate", (32, 48)), g.param("down", (48, 32)))
    a, window = g.depthwise_conv1d_causal(a, g.param("cw", (3, 32)), g.input("pad", (2, 2, 32)),
                                          return_state=True)
    a = a + g.reduce_mean(window, (0, 1, 2))
    a = g.depthwise_conv1d_causal(a, g.param("cw1", (2, 32)))
    ssm_a = g.param("ssm_a", (32, 3))
    a = g.selective_scan(a, g.sigmoid(a), ssm_a, g.narrow(a, 2, 0, 3),
                         g.narrow(a, 2, 3, 3))
    heads = g.reshape(a, (2, 4, 4, 8))
    o, st = g.gated_delta_net(heads, heads, heads, g.narrow(a, 2, 0, 4), g.narrow(a, 2, 4, 4),
                              return_state=True)
    a = a + g.reshape(o, (2, 4, 32)) + g.reduce_mean(st, (0, 1, 2, 3))
    grads = g.selective_scan_backward(a, g.sigmoid(a), ssm_a,
                                      g.narrow(a, 2, 0, 3), g.narrow(a, 2, 3, 3), a,
                                      g.constant(np.zeros((2, 32, 3), np.float32)))
    a = a + grads[0]
    dq, *_, d_initial = g.gated_delta_net_backward(heads, heads, heads, g.narrow(a, 2, 0, 4),
                                                   g.narrow(a, 2, 4, 4), heads, st, st)
    a = a + g.reshape(dq, (2, 4, 32)) + g.reduce_mean(d_initial, (0, 1, 2, 3))
    step = rlx.Graph("step")
    carry, row = step.input("carry", (4, 32)), step.input("row", (4, 32))
    step.output(step.tanh(carry + row * step.input("scale", ())))
    a = g.scan(g.reshape(g.narrow(a, 0, 0, 1), (4, 32)), step, 2, xs=[a],
               consts=[g.constant(np.float32(0.5))], trajectory=True)[1]
    a = g.llama_decoder_block(
        a, g.param("l1", (32,)), g.param("l1b", (32,)), g.param("qw", (32, 32)),
        g.param("kw", (32, 16)), g.param("vw", (32, 16)), g.param("ow", (32, 32)),
        g.param("l2", (32,)), None, g.param("gw", (32, 48)), g.param("uw", (32, 48)),
        g.param("dw", (48, 32)), cos, sin, num_heads=4, head_dim=8, num_kv_heads=2)
    d = g.dequant_matmul(a, g.param("wq8", (16, 34), "ui8"), "q8_0")
    d = d + g.dequant_matmul(a, g.param("wq4", (16, 18), "ui8"), "q4_0")
    e = g.embedding(g.param("table", (10, 16)), ids)           # [2, 3, 16]
    e = e + g.embedding(g.param("qtable", (10, 32), "ui8"), ids, scheme="f16")  # dequant_gather
    e = g.concat([e, g.gather(d, g.constant(np.array([0, 3], dtype=np.int32)), axis=1)], axis=1)
    e = g.scatter_add(e, g.constant(np.array([4, 0, 4, 1, 2], dtype=np.int32)), 1, 5)  # repeats
    e = g.transpose(e, (0, 2, 1))                             # [2, 16, 5]
    e = g.reshape(e, (2, -1))
    e = g.softmax(g.broadcast_to(g.reduce_mean(e, -1, keepdim=True), (2, 80)), axis=0)
    s = g.reduce_sum(e, (0, 1)) + g.reduce_max(e, 1) + g.reduce_min(e, 1)
    logits = g.qwen35_mtp_head(
        a, g.input("ids4", (2, 4), dtype="i64"), cos, sin, g.input("last", (2,), dtype="i32"),
        g.param("mtp_embed", (10, 32)), g.param("mtp_hn", (32,)), None, g.param("mtp_en", (32,)),
        g.param("mtp_enb", (32,)), g.param("mtp_eh", (64, 32)), g.param("mtp_an", (32,)), None,
        g.param("mtp_qg", (32, 64)), g.param("mtp_k", (32, 16)), g.param("mtp_v", (32, 16)),
        g.param("mtp_qn", (8,)), None, g.param("mtp_kn", (8,)), None, g.param("mtp_o", (32, 32)),
        g.param("mtp_pn", (32,)), None, g.param("mtp_g", (32, 48)), g.param("mtp_u", (32, 48)),
        g.param("mtp_d", (48, 32)), g.param("mtp_hd", (32,)), None, g.param("mtp_lm", (32, 10)),
        num_heads=4, num_kv_heads=2, head_dim=8, n_rot=8)
    s = s + g.reduce_mean(logits, 1)
    top_values, top_ids = g.top_k(logits, 3)  # the sampling ops (f32 results through casts)
    picks = g.concat([g.reshape(g.argmax(logits), (2, 1)), top_ids,
                      g.reshape(g.sample(logits, temperature=0.5, top_k=4, seed=1), (2, 1))], 1)
    s = s + g.reduce_mean(top_values, 1) + g.reduce_mean(g.gather(logits, picks, axis=1), (1, 2))
    s = g.custom_fn(lambda g2, v: g2.tanh(v) + v, [s], name="every_fn")  # func.call, inlined
    g.output(s, e, x)
    return g


def test_every_method_module_verifies():
    text = every_method_graph().to_mlir()
    module = parse_module(text)
    ops = {op.name for op in module.walk()}
    assert {"hir.llama_decoder_block", "hir.attention", "mir.reduce", "mir.gather"} <= ops
    assert 'rlx.name = "x"' in text and 'rlx.role = "param"' in text


def test_to_mlir_is_repeatable_and_graph_stays_usable():
    g = rlx.Graph("r")
    x = g.input("x", (3,))
    g.output(g.exp(x))
    first = g.to_mlir()
    assert g.to_mlir() == first
    g.exp(x) + 1.0  # building more ops after to_mlir() works (they are dead code here)
    assert "mir.add" in g.to_mlir()
    parse_module(g.to_mlir())


def _rlx_opt() -> str:
    import shutil
    import sys
    from pathlib import Path

    local = Path(sys.executable).with_name("rlx-opt")
    return str(local) if local.exists() else shutil.which("rlx-opt")


@pytest.mark.parametrize("graph", ["every_method", "llama_block"])
def test_to_mlir_verifies_in_rlx_opt(tmp_path, graph):
    import subprocess

    if graph == "llama_block":
        from examples_loader import load_example

        g = load_example("llama_block").build_llama_block(seq=8, d_model=64, num_heads=4,
                                                          num_kv_heads=2, head_dim=16, d_ff=96)
    else:
        g = every_method_graph()
    path = tmp_path / f"{graph}.mlir"
    path.write_text(g.to_mlir())
    proc = subprocess.run([_rlx_opt(), str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "func.func @" in proc.stdout


def test_example_mlir_files_are_up_to_date():
    from examples_loader import EXAMPLES, load_example

    assert load_example("llama_block").build_llama_block().to_mlir() == (EXAMPLES / "llama_block.mlir").read_text()
    assert load_example("mlp").build_mlp().to_mlir() == (EXAMPLES / "mlp.mlir").read_text()
