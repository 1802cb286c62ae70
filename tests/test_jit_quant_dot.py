"""`dequant_matmul(..., activations="q8")` compiled (passes/lir_to_llvm/quant_dot.py,
q8_emulated.py).

The q8 form quantizes x to ggml's `vec_dot_type` of the scheme (q8_0, q8_1 or q8_K, with
ggml's reference rounding and f16 scales) before the block dot products; its numbers are
the reference executor's (`quants.q8_matmul`) on every target, within f32 rounding
(1e-5 of Σ|x·w| per output, where the f32 form's difference would be ~1e-3):

- the VNNI kernels (`vpdpbusd`) for q4_0/q4_1/q5_0/q5_1/q8_0 (quant_dot.py) and
  q4_k/q5_k/q6_k/q2_k/q3_k (kquant_dot.py) where the pass marked the op (AVX512-VNNI at W = 16,
  AVX512-VNNI+VL or AVX-VNNI at W = 8);
- the emulation (q8_emulated.py: x quantized into a scratch of f32 integers, exact
  f32 integer dots) for every other width and target, and iq4_nl/iq4_xs.

Every block scheme, at W = 16 (VNNI, AVX512BW's maddubs and emulated), W = 8 (VNNI; haswell:
AVX2's maddubs and emulated) and W = 4
(x86-64, SSE): ONE kernel over a symbolic row count S (ABI of lir_to_llvm/dynamic.py)
called at M = 1, 3, 17, 64, serial and partitioned into 1, 2 and 3 parts (every output
written by exactly one part), plus static kernels; and through `rlx.jit` on every target:
a graph without `activations` is the f32 form everywhere.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from jit_harness import Jitted
from test_jit_dequant import blocks
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.dialects.func import FuncOp
from xdsl.ir import Block, Region

import rlx_mlir as rlx
from rlx_mlir.core import quants
from rlx_mlir.core import reference_kernels as K
from rlx_mlir.core.errors import RlxError
from rlx_mlir.core.target import Target, host_target
from rlx_mlir.dialects import lir
from rlx_mlir.dialects.common import memref_type
from rlx_mlir.passes.lir_to_llvm import dequant as mm
from rlx_mlir.passes.lir_to_llvm import dynamic
from rlx_mlir.passes.lir_to_llvm import quant_dot as qd

SCHEMES = tuple(quants.VEC_DOT_TYPES)
"""Every block scheme (the float ones refuse q8: test_float_schemes_refuse_q8)."""
N = 11
ROWS = (1, 3, 17, 64)
PARTS = (1, 2, 3)
RNG = np.random.default_rng(1111)

HAS_VNNI = {w: qd.int8_dot_isa(host_target(), w) == qd.VNNI for w in (16, 8)}
needs_vnni = pytest.mark.skipif(not HAS_VNNI[16], reason="the host has no AVX512-VNNI")

TARGETS = {
    "w16-vnni": (16, None, qd.VNNI),
    "w16-emulated": (16, None, None),
    "w16-avx512bw": (16, "skylake-avx512", qd.MADDUBS),
    "w8-vnni": (8, None, qd.VNNI),
    "w8-avx2": (8, "haswell", qd.MADDUBS),
    "w8-haswell": (8, "haswell", None),
    "w4-x86-64": (4, "x86-64", None),
}
"""(vector width, CPU (None: the host), the int8 instruction set marked (None: the
emulation)) of each kernel target tested."""


def runnable(target: str) -> tuple[int, str | None, str | None]:
    """TARGETS[target], skipping where the host cannot run it."""
    width, cpu, isa = TARGETS[target]
    if isa == qd.VNNI and not HAS_VNNI[width]:
        pytest.skip(f"no VNNI at W={width}")
    if width == 16 and "+avx512bw" not in host_target().features.split(","):
        pytest.skip("the host has no AVX512BW")
    return width, cpu, isa


def ks(scheme: str) -> tuple[int, int]:
    """An odd number of 32-blocks (W = 16 pairs them: the last step is half empty) and
    SmolLM2's hidden size; 256 and 512 for the K-quants."""
    return (256, 512) if quants.VEC_DOT_TYPES[scheme] == "Q8_K" else (96, 576)


