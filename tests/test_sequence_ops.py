"""selective_scan and gated_delta_net (SPEC "Sequence ops from RLX"): compiled kernels and
the reference executor against numpy references written here from the SPEC formulas
(one scalar time loop per channel or head, independent of rlx_mlir.core.reference_kernels),
state round trips, threads and vector widths, and build errors."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from jit_harness import CPUS, Jitted
from xdsl.ir import Block

import rlx_mlir as rlx
from rlx_mlir.core import shape_inference as si
from rlx_mlir.core.errors import DTypeError, ShapeError
from rlx_mlir.dialects import lir
from rlx_mlir.dialects.common import memref_type
from rlx_mlir.passes.lir_to_llvm import dynamic
from rlx_mlir.passes.lir_to_llvm.indexing import build_depthwise_conv1d
from rlx_mlir.passes.lir_to_llvm.kernels import (
    kernel_builders,
    partitioned_builders,
    runtime_dims_kernels,
)
from rlx_mlir.pipeline import lower

RTOL, ATOL = 1e-4, 1e-5


# ----------------------------------------------------------------------------- numpy references


def selective_scan_np(x, delta, A, B, C, state=None):
    """SPEC: per channel, state = exp(delta_t·A) ⊙ state + (delta_t·x_t) ⊗ B_t,
    y_t = state · C_t; returns (y, final state)."""
    b, s, h = x.shape
    n = A.shape[1]
    state = np.zeros((b, h, n)) if state is None else np.array(state, dtype=np.float64)
    y = np.zeros((b, s, h))
    for bi in range(b):
        for c in range(h):
            st = state[bi, c]
            for t in range(s):
                dt = float(delta[bi, t, c])
                st = np.exp(dt * A[c].astype(np.float64)) * st + dt * float(x[bi, t, c]) * B[bi, t]
                y[bi, t, c] = st @ C[bi, t]
            state[bi, c] = st
    return y, state


def gated_delta_net_np(q, k, v, g, beta, state=None):
    """SPEC: per (b, head), S = exp(g_t)·S; kv = Sᵀk_t; δ = β_t(v_t − kv); S = S + k_t δᵀ;
    o_t = Sᵀq_t; returns (out, final state)."""
    b, s, heads, n = q.shape
    m = v.shape[3]
    state = np.zeros((b, heads, n, m)) if state is None else np.array(state, dtype=np.float64)
    out = np.zeros((b, s, heads, m))
    for bi in range(b):
        for hh in range(heads):
            S = state[bi, hh]
            for t in range(s):
                S = np.exp(float(g[bi, t, hh])) * S
                kv = S.T @ k[bi, t, hh]
                d = float(beta[bi, t, hh]) * (v[bi, t, hh] - kv)
                S = S + np.outer(k[bi, t, hh], d)
                out[bi, t, hh] = S.T @ q[bi, t, hh]
            state[bi, hh] = S
    return out, state


# ----------------------------------------------------------------------------- graphs and data


def scan_inputs(rng, b, s, h, n, with_state=False):
    data = {
        "x": rng.standard_normal((b, s, h)),
        "delta": rng.uniform(0.01, 0.5, (b, s, h)),   # softplus-positive step sizes
        "A": -rng.uniform(0.5, 2.0, (h, n)),           # A = -exp(A_log) < 0
        "B": rng.standard_normal((b, s, n)),
        "C": rng.standard_normal((b, s, n)),
    }
    if with_state:
        data["state"] = rng.standard_normal((b, h, n))
    return {k: v.astype(np.float32) for k, v in data.items()}


def scan_graph(b, s, h, n, *, with_state=False, return_state=False):
    g = rlx.Graph("sscan")
    args = [g.input(name, shape) for name, shape in
            (("x", (b, s, h)), ("delta", (b, s, h)), ("A", (h, n)), ("B", (b, s, n)), ("C", (b, s, n)))]
    state = g.input("state", (b, h, n)) if with_state else None
    result = g.selective_scan(*args, initial_state=state, return_state=return_state)
    g.output(*(result if return_state else (result,)))
    return g


def delta_inputs(rng, b, s, heads, n, m, with_state=False):
    def unit(shape):  # Qwen3.5 l2-normalizes q and k
        a = rng.standard_normal(shape)
        return a / np.linalg.norm(a, axis=-1, keepdims=True)

    data = {
        "q": unit((b, s, heads, n)) / np.sqrt(n),
        "k": unit((b, s, heads, n)),
        "v": rng.standard_normal((b, s, heads, m)),
        "g": -rng.uniform(0.01, 1.0, (b, s, heads)),   # log decay <= 0
        "beta": rng.uniform(0.0, 1.0, (b, s, heads)),
    }
    if with_state:
        data["state"] = rng.standard_normal((b, heads, n, m))
    return {k: v.astype(np.float32) for k, v in data.items()}


def delta_graph(b, s, heads, n, m, *, with_state=False, return_state=False):
    g = rlx.Graph("gdn")
    args = [g.input(name, shape) for name, shape in
            (("q", (b, s, heads, n)), ("k", (b, s, heads, n)), ("v", (b, s, heads, m)),
             ("g", (b, s, heads)), ("beta", (b, s, heads)))]
    state = g.input("state", (b, heads, n, m)) if with_state else None
    result = g.gated_delta_net(*args, initial_state=state, return_state=return_state)
    g.output(*(result if return_state else (result,)))
    return g


def close(got, want):
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


SCAN_SHAPES = [(1, 1, 1, 1), (1, 1, 3, 4), (2, 7, 5, 19), (2, 9, 40, 16), (3, 4, 17, 33)]
DELTA_SHAPES = [(1, 1, 1, 3, 3), (1, 1, 2, 16, 16), (2, 7, 3, 17, 17), (2, 5, 4, 16, 24),
                (1, 6, 2, 9, 5)]


# ----------------------------------------------------------------------------- selective scan


@pytest.mark.parametrize("shape", SCAN_SHAPES)
def test_selective_scan_matches_numpy(shape):
    rng = np.random.default_rng(sum(shape))
    data = scan_inputs(rng, *shape)
    want, _ = selective_scan_np(**data)
    g = scan_graph(*shape)
    close(rlx.jit(g)(**data), want)
    close(rlx.reference(g)(**data), want)


@pytest.mark.parametrize("shape", SCAN_SHAPES[1:])
def test_selective_scan_initial_and_final_state(shape):
    rng = np.random.default_rng(1 + sum(shape))
    data = scan_inputs(rng, *shape, with_state=True)
    want_y, want_state = selective_scan_np(**data)
    g = scan_graph(*shape, with_state=True, return_state=True)
    for run in (rlx.jit(g), rlx.reference(g)):
        y, state = run(**data)
        close(y, want_y)
        close(state, want_state)


def test_selective_scan_state_round_trip():
    """Two calls carrying the state equal one call over the concatenated sequence."""
    rng = np.random.default_rng(7)
    b, s, h, n = 2, 9, 6, 5
    data = scan_inputs(rng, b, s, h, n)
    whole = rlx.jit(scan_graph(b, s, h, n, return_state=True))
    y, final = whole(**data)
    cut = 4
    first = rlx.jit(scan_graph(b, cut, h, n, return_state=True))
    second = rlx.jit(scan_graph(b, s - cut, h, n, with_state=True, return_state=True))
    head = {k: (v[:, :cut] if k not in ("A",) else v) for k, v in data.items()}
    tail = {k: (v[:, cut:] if k not in ("A",) else v) for k, v in data.items()}
    y1, state1 = first(**head)
    y2, state2 = second(**tail, state=state1)
    close(np.concatenate([y1, y2], axis=1), y)
    close(state2, final)


# ----------------------------------------------------------------------------- gated delta net


@pytest.mark.parametrize("shape", DELTA_SHAPES)
def test_gated_delta_net_matches_numpy(shape):
    rng = np.random.default_rng(sum(shape))
    data = delta_inputs(rng, *shape)
    want, _ = gated_delta_net_np(**data)
    g = delta_graph(*shape)
    close(rlx.jit(g)(**data), want)
    close(rlx.reference(g)(**data), want)


@pytest.mark.parametrize("shape", DELTA_SHAPES[1:])
def test_gated_delta_net_initial_and_final_state(shape):
    rng = np.random.default_rng(3 + sum(shape))
    data = delta_inputs(rng, *shape, with_state=True)
    want_out, want_state = gated_delta_net_np(**data)
    g = delta_graph(*shape, with_state=True, return_state=True)
    for run in (rlx.jit(g), rlx.reference(g)):
        out, state = run(**data)
        close(out, want_out)
        close(state, want_state)


@pytest.mark.parametrize("cut", [1, 5])
def test_gated_delta_net_state_round_trip(cut):
    rng = np.random.default_rng(11)
    b, s, heads, n = 2, 8, 3, 7
    data = delta_inputs(rng, b, s, heads, n, n)
    out, final = rlx.jit(delta_graph(b, s, heads, n, n, return_state=True))(**data)
    first = rlx.jit(delta_graph(b, cut, heads, n, n, return_state=True))
    second = rlx.jit(delta_graph(b, s - cut, heads, n, n, with_state=True, return_state=True))
    o1, state1 = first(**{k: v[:, :cut] for k, v in data.items()})
    o2, state2 = second(**{k: v[:, cut:] for k, v in data.items()}, state=state1)
    close(np.concatenate([o1, o2], axis=1), out)
    close(state2, final)


# ----------------------------------------------------------------------------- threads, widths


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_sequence_kernels_split_over_threads(threads):
    """States large enough (2^18 elements) for lir-parallelize to split the items."""
    rng = np.random.default_rng(5)
    data = delta_inputs(rng, 2, 3, 8, 128, 128, with_state=True)
    want_out, want_state = gated_delta_net_np(**data)
    model = rlx.jit(delta_graph(2, 3, 8, 128, 128, with_state=True, return_state=True),
                    threads=threads)
    assert "rlx_barrier" in model.mlir("llvm")  # its kernel is split over the threads
    out, state = model(**data)
    close(out, want_out)
    close(state, want_state)
    sdata = scan_inputs(rng, 2, 3, 1027, 128, with_state=True)
    want_y, want_s = selective_scan_np(**sdata)
    model = rlx.jit(scan_graph(2, 3, 1027, 128, with_state=True, return_state=True),
                    threads=threads)
    assert "rlx_barrier" in model.mlir("llvm")  # its kernel is split over the threads
    y, s = model(**sdata)
    close(y, want_y)
    close(s, want_s)


@pytest.mark.parametrize("width", [8, 4])
def test_sequence_kernels_at_narrower_vectors(width):
    rng = np.random.default_rng(width)
    data = delta_inputs(rng, 1, 4, 2, 11, 13)
    close(rlx.jit(delta_graph(1, 4, 2, 11, 13), vector_width=width)(**data),
          gated_delta_net_np(**data)[0])
    sdata = scan_inputs(rng, 1, 4, 6, 13)
    close(rlx.jit(scan_graph(1, 4, 6, 13), vector_width=width)(**sdata),
          selective_scan_np(**sdata)[0])


def test_return_state_is_a_second_out_of_one_kernel():
    """With return_state the op has two results: one kernel writes the output and the
    final state, each into its own buffer (here the two output arguments), no copy."""
    model = rlx.jit(delta_graph(1, 3, 2, 4, 4, return_state=True))
    assert "-> (tensor<1x3x2x4xf32>, tensor<1x2x4x4xf32>)" in model.mlir("mir")
    lir_text = model.mlir("lir")
    assert lir_text.count("lir.gated_delta_net") == 1
    assert "outs(%out0, %out1 : memref<1x3x2x4xf32>, memref<1x2x4x4xf32>) return_state" in lir_text
    assert "lir.copy" not in lir_text and "lir.narrow" not in lir_text


# ----------------------------------------------------------------------------- errors


def test_selective_scan_shape_errors():
    g = rlx.Graph("bad")
    x, d = g.input("x", (2, 5, 4)), g.input("d", (2, 5, 4))
    A, B, C = g.input("A", (4, 3)), g.input("B", (2, 5, 3)), g.input("C", (2, 5, 3))
    with pytest.raises(ShapeError, match=r"selective_scan: delta: expected shape \[2, 5, 4\]"):
        g.selective_scan(x, g.input("d2", (2, 5, 3)), A, B, C)
    with pytest.raises(ShapeError, match=r"selective_scan: A: expected shape \[4, 3\]"):
        g.selective_scan(x, d, g.input("A2", (5, 3)), B, C)
    with pytest.raises(ShapeError, match=r"selective_scan: B: expected shape \[2, 5, 3\]"):
        g.selective_scan(x, d, A, g.input("B2", (2, 5, 2)), C)
    with pytest.raises(ShapeError, match=r"selective_scan: C: expected shape"):
        g.selective_scan(x, d, A, B, g.input("C2", (1, 5, 3)))
    with pytest.raises(ShapeError, match=r"selective_scan: initial_state: expected shape \[2, 4, 3\]"):
        g.selective_scan(x, d, A, B, C, initial_state=g.input("s", (2, 3, 4)))
    with pytest.raises(DTypeError, match="selective_scan: x: expected element type f32"):
        g.selective_scan(g.input("xi", (2, 5, 4), dtype="i32"), d, A, B, C)


def test_gated_delta_net_shape_errors():
    g = rlx.Graph("bad")
    q, k, v = (g.input(n, (1, 3, 2, 4)) for n in "qkv")
    gate, beta = g.input("g", (1, 3, 2)), g.input("beta", (1, 3, 2))
    with pytest.raises(ShapeError, match=r"gated_delta_net: k: expected shape \[1, 3, 2, 4\]"):
        g.gated_delta_net(q, g.input("k2", (1, 3, 2, 5)), v, gate, beta)
    with pytest.raises(ShapeError, match=r"gated_delta_net: v: expected shape"):
        g.gated_delta_net(q, k, g.input("v2", (1, 3, 3, 4)), gate, beta)
    with pytest.raises(ShapeError, match=r"gated_delta_net: g: expected shape \[1, 3, 2\]"):
        g.gated_delta_net(q, k, v, g.input("g2", (1, 3, 1)), beta)
    with pytest.raises(ShapeError, match=r"gated_delta_net: beta: expected shape \[1, 3, 2\]"):
        g.gated_delta_net(q, k, v, gate, g.input("b2", (1, 2, 2)))
    with pytest.raises(ShapeError, match=r"gated_delta_net: initial_state: expected shape \[1, 2, 4, 4\]"):
        g.gated_delta_net(q, k, v, gate, beta, initial_state=g.input("s", (1, 2, 4, 3)))
    with pytest.raises(ShapeError, match=r"gated_delta_net: q: expected rank 4"):
        g.gated_delta_net(g.input("q3", (1, 3, 8)), k, v, gate, beta)
    with pytest.raises(DTypeError, match="gated_delta_net: beta: expected element type f32"):
        g.gated_delta_net(q, k, v, gate, g.input("bi", (1, 3, 2), dtype="i64"))


# ----------------------------------------------------------------------------- symbolic s


@pytest.mark.parametrize("return_state", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
def test_one_compiled_model_over_a_symbolic_s(threads, return_state):
    """Both kernels read s at run time: one compile (batch 2, initial state) serves every
    s up to the bound; the items are split over the threads (states of 2^18 elements),
    the partitioned kernels read s too. With return_state the final state (static shape)
    is the kernel's second out."""
    gdn = delta_graph(2, "S", 8, 128, 128, with_state=True, return_state=return_state)
    sscan = scan_graph(2, "S", 1027, 128, with_state=True, return_state=return_state)
    for graph, make_inputs, reference, sizes in (
            (gdn, delta_inputs, gated_delta_net_np, (8, 128, 128)),
            (sscan, scan_inputs, selective_scan_np, (1027, 128))):
        model = rlx.jit(graph, threads=threads, max_dims={"S": 16})
        llvm_text = model.mlir("llvm")
        assert 'rlx.role = "dim"' in llvm_text
        assert "rlx_barrier" in llvm_text  # its kernel is split over the threads
        rng = np.random.default_rng(threads)
        for s in (1, 5, 16, 2):
            data = make_inputs(rng, 2, s, *sizes, with_state=True)
            want = reference(**data)
            got = model(**data)
            if return_state:
                close(got[0], want[0])
                close(got[1], want[1])
            else:
                close(got, want[0])


