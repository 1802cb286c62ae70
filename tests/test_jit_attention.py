"""Numerics of the `lir.attention` and `lir.rope` kernels (rlx_mlir.passes.lir_to_llvm.attention).

Each lir op is built by hand over the memref arguments of a dummy block, its kernel is
built at vector widths 16, 8 and 4, every kernel of one width is JIT-compiled in one
module with llvmlite, and the results are compared with `rlx_mlir.core.reference_kernels`.
The partitioned kernels (`PARTITIONED`) run as 1, 2, 3 and 5 parts, one call per part,
into one NaN-filled output, and each part alone must write a share disjoint from the
other parts'.
"""

from __future__ import annotations

import ctypes
import math
import re

import numpy as np
import pytest
from jit_harness import Jitted, has_avx512
from xdsl.ir import Block

from rlx_mlir.core import reference_kernels as R
from rlx_mlir.dialects import lir
from rlx_mlir.dialects.common import memref_type
from rlx_mlir.passes.lir_to_llvm import attention as A
from rlx_mlir.passes.lir_to_llvm.kernels import family, partitioned_builders

WIDTHS = (16, 8, 4)
RTOL, ATOL = 1e-4, 1e-5


# ----------------------------------------------------------------------------- JIT harness


def dummy_args(*shapes):
    """f32 memref block arguments of the given shapes (operands of a hand-built lir op)."""
    return Block(arg_types=[memref_type(s) for s in shapes]).args


def rand(shape, seed, lo=-2.0, hi=2.0):
    return np.random.default_rng(seed).uniform(lo, hi, size=shape).astype(np.float32)


# ----------------------------------------------------------------------------- cases


class Case:
    """One kernel: its lir op, its inputs and the reference output."""

    def __init__(self, label, op, inputs, expected):
        op.verify()
        self.label, self.op, self.inputs, self.expected = label, op, inputs, expected


def attention_case(label, q_shape, kv_len, *, heads, dim, kv_heads, kind="none",
                   mask_shape=None, seed=0, mask_fn=None, scale=None):
    batch = q_shape[:-2]
    k_shape = (*batch, kv_len, kv_heads * dim)
    out_shape = q_shape
    q, k, v = rand(q_shape, seed), rand(k_shape, seed + 1), rand(k_shape, seed + 2)
    mask = None
    if mask_shape is not None:
        mask = mask_fn(np.random.default_rng(seed + 3), mask_shape).astype(np.float32)
    shapes = [q_shape, k_shape, k_shape] + ([mask_shape] if mask is not None else []) + [out_shape]
    args = dummy_args(*shapes)
    scale = 1 / math.sqrt(dim) if scale is None else scale
    op = lir.AttentionOp(args[0], args[1], args[2], args[-1], num_heads=heads, head_dim=dim,
                         num_kv_heads=kv_heads, mask=args[3] if mask is not None else None,
                         mask_kind=kind, scale=scale)
    scale32 = float(np.float32(scale))  # the kernel bakes in the f32 scale
    expected = R.attention(q, k, v, mask, num_heads=heads, head_dim=dim, num_kv_heads=kv_heads,
                           mask_kind=kind, scale=scale32)
    inputs = [q, k, v] + ([mask] if mask is not None else [])
    return Case(label, op, inputs, expected)


def keep_mask(rng, shape, dropped_row=None):
    m = (rng.uniform(size=shape) < 0.7).astype(np.float32) * rng.uniform(0.5, 3, size=shape)
    if dropped_row is not None:
        m[..., dropped_row, :] = 0.0
    return m


def bias_mask(rng, shape, dropped_row=None):
    m = rng.uniform(-3, 3, size=shape)
    m[rng.uniform(size=shape) < 0.3] = -np.inf
    if dropped_row is not None:
        m[..., dropped_row, :] = -np.inf
    return m


