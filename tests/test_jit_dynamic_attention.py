"""Numerics of `lir.attention` and `lir.rope` kernels over `?` dims (issue 9): one kernel, many sizes.

Each op is built by hand over `memref<?x...>` arguments with its symbolic shapes recorded
(`dynamic.set_operand_shapes`), as convert-lir-to-llvm does; ONE kernel per op and vector
width is JIT-compiled and called at many bindings of S and T (1, odd, W ± 1, T ≥ S for
causal), serial and partitioned (1, 2, 3 parts, each part writing a disjoint share),
against `rlx_mlir.core.reference_kernels.attention`. Key rows ≥ T of a bigger buffer hold
NaN: an output stays finite only if the kernel never reads them (a decode step is O(T)).
"""

from __future__ import annotations

import ctypes
import math

import numpy as np
import pytest
from jit_harness import Jitted
from xdsl.ir import Block

from rlx_mlir.core import reference_kernels as R
from rlx_mlir.dialects import lir
from rlx_mlir.dialects.common import memref_type
from rlx_mlir.passes.lir_to_llvm import attention as A
from rlx_mlir.passes.lir_to_llvm import dynamic
from rlx_mlir.passes.lir_to_llvm.kernels import partitioned_builders, runtime_dims_kernels

WIDTHS = (16, 8)
RTOL, ATOL = 1e-4, 1e-5
PARTS = (1, 2, 3)


class Kernel:
    """One dynamic `lir.attention` op: q `(*batch, S, H·D)`, k/v `(*batch, T, Hkv·D)`,
    an optional mask of `mask_shape` (symbols S, T and B allowed)."""

    def __init__(self, label, *, heads, dim, kv_heads, kind="none", mask_shape=None,
                 batch=(), scale=None):
        self.label, self.heads, self.dim, self.kv_heads = label, heads, dim, kv_heads
        self.kind, self.mask_shape, self.batch = kind, mask_shape, tuple(batch)
        self.scale = 1 / math.sqrt(dim) if scale is None else scale
        q_shape = (*self.batch, "S", heads * dim)
        k_shape = (*self.batch, "T", kv_heads * dim)
        shapes = [q_shape, k_shape, k_shape] + ([mask_shape] if mask_shape else []) + [q_shape]
        args = Block(arg_types=[memref_type(s) for s in shapes]).args
        self.op = lir.AttentionOp(
            args[0], args[1], args[2], args[-1], num_heads=heads, head_dim=dim,
            num_kv_heads=kv_heads, mask=args[3] if mask_shape else None, mask_kind=kind,
            scale=self.scale)
        self.op.verify()
        dynamic.set_operand_shapes(self.op, shapes)
        self.symbols = dynamic.kernel_symbols(self.op)
        self.n_ptrs = len(shapes)

    def inputs(self, sizes, seed, capacity=None):
        """q, k, v (and mask) at the binding `sizes`; k and v have `capacity` rows (NaN
        past T) when given, in a rank-2 op."""
        rng = np.random.default_rng(seed)

        def dims(shape):
            return tuple(sizes[d] if isinstance(d, str) else d for d in shape)

        batch = dims(self.batch)
        q = rng.uniform(-2, 2, (*batch, sizes["S"], self.heads * self.dim)).astype(np.float32)
        k, v = (rng.uniform(-2, 2, (*batch, sizes["T"], self.kv_heads * self.dim))
                .astype(np.float32) for _ in range(2))
        mask = None
        if self.mask_shape is not None:
            shape = dims(self.mask_shape)
            if self.kind == "custom":
                mask = (rng.uniform(size=shape) < 0.7) * rng.uniform(0.5, 3, size=shape)
            else:
                mask = rng.uniform(-3, 3, size=shape)
                mask[rng.uniform(size=shape) < 0.3] = -np.inf
            mask = mask.astype(np.float32)
        expected = R.attention(q, k, v, mask, num_heads=self.heads, head_dim=self.dim,
                               num_kv_heads=self.kv_heads, mask_kind=self.kind,
                               scale=float(np.float32(self.scale)))
        if capacity is not None:
            assert not batch
            pad = np.full((capacity - sizes["T"], k.shape[-1]), np.nan, np.float32)
            k, v = np.concatenate([k, pad]), np.concatenate([v, pad])
        return [q, k, v] + ([mask] if mask is not None else []), expected

    def function(self, jitted, name, partitioned=False):
        fn = jitted.function(name, self.n_ptrs, extra=[ctypes.c_int64] * (
            len(self.symbols) + 2 * partitioned))
        return fn

    def call(self, fn, arrays, out, sizes, share=()):
        fn(*(a.ctypes.data for a in arrays), out.ctypes.data,
           *(sizes[s] for s in self.symbols), *share)