@pytest.mark.parametrize("threads", [1, 2])
def test_a_symbolic_batch_and_s(threads):
    """A batched decoder's sequences: b and s both read at run time (b = 1, 3, 5 with
    several s), the items (b · channels or heads) counted at run time and split over the
    threads."""
    gdn = delta_graph("B", "S", 3, 16, 16, with_state=True, return_state=True)
    sscan = scan_graph("B", "S", 37, 5, with_state=True, return_state=True)
    for graph, make_inputs, reference, sizes in (
            (gdn, delta_inputs, gated_delta_net_np, (3, 16, 16)),
            (sscan, scan_inputs, selective_scan_np, (37, 5))):
        model = rlx.jit(graph, threads=threads, max_dims={"S": 8, "B": 5})
        rng = np.random.default_rng(threads)
        for b, s in ((1, 1), (3, 4), (5, 1), (2, 8)):
            data = make_inputs(rng, b, s, *sizes, with_state=True)
            want = reference(**data)
            got = model(**data)
            close(got[0], want[0])
            close(got[1], want[1])


@pytest.mark.parametrize("op", ["selective_scan", "gated_delta_net"])
def test_return_state_over_a_symbolic_s_in_the_reference(op):
    """The reference executor binds both results of the op over a symbolic s."""
    if op == "selective_scan":
        graph, make_inputs, reference, sizes = (
            scan_graph(2, "S", 5, 3, with_state=True, return_state=True), scan_inputs,
            selective_scan_np, (5, 3))
    else:
        graph, make_inputs, reference, sizes = (
            delta_graph(2, "S", 2, 4, 3, with_state=True, return_state=True), delta_inputs,
            gated_delta_net_np, (2, 4, 3))
    run = rlx.reference(graph)
    rng = np.random.default_rng(9)
    for s in (1, 5, 16):
        data = make_inputs(rng, 2, s, *sizes, with_state=True)
        (got_out, got_state), (want_out, want_state) = run(**data), reference(**data)
        close(got_out, want_out)
        close(got_state, want_state)