def attention_cases():
    return [
        attention_case("rank3 none", (2, 5, 16), 5, heads=2, dim=8, kv_heads=2),
        attention_case("rank2 gqa odd D", (3, 20), 7, heads=4, dim=5, kv_heads=2, seed=1),
        attention_case("gqa long T", (2, 3, 64), 41, heads=4, dim=16, kv_heads=1, seed=2),
        attention_case("causal S<T", (1, 3, 32), 20, heads=2, dim=16, kv_heads=1,
                       kind="causal", seed=3),
        attention_case("causal S=T", (2, 17, 99), 17, heads=3, dim=33, kv_heads=3,
                       kind="causal", seed=4),
        attention_case("causal S=1", (1, 256), 37, heads=4, dim=64, kv_heads=1,
                       kind="causal", seed=5),
        attention_case("causal T<W", (3, 12), 5, heads=2, dim=6, kv_heads=2,
                       kind="causal", seed=6),
        attention_case("causal S=T=1", (1, 1, 7), 1, heads=1, dim=7, kv_heads=1,
                       kind="causal", seed=7),
        attention_case("custom [S,T] dropped row", (2, 4, 14), 19, heads=2, dim=7, kv_heads=1,
                       kind="custom", mask_shape=(4, 19), seed=8,
                       mask_fn=lambda r, s: keep_mask(r, s, dropped_row=1)),
        attention_case("custom [B,1,S,T]", (2, 5, 64), 33, heads=2, dim=32, kv_heads=2,
                       kind="custom", mask_shape=(2, 1, 5, 33), seed=9,
                       mask_fn=lambda r, s: keep_mask(r, s, dropped_row=4)),
        attention_case("custom [1,H,S,T] rank2", (3, 24), 18, heads=3, dim=8, kv_heads=1,
                       kind="custom", mask_shape=(1, 3, 3, 18), seed=10, mask_fn=keep_mask),
        attention_case("bias [B,H,S,T] -inf", (2, 4, 34), 17, heads=2, dim=17, kv_heads=1,
                       kind="bias", mask_shape=(2, 2, 4, 17), seed=11,
                       mask_fn=lambda r, s: bias_mask(r, s, dropped_row=2)),
        attention_case("bias [S,T]", (1, 6, 48), 40, heads=3, dim=16, kv_heads=3,
                       kind="bias", mask_shape=(6, 40), seed=12, mask_fn=bias_mask),
        attention_case("bias [1,1,S,T] rank2", (2, 8), 3, heads=1, dim=8, kv_heads=1,
                       kind="bias", mask_shape=(1, 1, 2, 3), seed=13, mask_fn=bias_mask,
                       scale=0.7),
        attention_case("negative scale", (2, 3, 18), 5, heads=2, dim=9, kv_heads=1,
                       kind="bias", mask_shape=(3, 5), seed=17, mask_fn=bias_mask, scale=-0.5),
        attention_case("zero scale causal", (4, 8), 9, heads=1, dim=8, kv_heads=1,
                       kind="causal", seed=18, scale=0.0),
        attention_case("D=130", (1, 2, 260), 21, heads=2, dim=130, kv_heads=1, seed=14),
        attention_case("D=531 acc in out", (2, 531), 18, heads=1, dim=531, kv_heads=1,
                       kind="causal", seed=15),
        attention_case("D=531 custom", (3, 1062), 5, heads=2, dim=531, kv_heads=1,
                       kind="custom", mask_shape=(3, 5), seed=16,
                       mask_fn=lambda r, s: keep_mask(r, s, dropped_row=0)),
        # decode (S = 1): rows go in pairs, each with its own q, out, kv head and mask row
        attention_case("decode bias [B,H,1,T]", (2, 1, 48), 29, heads=3, dim=16, kv_heads=1,
                       kind="bias", mask_shape=(2, 3, 1, 29), seed=20, mask_fn=bias_mask),
        attention_case("decode custom D=531", (1, 1593), 18, heads=3, dim=531, kv_heads=3,
                       kind="custom", mask_shape=(1, 3, 1, 18), seed=21, mask_fn=keep_mask),
        attention_case("decode gqa 9:3 T=1", (1, 9 * 24), 1, heads=9, dim=24, kv_heads=3,
                       kind="causal", seed=22),
    ]