KERNELS = [
    Kernel("none gqa3 D64", heads=6, dim=64, kv_heads=2),
    Kernel("causal gqa3 D64", heads=9, dim=64, kv_heads=3, kind="causal"),
    Kernel("causal mha D24", heads=2, dim=24, kv_heads=2, kind="causal"),
    Kernel("causal gqa2 D40", heads=4, dim=40, kv_heads=2, kind="causal"),
    Kernel("none D24", heads=3, dim=24, kv_heads=1),
    Kernel("custom [S,T] D40", heads=2, dim=40, kv_heads=1, kind="custom",
           mask_shape=("S", "T")),
    Kernel("bias [S,T] D64", heads=3, dim=64, kv_heads=3, kind="bias", mask_shape=("S", "T")),
    Kernel("bias [1,H,S,T] D24", heads=2, dim=24, kv_heads=1, kind="bias",
           mask_shape=(1, 2, "S", "T")),
    Kernel("causal batch B D24", heads=3, dim=24, kv_heads=1, kind="causal", batch=("B",)),
    Kernel("custom [B,1,S,T] batch B", heads=2, dim=24, kv_heads=2, kind="custom",
           mask_shape=("B", 1, "S", "T"), batch=("B",)),
    Kernel("causal batch 2 D64", heads=4, dim=64, kv_heads=2, kind="causal", batch=(2,)),
    Kernel("causal D531 acc in out", heads=1, dim=531, kv_heads=1, kind="causal"),
]


def bindings(kernel, width):
    """(S, T) pairs: 1, odd, W ± 1, T ≥ S for causal; B = 1 and 2 for a symbolic batch."""
    w = width
    pairs = [(1, 1), (1, 7), (3, 17), (16, 16), (17, 40), (w - 1, w + 1), (w + 1, w + 1),
             (1, w), (1, 2 * w + 1), (5, 3 * w - 1), (w, 3 * w)]
    if kernel.kind != "causal":
        pairs += [(9, 2), (w + 1, 1), (2, w - 1)]
    batches = (1, 2) if "B" in kernel.symbols else (None,)
    return [dict(S=s, T=t, **({"B": b} if b else {})) for s, t in pairs for b in batches]


@pytest.fixture(scope="module", params=WIDTHS, ids=lambda w: f"W{w}")
def jitted(request):
    w = request.param
    functions = [A.build_attention(k.op, f"serial{i}", w) for i, k in enumerate(KERNELS)]
    functions += [partitioned_builders()[lir.AttentionOp](k.op, f"part{i}", w)
                  for i, k in enumerate(KERNELS)]
    return w, Jitted(functions)


def test_registry():
    assert lir.AttentionOp in runtime_dims_kernels()
    k = KERNELS[8]  # causal, symbolic batch
    assert k.symbols == ("B", "S", "T")
    for partitioned in (False, True):
        build = partitioned_builders()[lir.AttentionOp] if partitioned else A.build_attention
        inputs = build(k.op, "f", 8).function_type.inputs.data
        assert [str(t) for t in inputs] == (
            ["!llvm.ptr"] * 4 + ["i64"] * 3 + ["i64"] * 2 * partitioned)


@pytest.mark.parametrize("index", range(len(KERNELS)), ids=[k.label.replace(" ", "_")
                                                             for k in KERNELS])
def test_serial(jitted, index):
    w, jit = jitted
    kernel = KERNELS[index]
    fn = kernel.function(jit, f"serial{index}")
    for seed, sizes in enumerate(bindings(kernel, w)):
        arrays, expected = kernel.inputs(sizes, seed)
        out = np.full(expected.shape, 12345.0, np.float32)
        kernel.call(fn, arrays, out, sizes)
        np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL,
                                   err_msg=f"{kernel.label} W={w} {sizes}")


@pytest.mark.parametrize("index", range(len(KERNELS)), ids=[k.label.replace(" ", "_")
                                                             for k in KERNELS])