def magnitude(x: np.ndarray, w: np.ndarray, scheme: str) -> np.ndarray:
    """Σ_k |x_k·w_k| per output (the scale of f32 rounding)."""
    return np.abs(x.astype(np.float64)) @ np.abs(quants.dequantize(w, scheme).astype(np.float64)).T


def check(got: np.ndarray, x: np.ndarray, w: np.ndarray, scheme: str, where: str) -> None:
    """got is the q8 form at f32 tolerance (and not the f32 form, which differs)."""
    want = quants.q8_matmul(x, w, scheme).astype(np.float64)
    excess = np.abs(got - want) - 1e-5 * magnitude(x, w, scheme) - 1e-30
    assert (excess <= 0).all(), f"{where}: vs the q8 reference, worst excess {excess.max():.3g}"


def x_rows(m: int, k: int) -> np.ndarray:
    """Rows of mixed scales, one block all zeros (d_x = 0), one with a single value, one
    of exact halves (roundf's ties) and one whose largest magnitude is negative."""
    x = (RNG.standard_normal((m, k)) * RNG.choice([0.01, 1.0, 30.0], (m, 1))).astype(np.float32)
    x[0, :qd.BLOCK] = 0.0
    if k >= 4 * qd.BLOCK:
        x[-1, qd.BLOCK:2 * qd.BLOCK] = 0.0
        x[-1, qd.BLOCK + 5] = -2.5
        ties = (np.arange(32) - 16) * np.float32(0.25)  # d = 63.5/127 = 0.5: x·id = (j − 16)/2
        ties[31] = 63.5
        x[-1, 2 * qd.BLOCK:3 * qd.BLOCK] = ties
        x[-1, 3 * qd.BLOCK + 7] = -50.0
    return x


# ----------------------------------------------------------------------------- kernels


def dequant_op(scheme: str, x_shape: tuple, w: np.ndarray, isa: str | None) -> lir.DequantMatmulOp:
    """A q8 lir.dequant_matmul (symbolic rows: `S` in x_shape), marked for the int8
    instruction set `isa` where the scheme has a kernel for it (None: not marked)."""
    out_shape = (*x_shape[:-1], w.shape[0])
    shapes = [x_shape, w.shape, out_shape]
    args = Block(arg_types=[memref_type(s, dt) for s, dt in zip(shapes, ("f32", "ui8", "f32"),
                                                                 strict=True)]).args
    op = lir.DequantMatmulOp(*args, scheme=scheme, activations="q8")
    if not all(isinstance(d, int) for d in x_shape):
        dynamic.set_operand_shapes(op, shapes)
    if isa is not None and qd.has_int8_kernel(scheme):
        op.attributes[qd.INT8_DOT] = StringAttr(isa)
    op.verify()
    return op


def _call_parts(fn, x: np.ndarray, w: np.ndarray, m: int, parts: int, where: str) -> np.ndarray:
    n = w.shape[0]
    out = np.full((m, n), np.nan, np.float32)
    writers = np.zeros((m, n), np.int64)
    for part in range(parts):
        share = np.full((m, n), np.nan, np.float32)
        fn(x.ctypes.data, w.ctypes.data, share.ctypes.data, m, part, parts)
        written = ~np.isnan(share)
        writers += written
        out[written] = share[written]
    assert (writers == 1).all(), f"{where} parts={parts}: not one writer each"
    return out