def rope_case(label, x_shape, *, dim, n_rot, style, seed=0):
    seq = x_shape[-2]
    x = rand(x_shape, seed)
    angles = rand((seq, n_rot // 2), seed + 1, -math.pi, math.pi)
    cos, sin = np.cos(angles), np.sin(angles)
    args = dummy_args(x_shape, cos.shape, sin.shape, x_shape)
    op = lir.RopeOp(*args, head_dim=dim, n_rot=n_rot, style=style)
    return Case(label, op, [x, cos, sin], R.rope(x, cos, sin, dim, n_rot, style))


def rope_cases():
    cases = []
    for style in ("half", "interleaved"):
        cases += [
            rope_case(f"{style} rank2", (5, 24), dim=8, n_rot=8, style=style),
            rope_case(f"{style} rank3 D=64", (2, 3, 128), dim=64, n_rot=64, style=style, seed=1),
            rope_case(f"{style} n_rot<D", (3, 30), dim=10, n_rot=6, style=style, seed=2),
            rope_case(f"{style} odd D", (2, 2, 21), dim=7, n_rot=4, style=style, seed=3),
            rope_case(f"{style} D=128 n_rot=96", (3, 256), dim=128, n_rot=96, style=style,
                      seed=4),
            rope_case(f"{style} D=70", (1, 4, 140), dim=70, n_rot=70, style=style, seed=5),
            rope_case(f"{style} D=33 n_rot=2", (1, 1, 33), dim=33, n_rot=2, style=style, seed=6),
        ]
    return cases


ATTENTION_CASES = attention_cases()
ROPE_CASES = rope_cases()


@pytest.fixture(scope="module", params=WIDTHS, ids=lambda w: f"W{w}")
def kernels(request):
    w = request.param
    functions = [A.build_attention(c.op, f"attention{i}", w) for i, c in enumerate(ATTENTION_CASES)]
    functions += [A.build_rope(c.op, f"rope{i}", w) for i, c in enumerate(ROPE_CASES)]
    return Jitted(functions)


def run(jitted, name, case):
    out = np.full(case.expected.shape, 12345.0, dtype=np.float32)
    fn = jitted.function(name, len(case.inputs) + 1)
    fn(*(np.ascontiguousarray(a).ctypes.data for a in case.inputs), out.ctypes.data)
    return out


# ----------------------------------------------------------------------------- tests


def test_builders_registry():
    assert {op: r.build for op, r in family("attention").items()} == {
        lir.AttentionOp: A.build_attention, lir.RopeOp: A.build_rope,
        lir.SlotAttentionOp: A.build_slot_attention}


@pytest.mark.parametrize("case", range(len(ATTENTION_CASES)),
                         ids=[c.label.replace(" ", "_") for c in ATTENTION_CASES])
def test_attention(kernels, case):
    c = ATTENTION_CASES[case]
    out = run(kernels, f"attention{case}", c)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, c.expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("case", range(len(ROPE_CASES)),
                         ids=[c.label.replace(" ", "_") for c in ROPE_CASES])
def test_rope(kernels, case):
    c = ROPE_CASES[case]
    np.testing.assert_allclose(run(kernels, f"rope{case}", c), c.expected, rtol=RTOL, atol=ATOL)


PARTS = (1, 2, 3, 5)
UNSET = -3.25e38
"""A value no kernel writes: what a part leaves of `out` shows which elements it wrote."""
PARTITIONED_ATTENTION = ("rank3 none", "rank2 gqa odd D", "causal S<T", "causal S=T",
                         "causal S=1", "causal S=T=1", "custom [B,1,S,T]",
                         "bias [B,H,S,T] -inf", "D=531 acc in out", "decode bias [B,H,1,T]",
                         "decode custom D=531", "decode gqa 9:3 T=1")
PARTITIONED_ROPE = ("half rank2", "interleaved rank3 D=64", "half n_rot<D", "interleaved odd D",
                    "half D=33 n_rot=2")
PARTITIONED_CASES = [c for c in ATTENTION_CASES + ROPE_CASES
                     if c.label in PARTITIONED_ATTENTION + PARTITIONED_ROPE] + [
    attention_case("decode B=2", (2, 1, 32), 9, heads=4, dim=8, kv_heads=2, kind="causal",
                   seed=19)]


@pytest.mark.parametrize("width", WIDTHS)
def test_partitioned(width):
    """Parts 1, 2, 3, 5 called in turn on one NaN-filled `out` give the reference; each
    part alone writes a share disjoint from the other parts' (together: all of out):
    batches x heads x positions (decode: heads; a single row: fewer items than parts),
    causal rows in zig-zag order, rope heads."""
    assert len(PARTITIONED_CASES) == len(PARTITIONED_ATTENTION + PARTITIONED_ROPE) + 1
    jitted = Jitted([partitioned_builders()[type(c.op)](c.op, f"p{i}", width)
                     for i, c in enumerate(PARTITIONED_CASES)])
    for i, c in enumerate(PARTITIONED_CASES):
        fn = jitted.function(f"p{i}", len(c.inputs) + 3)
        fn.argtypes = [ctypes.c_void_p] * (len(c.inputs) + 1) + [ctypes.c_int64] * 2
        inputs = [np.ascontiguousarray(a).ctypes.data for a in c.inputs]
        for parts in PARTS:
            out = np.full(c.expected.shape, np.nan, dtype=np.float32)
            written = np.zeros(c.expected.shape, np.int64)
            for part in range(parts):
                fn(*inputs, out.ctypes.data, part, parts)
                alone = np.full(c.expected.shape, UNSET, dtype=np.float32)
                fn(*inputs, alone.ctypes.data, part, parts)
                written += alone != UNSET
            np.testing.assert_allclose(out, c.expected, rtol=RTOL, atol=ATOL,
                                       err_msg=f"{c.label} W={width} parts={parts}")
            assert (written == 1).all(), (c.label, width, parts, np.unique(written))


def test_partitioned_registry():
    assert all(r.partitioned for r in family("attention").values())
    c = ATTENTION_CASES[0]
    inputs = partitioned_builders()[lir.AttentionOp](c.op, "p", 8).function_type.inputs.data
    assert [str(t) for t in inputs] == ["!llvm.ptr"] * 4 + ["i64"] * 2


def test_fully_dropped_rows_are_zero(kernels):
    for i, c in enumerate(ATTENTION_CASES):
        if "dropped" in c.label or "-inf" in c.label:
            out = run(kernels, f"attention{i}", c)
            assert not np.isnan(out).any()
            assert (c.expected == 0).any() and (out[c.expected == 0] == 0).all(), c.label


def test_attention_asm_is_vectorized_without_libm():
    c = ATTENTION_CASES[5]  # causal decode, D = 64
    asm = Jitted([A.build_attention(c.op, "attn", 16)]).asm
    assert "vfmadd" in asm
    assert not re.search(r"call\s+.*(expf|exp@|__expf)", asm), "exp must be a polynomial"
    if has_avx512():
        assert "zmm" in asm


def test_transpose_add_orders_lanes():
    """transpose_add(partials)[j] == sum(partials[j]) for every width."""
    from rlx_mlir.passes.lir_to_llvm.builder import PTR, KernelBuilder

    for w in WIDTHS:
        kb = KernelBuilder("t", [PTR, PTR], vector_width=w)
        src, dst = kb.args
        parts = [kb.load(src, j * w, vector=True) for j in range(w - 1)] + [None]
        kb.store(A.transpose_add(kb, parts), dst)
        kb.ret()
        fn = (jitted := Jitted([kb.finish()])).function("t", 2)
        x = rand((w, w), w)
        out = np.zeros(w, np.float32)
        fn(x.ctypes.data, out.ctypes.data)
        want = x.sum(axis=1)
        want[-1] = 0.0
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
        assert jitted


# ----------------------------------------------------------------------------- through rlx.jit


@pytest.mark.parametrize("width", WIDTHS)
def test_attention_and_rope_through_jit(width, monkeypatch, tmp_path):
    """One graph: rope of q and k, then attention with every mask kind, compiled by
    `rlx_mlir.jit` at each vector width and compared with the reference executor."""
    import rlx_mlir as rlx

    monkeypatch.setenv("RLX_CACHE_DIR", str(tmp_path))
    g = rlx.Graph("attention_family")
    q = g.input("q", (2, 5, 4 * 12))
    k = g.input("k", (2, 19, 2 * 12))
    v = g.input("v", (2, 19, 2 * 12))
    cos, sin = g.input("cos", (5, 6)), g.input("sin", (5, 6))
    cos_k, sin_k = g.input("cos_k", (19, 6)), g.input("sin_k", (19, 6))
    keep = g.input("keep", (2, 1, 5, 19))
    bias = g.input("bias", (5, 19))
    qr = g.rope(q, cos, sin, 12, 12, "half")
    kr = g.rope(k, cos_k, sin_k, 12, 12, "interleaved")
    heads = {"num_heads": 4, "head_dim": 12, "num_kv_heads": 2}
    g.output(
        g.attention(qr, kr, v, **heads),
        g.attention(qr, kr, v, **heads, mask_kind="causal"),
        g.attention(q, k, v, keep, **heads, mask_kind="custom"),
        g.attention(q, k, v, bias, **heads, mask_kind="bias", scale=0.2),
    )
    rng = np.random.default_rng(width)
    inputs = {
        "q": rand((2, 5, 48), 1), "k": rand((2, 19, 24), 2), "v": rand((2, 19, 24), 3),
        "cos": rand((5, 6), 4), "sin": rand((5, 6), 5), "cos_k": rand((19, 6), 6),
        "sin_k": rand((19, 6), 7),
        "keep": keep_mask(rng, (2, 1, 5, 19), dropped_row=3).astype(np.float32),
        "bias": bias_mask(rng, (5, 19), dropped_row=0).astype(np.float32),
    }
    got = rlx.jit(g, vector_width=width)(**inputs)
    want = rlx.reference(g)(**inputs)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)