def test_partitioned(jitted, index):
    """Every part alone writes a share disjoint from the others'; together the reference."""
    w, jit = jitted
    kernel = KERNELS[index]
    fn = kernel.function(jit, f"part{index}", partitioned=True)
    for seed, sizes in enumerate(bindings(kernel, w)[::2]):
        arrays, expected = kernel.inputs(sizes, seed)
        for parts in PARTS:
            out = np.full(expected.shape, np.nan, np.float32)
            written = np.zeros(expected.shape, np.int64)
            for part in range(parts):
                kernel.call(fn, arrays, out, sizes, (part, parts))
                alone = np.full(expected.shape, -3.25e38, np.float32)
                kernel.call(fn, arrays, alone, sizes, (part, parts))
                written += alone != -3.25e38
            np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL,
                                       err_msg=f"{kernel.label} W={w} {sizes} parts={parts}")
            assert (written == 1).all(), (kernel.label, sizes, parts)


@pytest.mark.parametrize("index", [1, 3, 5, 6], ids=lambda i: KERNELS[i].label.replace(" ", "_"))
def test_reads_no_key_row_past_t(jitted, index):
    """k/v rows ≥ T of a 3W+5-row buffer are NaN: outputs stay finite (and right), so
    the kernel reads rows < T only — a decode step costs O(T), not O(capacity)."""
    w, jit = jitted
    kernel = KERNELS[index]
    capacity = 3 * w + 5
    serial = kernel.function(jit, f"serial{index}")
    partitioned = kernel.function(jit, f"part{index}", partitioned=True)
    for t in (1, 2, w - 1, w, w + 1, 2 * w + 3, capacity - 1):
        for s in sorted({1, min(t, 3)}):
            sizes = {"S": s, "T": t}
            arrays, expected = kernel.inputs(sizes, t, capacity=capacity)
            out = np.zeros(expected.shape, np.float32)
            kernel.call(serial, arrays, out, sizes)
            assert np.isfinite(out).all(), (kernel.label, sizes)
            np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)
            out = np.zeros(expected.shape, np.float32)
            for part in range(2):
                kernel.call(partitioned, arrays, out, sizes, (part, 2))
            np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)


def test_static_op_keeps_the_static_signature():
    args = Block(arg_types=[memref_type(s) for s in [(3, 16), (5, 8), (5, 8), (3, 16)]]).args
    op = lir.AttentionOp(*args[:3], args[3], num_heads=2, head_dim=8, num_kv_heads=1,
                         mask_kind="causal", scale=0.3)
    inputs = A.build_attention(op, "f", 8).function_type.inputs.data
    assert [str(t) for t in inputs] == ["!llvm.ptr"] * 4


def _op_over(shapes, kind="bias", mask=True):
    args = Block(arg_types=[memref_type(s) for s in shapes]).args
    op = lir.AttentionOp(args[0], args[1], args[2], args[-1], num_heads=2, head_dim=8,
                         num_kv_heads=1, mask=args[3] if mask else None, mask_kind=kind,
                         scale=0.3)
    dynamic.set_operand_shapes(op, shapes)
    return op


@pytest.mark.parametrize("shapes, message", [
    ([("S", 16), ("T", 8), ("T", 8), (1, "H", "S", "T"), ("S", 16)], "head dim of the mask"),
    ([("B", "S", 16), ("B", "T", 8), ("B", "T", 8), ("C", 1, "S", "T"), ("B", "S", 16)],
     "batch dim of the mask"),
    ([("S", 16), ("T", 8), ("T", 16), ("S", "T"), ("S", 16)], "v's shape"),
    ([("S", 16), ("T", 8), ("T", 8), ("S", "T"), ("S", "T", 16)], "out's shape"),
])
def test_unsupported_symbols_are_named(shapes, message):
    op = _op_over(shapes)
    with pytest.raises(dynamic.DynamicKernelError, match=message) as info:
        A.build_attention(op, "f", 8)
    assert "lir.attention" in str(info.value)


def test_missing_operand_dims_is_an_error():
    shapes = [("S", 16), ("T", 8), ("T", 8), ("S", 16)]
    args = Block(arg_types=[memref_type(s) for s in shapes]).args
    op = lir.AttentionOp(*args[:3], args[3], num_heads=2, head_dim=8, num_kv_heads=1,
                         mask_kind="none", scale=0.3)
    with pytest.raises(dynamic.DynamicKernelError, match="named by a symbol"):
        A.build_attention(op, "f", 8)