def recurrent_decoder(op: str, sizes: tuple[int, ...]) -> rlx.Graph:
    """A stateful decoder over a symbolic S: the op's state lives in the model
    (`g.state`), each call starts from it and assigns it the op's final state."""
    g = rlx.Graph("decoder")
    if op == "selective_scan":
        h, n = sizes
        args = [g.input(name, shape) for name, shape in
                (("x", (1, "S", h)), ("delta", (1, "S", h)), ("A", (h, n)), ("B", (1, "S", n)),
                 ("C", (1, "S", n)))]
        state = g.state("state", (1, h, n))
        y, final = g.selective_scan(*args, initial_state=state, return_state=True)
    else:
        heads, n, m = sizes
        args = [g.input(name, shape) for name, shape in
                (("q", (1, "S", heads, n)), ("k", (1, "S", heads, n)),
                 ("v", (1, "S", heads, m)), ("g", (1, "S", heads)), ("beta", (1, "S", heads)))]
        state = g.state("state", (1, heads, n, m))
        y, final = g.gated_delta_net(*args, initial_state=state, return_state=True)
    g.assign(state, final)
    g.output(y)
    return g


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("op, sizes", [("selective_scan", (6, 5)),
                                       ("gated_delta_net", (2, 7, 5))])
def test_stateful_decoder_steps_with_a_symbolic_s(op, sizes, threads):
    """Calls of 3, 1, 5 and 1 steps carry the state in the model (g.assign of the final
    state): their outputs equal one pass over the whole sequence (numpy), for the compiled
    model, the reference and the lir interpreter (the kernel's two outs bound)."""
    make_inputs, reference = ((scan_inputs, selective_scan_np) if op == "selective_scan"
                              else (delta_inputs, gated_delta_net_np))
    steps = (3, 1, 5, 1)
    data = make_inputs(np.random.default_rng(13), 1, sum(steps), *sizes)
    want_out, want_state = reference(**data)
    model = rlx.jit(recurrent_decoder(op, sizes), threads=threads, max_dims={"S": 8})
    planned = lower(recurrent_decoder(op, sizes).to_module(), "lir")
    assert f"lir.{op} " in str(planned) and "return_state" in str(planned)
    runs = (model, rlx.reference(recurrent_decoder(op, sizes)), rlx.reference(planned))
    for run in runs:
        outs, start = [], 0
        for s in steps:
            chunk = {k: (v if k == "A" else v[:, start:start + s]) for k, v in data.items()}
            outs.append(run(**chunk))
            start += s
        close(np.concatenate(outs, axis=1), want_out)
        close(run.state["state"], want_state)