def symbolic_kernels(target: str, cases: list[tuple[str, np.ndarray]]) -> Jitted:
    """Per (scheme, weights) case i, one kernel over symbolic rows, serial (`k{i}`) and
    partitioned (`p{i}`), for `target`."""
    width, cpu, isa = runnable(target)
    functions = []
    for i, (scheme, w) in enumerate(cases):
        qtype = quants.quant_type(scheme)
        op = dequant_op(scheme, ("S", w.shape[1] // qtype.type_size * qtype.block_size), w, isa)
        functions += [mm.build_dequant_matmul(op, f"k{i}", width),
                      mm.build_dequant_matmul(op, f"p{i}", width, partitioned=True)]
    return Jitted(functions, cpu, verify=False)


def check_rows(jitted: Jitted, i: int, case: tuple[str, np.ndarray], x: np.ndarray,
               where: str, parts: tuple[int, ...] = (2, 3)) -> np.ndarray:
    """Case i's kernels at x's rows, serial and in `parts` parts, against the q8
    reference; the serial out."""
    scheme, w = case
    m = x.shape[0]
    out = np.full((m, w.shape[0]), np.nan, np.float32)
    jitted.function(f"k{i}", 3, extra=[ctypes.c_int64])(
        x.ctypes.data, w.ctypes.data, out.ctypes.data, m)
    check(out, x, w, scheme, where)
    parted = jitted.function(f"p{i}", 3, extra=[ctypes.c_int64] * 3)
    for count in parts:
        check(_call_parts(parted, x, w, m, count, where), x, w, scheme, f"{where} parts={count}")
    return out


@pytest.mark.parametrize("target", TARGETS)
def test_dynamic_rows_every_scheme(target):
    _, _, isa = runnable(target)
    # the other K: test_static_rows, test_jit_forms_on_every_target. A scheme without an
    # int8 kernel takes the emulation at every target: the emulated targets test it.
    schemes = SCHEMES if isa is None else tuple(s for s in SCHEMES if qd.has_int8_kernel(s))
    cases = [(s, np.ascontiguousarray(blocks(s, N, ks(s)[0]))) for s in schemes]
    jitted = symbolic_kernels(target, cases)
    # the path is the one asked for
    assert ("vpdpbusd" in jitted.asm) == (isa == qd.VNNI)
    assert ("vpmaddubsw" in jitted.asm) == (isa == qd.MADDUBS)
    for i, (scheme, _) in enumerate(cases):
        k = ks(scheme)[0]
        for m in ROWS:
            check_rows(jitted, i, cases[i], x_rows(m, k), f"{scheme} K={k} M={m} {target}", PARTS)


@pytest.mark.parametrize("target", ["w16-vnni", "w8-vnni", "w8-avx2"])
def test_column_lane_tiles(target):
    """More rows than one: W weight rows per tile, one per lane (quant_dot.column_tile),
    then a rest of weight rows in row tiles; 37 = 2·16 + 5 = 4·8 + 5. One symbolic kernel
    per scheme, at row counts around the tile's 8 (4)."""
    n, k = 37, 96
    cases = [(s, np.ascontiguousarray(blocks(s, n, k)))
             for s in ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0")]
    jitted = symbolic_kernels(target, cases)
    for i, (scheme, _) in enumerate(cases):
        for m in (2, 5, 8, 9, 16, 23):
            check_rows(jitted, i, cases[i], x_rows(m, k), f"{scheme} N={n} M={m} {target}")


@pytest.mark.parametrize("target", ["w16-vnni", "w8-vnni"])
def test_a_row_gets_the_same_bits_alone_and_in_a_call(target):
    """One row takes the column-lane tiles too: each row of a 9-row call equals that row
    computed alone, bit for bit (a prefill and the decode steps after it agree)."""
    width, cpu, isa = runnable(target)
    n, k = 37, 96
    cases, functions = [], []
    for i, scheme in enumerate(("q4_1", "q5_0", "q8_0")):
        w = np.ascontiguousarray(blocks(scheme, n, k))
        op = dequant_op(scheme, ("S", k), w, isa)
        functions.append(mm.build_dequant_matmul(op, f"k{i}", width))
        cases.append((scheme, w))
    jitted = Jitted(functions, cpu, verify=False)
    for i, (scheme, w) in enumerate(cases):
        kernel = jitted.function(f"k{i}", 3, extra=[ctypes.c_int64])
        x = x_rows(9, k)
        together = np.full((9, n), np.nan, np.float32)
        kernel(x.ctypes.data, w.ctypes.data, together.ctypes.data, 9)
        check(together, x, w, scheme, f"{scheme} {target}")
        for r in range(9):
            row, alone = np.ascontiguousarray(x[r:r + 1]), np.full((1, n), np.nan, np.float32)
            kernel(row.ctypes.data, w.ctypes.data, alone.ctypes.data, 1)
            np.testing.assert_array_equal(alone[0], together[r], err_msg=f"{scheme} row {r}")


@pytest.mark.parametrize("target", ["w16-vnni", "w8-vnni", "w8-avx2", "w16-avx512bw"])
def test_kquant_column_tiles(target):
    """The K-quants' VNNI kernel (kquant_dot.py): 37 weight rows = whole W-row tiles and
    a masked rest, two superblocks, row counts around the tile's 8 (4), serial and
    partitioned; a row with an all-zero 256-block (d_x = 0); and each row of a 9-row call
    equals that row computed alone, bit for bit."""
    _, _, isa = runnable(target)
    n, k = 37, 512
    cases = [(s, np.ascontiguousarray(blocks(s, n, k))) for s in qd.K_INT8_SCHEMES]
    jitted = symbolic_kernels(target, cases)
    assert ("vpdpwssd" if isa == qd.VNNI else "vpmaddwd") in jitted.asm
    for i, (scheme, w) in enumerate(cases):
        for m in (1, 2, 5, 9, 23):
            x = x_rows(m, k)
            x[-1, k - 256:] = 0.0
            where = f"{scheme} N={n} M={m} {target}"
            out = check_rows(jitted, i, cases[i], x, where)
            for r in range(m if m == 9 else 0):
                row, alone = np.ascontiguousarray(x[r:r + 1]), np.full((1, n), np.nan, np.float32)
                jitted.function(f"k{i}", 3, extra=[ctypes.c_int64])(
                    row.ctypes.data, w.ctypes.data, alone.ctypes.data, 1)
                np.testing.assert_array_equal(alone[0], out[r], err_msg=f"{where} row {r}")


@pytest.mark.parametrize("target", ["w8-avx2", "w16-avx512bw"])
def test_q8_0_without_vnni_does_not_saturate(target):
    """q8_0 under MADDUBS keeps its quants signed: weights of −128 and 127 times x_q of
    ±127 (|products| up to 16256, two to an i16 sum) are exact, in column and row tiles."""
    width, cpu, isa = runnable(target)
    n, k = 21, 64
    q = np.where(np.arange(n * k).reshape(n, k) % 3 == 0, -128, 127).astype(np.int8)
    raw = np.zeros((n, k // 32, 34), np.uint8)
    raw[:, :, 0:2] = np.array([0.5], np.float16).view(np.uint8)
    raw[:, :, 2:] = q.reshape(n, k // 32, 32).view(np.uint8)
    w = np.ascontiguousarray(raw.reshape(n, -1))
    jitted = Jitted([mm.build_dequant_matmul(dequant_op("q8_0", ("S", k), w, isa), "k", width)],
                    cpu, verify=False)
    kernel = jitted.function("k", 3, extra=[ctypes.c_int64])
    x = np.where(np.arange(3 * k).reshape(3, k) % 2 == 0, 1.0, -1.0).astype(np.float32)
    x[1] = -np.abs(x[1])
    out = np.full((3, n), np.nan, np.float32)
    kernel(x.ctypes.data, w.ctypes.data, out.ctypes.data, 3)
    check(out, x, w, "q8_0", target)


@pytest.mark.parametrize("target", ["w16-vnni", "w16-emulated", "w4-x86-64"])
@pytest.mark.parametrize("scheme", ["q4_1", "q8_0", "q6_k"])
def test_static_rows(scheme, target):
    """Static kernels: one row (decode), a chunk and a rest (17 > CHUNK_ROWS), a batch."""
    width, cpu, isa = runnable(target)
    k = ks(scheme)[1]
    shapes = [(1, k), (17, k), (2, 3, k)]
    w = np.ascontiguousarray(blocks(scheme, 7, k))
    functions = [mm.build_dequant_matmul(dequant_op(scheme, s, w, isa), f"k{i}", width)
                 for i, s in enumerate(shapes)]
    jitted = Jitted(functions, cpu, verify=False)
    for i, shape in enumerate(shapes):
        x = x_rows(int(np.prod(shape[:-1])), k).reshape(shape)
        out = np.full((*shape[:-1], 7), np.nan, np.float32)
        jitted.call(f"k{i}", [x, w, out])
        check(out.reshape(-1, 7), x.reshape(-1, k), w, scheme, f"{scheme} {shape} {target}")


def test_isa_of_targets():
    triple = host_target().triple
    assert qd.int8_dot_isa(Target("haswell", "", triple, 8), 8) == qd.MADDUBS
    assert qd.int8_dot_isa(Target("haswell", "-avx2", triple, 8), 8) is None
    assert qd.int8_dot_isa(Target("sandybridge", "", triple, 8), 8) is None
    assert qd.int8_dot_isa(Target("x86-64", "", triple, 4), 4) is None
    assert qd.int8_dot_isa(Target("skylake-avx512", "", triple, 16), 16) == qd.MADDUBS
    assert qd.int8_dot_isa(Target("icelake-server", "", triple, 16), 16) == qd.VNNI
    assert qd.int8_dot_isa(Target("alderlake", "", triple, 8), 8) == qd.VNNI
    host = "+avx512f,+avx512vnni,+avx512vl"
    assert qd.int8_dot_isa(Target("x", host, triple, 16), 16) == qd.VNNI
    assert qd.int8_dot_isa(Target("x", host + ",-avx512vnni", triple, 16), 16) is None
    assert qd.int8_dot_isa(Target("x", host + ",-avx512vnni,+avx512bw", triple, 16), 16) == qd.MADDUBS
    assert qd.int8_scheme("q8_0", qd.MADDUBS).signed  # its u = q + 128 would saturate


def test_marking_follows_the_op_not_the_target():
    """mark_int8_dots marks the q8 ops of an int8 scheme (q4_k too) with the target's
    int8 instruction set (VNNI, or MADDUBS on AVX2), never an f32 op nor a scheme without
    an int8 kernel (iq4_xs); on an SSE target none."""
    triple = host_target().triple
    w4 = np.zeros((3, 36), np.uint8)
    wk = np.zeros((3, 144), np.uint8)
    wx = np.zeros((3, 136), np.uint8)
    shapes = [((2, 64), w4.shape, "q4_0", "q8"), ((2, 64), w4.shape, "q4_0", "f32"),
              ((2, 256), wk.shape, "q4_k", "q8"), ((2, 256), wx.shape, "iq4_xs", "q8")]
    block = Block()
    ops = []
    for x_shape, w_shape, scheme, form in shapes:
        x, w, out = (block.insert_arg(memref_type(s, dt), len(block.args))
                     for s, dt in ((x_shape, "f32"), (w_shape, "ui8"), ((2, 3), "f32")))
        ops.append(lir.DequantMatmulOp(x, w, out, scheme=scheme, activations=form))
    block.add_ops(ops)
    module = ModuleOp([FuncOp("f", (list(block.arg_types), []), Region(block))])
    assert qd.mark_int8_dots(module, Target("x86-64", "", triple, 4), 4) == 0
    assert qd.mark_int8_dots(module, Target("haswell", "", triple, 8), 8) == 2
    assert [op.attributes.get(qd.INT8_DOT) for op in ops] == [
        StringAttr(qd.MADDUBS), None, StringAttr(qd.MADDUBS), None]
    assert qd.mark_int8_dots(module, Target("icelake-server", "", triple, 16), 16) == 2
    assert [qd.INT8_DOT in op.attributes for op in ops] == [True, False, True, False]
    assert not qd.uses_int8_dot(ops[1], 16)


# ----------------------------------------------------------------------------- rlx.jit


def _graph(scheme: str, k: int, n: int, activations: str | None) -> tuple[rlx.Graph, np.ndarray]:
    w = np.ascontiguousarray(blocks(scheme, n, k))
    g = rlx.Graph("gemv")
    x = g.input("x", ("S", k))
    wv = g.param("w", w.shape, "ui8")
    y = (g.dequant_matmul(x, wv, scheme) if activations is None
         else g.dequant_matmul(x, wv, scheme, activations=activations))
    g.output(y)
    return g, w


@pytest.mark.parametrize("cpu", [None, "haswell", "x86-64"])
@pytest.mark.parametrize("scheme", ["q4_1", "q5_0", "q4_k"])
def test_jit_forms_on_every_target(scheme, cpu, monkeypatch):
    """The same graphs on the host (W = 16 and 8), haswell and x86-64: the q8 form gives
    the q8 reference's numbers, a graph without `activations` the f32 reference's."""
    if cpu is not None:
        monkeypatch.setenv("RLX_TARGET_CPU", cpu)
    k = ks(scheme)[1]
    q8, w = _graph(scheme, k, 40, "q8")
    f32, _ = _graph(scheme, k, 40, None)
    exact = quants.dequantize(w, scheme).astype(np.float64)
    for width in ((16, 8) if cpu is None else (0,)):
        q8_fn = rlx.jit(q8, params={"w": w}, threads=2, vector_width=width)
        f32_fn = rlx.jit(f32, params={"w": w}, threads=2, vector_width=width)
        for m in ROWS:
            x = x_rows(m, k)
            check(q8_fn(x), x, w, scheme, f"jit {scheme} M={m} cpu={cpu} W={width}")
            got = f32_fn(x)
            tol = 1e-5 * magnitude(x, w, scheme) + 1e-30
            assert (np.abs(got - x.astype(np.float64) @ exact.T) <= tol).all()
            # the two forms differ (x's quantization), and the reference executor agrees
            assert np.abs(got - q8_fn(x)).max() > 0
    ref = rlx.reference(q8, params={"w": w})
    x = x_rows(3, k)
    check(ref(x), x, w, scheme, "rlx.reference")


def test_ir_states_the_form():
    g, _ = _graph("q4_0", 64, 8, "q8")
    plain, _ = _graph("q4_0", 64, 8, None)
    assert "activations" not in str(plain.to_module())
    assert "activations q8" in str(g.to_module())


def test_graph_refuses_bad_forms():
    g = rlx.Graph("bad")
    x = g.input("x", (2, 64))
    w = g.param("w", (8, 36), "ui8")
    with pytest.raises(RlxError, match="activations: expected one of 'f32', 'q8', got 'q4'"):
        g.dequant_matmul(x, w, "q4_0", activations="q4")
    wf = g.param("wf", (8, 128), "ui8")
    with pytest.raises(RlxError, match="'q8' needs a block-quantized scheme.*got scheme 'f16'"):
        g.dequant_matmul(x, wf, "f16", activations="q8")
    with pytest.raises(RlxError, match="'q8' needs a block-quantized scheme"):
        K.dequant_matmul(np.zeros((2, 64), np.float32), np.zeros((8, 128), np.uint8), "bf16", "q8")


@pytest.mark.skipif("+avxvnni" not in host_target().features.split(","),
                    reason="the host has no AVX-VNNI")
def test_avx_vnni_target_without_avx512():
    """W = 8 for an AVX-VNNI CPU without AVX-512 (alderlake): the VEX vpdpbusd."""
    cases = [(s, np.ascontiguousarray(blocks(s, 9, 160))) for s in ("q4_0", "q5_1", "q8_0")]
    functions = [mm.build_dequant_matmul(dequant_op(s, ("S", 160), w, qd.VNNI), f"k{i}", 8)
                 for i, (s, w) in enumerate(cases)]
    jitted = Jitted(functions, "alderlake", verify=False)
    assert "{vex}\tvpdpbusd" in jitted.asm and "zmm" not in jitted.asm
    for i, (scheme, w) in enumerate(cases):
        for m in (1, 5, 17):
            x = x_rows(m, 160)
            out = np.full((m, 9), np.nan, np.float32)
            jitted.function(f"k{i}", 3, extra=[ctypes.c_int64])(
                x.ctypes.data, w.ctypes.data, out.ctypes.data, m)
            check(out, x, w, scheme, f"{scheme} M={m} alderlake")