# ----------------------------------------------------------------------------- rope


class RopeKernel:
    """One dynamic `lir.rope`: x `(*batch, S, H·D)`, cos/sin `(S, n_rot/2)`."""

    def __init__(self, label, *, heads, dim, n_rot, style, batch=()):
        self.label, self.heads, self.dim, self.n_rot, self.style = label, heads, dim, n_rot, style
        self.batch = tuple(batch)
        x_shape = (*self.batch, "S", heads * dim)
        shapes = [x_shape, ("S", n_rot // 2), ("S", n_rot // 2), x_shape]
        args = Block(arg_types=[memref_type(s) for s in shapes]).args
        self.op = lir.RopeOp(*args, head_dim=dim, n_rot=n_rot, style=style)
        self.op.verify()
        dynamic.set_operand_shapes(self.op, shapes)
        self.symbols = dynamic.kernel_symbols(self.op)

    def inputs(self, sizes, seed):
        rng = np.random.default_rng(seed)
        batch = tuple(sizes[d] if isinstance(d, str) else d for d in self.batch)
        x = rng.uniform(-2, 2, (*batch, sizes["S"], self.heads * self.dim)).astype(np.float32)
        angles = rng.uniform(-math.pi, math.pi, (sizes["S"], self.n_rot // 2))
        cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
        return [x, cos, sin], R.rope(x, cos, sin, self.dim, self.n_rot, self.style)


ROPES = [
    RopeKernel("half D64", heads=3, dim=64, n_rot=64, style="half"),
    RopeKernel("interleaved D64 batch B", heads=2, dim=64, n_rot=64, style="interleaved",
               batch=("B",)),
    RopeKernel("half n_rot<D odd D", heads=2, dim=21, n_rot=10, style="half", batch=(2,)),
    RopeKernel("interleaved D40 n_rot 24", heads=3, dim=40, n_rot=24, style="interleaved"),
]


@pytest.mark.parametrize("width", WIDTHS)
def test_rope(width):
    """One kernel per op at S = 1, 2, 7, W ± 1, 33 (B = 1, 2), serial and parts 1, 2, 3."""
    assert lir.RopeOp in runtime_dims_kernels()
    functions = []
    for i, r in enumerate(ROPES):
        functions += [A.build_rope(r.op, f"rope{i}", width),
                      partitioned_builders()[lir.RopeOp](r.op, f"rope_part{i}", width)]
    jit = Jitted(functions)
    for i, r in enumerate(ROPES):
        n = len(r.symbols)
        serial = jit.function(f"rope{i}", 4, extra=[ctypes.c_int64] * n)
        partitioned = jit.function(f"rope_part{i}", 4, extra=[ctypes.c_int64] * (n + 2))
        for seq in (1, 2, 7, width - 1, width + 1, 33):
            for b in ((1, 2) if "B" in r.symbols else (None,)):
                sizes = {"S": seq, **({"B": b} if b else {})}
                arrays, expected = r.inputs(sizes, seq)
                ptrs = [a.ctypes.data for a in arrays]
                args = [sizes[s] for s in r.symbols]
                out = np.full(expected.shape, np.nan, np.float32)
                serial(*ptrs, out.ctypes.data, *args)
                np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL,
                                           err_msg=f"{r.label} W={width} {sizes}")
                for parts in PARTS:
                    out = np.full(expected.shape, np.nan, np.float32)
                    for part in range(parts):
                        partitioned(*ptrs, out.ctypes.data, *args, part, parts)
                    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL,
                                               err_msg=f"{r.label} W={width} {sizes} {parts}")


def test_rope_refuses_a_symbolic_width():
    shapes = [("S", "D"), ("S", 4), ("S", 4), ("S", "D")]
    args = Block(arg_types=[memref_type(s) for s in shapes]).args
    op = lir.RopeOp(*args, head_dim=8, n_rot=8, style="half")
    dynamic.set_operand_shapes(op, shapes)
    with pytest.raises(dynamic.DynamicKernelError, match="lir.rope: the last dim of x"):
        A.build_rope(op, "f", 8)