@pytest.mark.parametrize("batch, channels, taps", [(1, 24, 4), (2, 7, 3), ("B", 40, 4)])
def test_depthwise_conv1d_kernel_reads_s_at_run_time(batch, channels, taps):
    """The causal conv's kernel over a pre-padded input [B, S+K-1, C] with a symbolic S
    (and B) reads them at run time: one function for every S."""
    padded = f"S+{taps - 1}"
    shapes = [(batch, padded, channels), (taps, channels), (batch, "S", channels)]
    block = Block(arg_types=[memref_type(s) for s in shapes])
    op = lir.DepthwiseConv1dOp(*block.args)
    dynamic.set_operand_shapes(op, shapes)
    symbols = dynamic.kernel_symbols(op)
    assert lir.DepthwiseConv1dOp in runtime_dims_kernels()
    kernel = Jitted([build_depthwise_conv1d(op, "conv", 16)], CPUS[16])
    fn = kernel.function("conv", 3, None, [ctypes.c_int64] * len(symbols))
    rng = np.random.default_rng(taps)
    b = 3 if batch == "B" else batch
    for s in (1, 2, 9):
        x = rng.standard_normal((b, s + taps - 1, channels)).astype(np.float32)
        w = rng.standard_normal((taps, channels)).astype(np.float32)
        out = np.full((b, s, channels), np.nan, np.float32)
        sizes = {"B": b, "S": s}
        fn(x.ctypes.data, w.ctypes.data, out.ctypes.data, *(sizes[n] for n in symbols))
        want = sum(x[:, k:k + s] * w[k] for k in range(taps))
        close(out, want)


@pytest.mark.parametrize("shapes, axis", [
    ([(1, 2, 5), (1, "S", 5)], 1),            # the causal conv's padding along S
    ([(2, "S", 3), (2, 3, 3), (2, 1, 3)], 1),  # several blocks per outer row
    ([("S", 3), ("S", 17)], 1),                # a static axis after the symbol
])
@pytest.mark.parametrize("parts", [None, 2])
def test_concat_kernel_reads_its_sizes_at_run_time(shapes, axis, parts):
    """Over `?` dims concat copies blocks whose sizes it reads at run time, along the
    symbolic axis too; a partitioned kernel's parts cover out."""
    out_shape = si.concat(shapes, axis)
    block = Block(arg_types=[memref_type(s) for s in (*shapes, out_shape)])
    op = lir.ConcatOp(list(block.args[:-1]), block.args[-1], axis)
    dynamic.set_operand_shapes(op, [*shapes, out_shape])
    build = kernel_builders()[lir.ConcatOp] if parts is None else partitioned_builders()[lir.ConcatOp]
    kernel = Jitted([build(op, "cat", 8)], CPUS[8])
    extra = 2 if parts else 0
    fn = kernel.function("cat", len(shapes) + 1, None, [ctypes.c_int64] * (1 + extra))
    rng = np.random.default_rng(len(shapes))
    for s in (1, 4, 11):
        arrays = [rng.standard_normal([s if d == "S" else d for d in shape]).astype(np.float32)
                  for shape in shapes]
        want = np.concatenate(arrays, axis)
        out = np.full_like(want, np.nan)
        for part in range(parts or 1):
            fn(*(a.ctypes.data for a in arrays), out.ctypes.data, s,
               *((part, parts) if parts else ()))
        np.testing.assert_array_equal(out, want)
