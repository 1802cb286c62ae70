"""One input, several products: `g.shared_linear_pair`, `g.linear_fused`, and the
`mir.shared_input_matmul` mir-fuse forms from sibling matmuls / dequant_matmuls on one x
(docs/modules.md "shared_linear_pair and linear_fused")."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from test_jit_dequant import blocks

import rlx_mlir as rlx
from rlx_mlir import FusionPolicy, GraphModule
from rlx_mlir.core.errors import ShapeError
from rlx_mlir.core.shape_inference import QUANT_BLOCKS
from rlx_mlir.dialects import lir
from rlx_mlir.passes.lir_parallelize import PARALLEL_MIN_WORK, splits

RNG = np.random.default_rng(22)
SHARED = "mir.shared_input_matmul"


def _counts(graph: rlx.Graph, shared_input: bool) -> Counter[str]:
    module = GraphModule.from_graph(graph).with_fusion_policy(
        FusionPolicy(shared_input=shared_input)).into_mir()
    return Counter(op.name for op in module.walk())


def _f32(*shape: int) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype(np.float32)


def _check(graph: rlx.Graph, params: dict, inputs: dict, **jit) -> list[np.ndarray]:
    """Compiled (default policy) vs the reference and vs shared_input=False: the results."""
    want = rlx.reference(graph, params=params)(**inputs)
    got = rlx.jit(graph, params=params, **jit)(**inputs)
    apart = rlx.jit(graph, params=params, fusion=FusionPolicy(shared_input=False), **jit)(**inputs)
    want, got, apart = ([r] if isinstance(r, np.ndarray) else list(r) for r in (want, got, apart))
    assert len(got) == len(want)
    for g, w, a in zip(got, want, apart, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(g, a, rtol=1e-5, atol=1e-6)
    return got


# ----------------------------------------------------------------------------- hir ops


@pytest.mark.parametrize(("rows", "k", "n1", "n2"), [(1, 20, 7, 5), (3, 33, 17, 1), (5, 64, 48, 16)])
def test_shared_linear_pair_and_linear_fused(rows, k, n1, n2):
    g = rlx.Graph("pair")
    x = g.input("x", (rows, k))
    a, b = g.shared_linear_pair(x, g.param("w1", (k, n1)), g.param("w2", (k, n2)))
    c = g.linear_fused(x, g.param("w3", (k, n2)), g.param("b3", (n2,)), "silu")
    assert (a.shape, b.shape, c.shape) == ((rows, n1), (rows, n2), (rows, n2))
    g.output(a, b, c)
    params = {"w1": _f32(k, n1), "w2": _f32(k, n2), "w3": _f32(k, n2), "b3": _f32(n2)}
    xs = _f32(rows, k)
    got = _check(g, params, {"x": xs}, threads=1)
    np.testing.assert_allclose(got[0], xs @ params["w1"], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[1], xs @ params["w2"], rtol=1e-4, atol=1e-4)
    # whatever the policy, the pair is one shared op and linear_fused one fused matmul
    for shared in (True, False):
        counts = _counts(g, shared)
        assert counts[SHARED] == 1 and counts["mir.fused_matmul"] == 1
        assert "mir.matmul" not in counts and "mir.add" not in counts


def test_linear_fused_is_fused_under_every_policy():
    g = rlx.Graph("lf")
    x = g.input("x", (2, 8))
    g.output(g.linear_fused(x, g.param("w", (8, 4)), g.param("b", (4,)), "gelu"))
    module = GraphModule.from_graph(g).with_fusion_policy(FusionPolicy.none()).into_mir()
    names = Counter(op.name for op in module.walk())
    assert names["mir.fused_matmul"] == 1 and "mir.gelu" not in names


def test_shared_linear_pair_errors():
    g = rlx.Graph("bad")
    x = g.input("x", (2, 8))
    with pytest.raises(ShapeError, match=r"shared_linear_pair: weights\[1\]: w: expected shape \[8, N\]"):
        g.shared_linear_pair(x, g.param("w1", (8, 4)), g.param("w2", (7, 4)))


# ----------------------------------------------------------------------------- mir-fuse


def _siblings(x_shape: tuple, ns: tuple[int, ...]) -> tuple[rlx.Graph, dict]:
    g = rlx.Graph("siblings")
    x = g.input("x", x_shape)
    k = x_shape[-1]
    ws = [g.param(f"w{i}", (k, n)) for i, n in enumerate(ns)]
    g.output(*(x @ w for w in ws))
    return g, {f"w{i}": _f32(k, n) for i, n in enumerate(ns)}


@pytest.mark.parametrize(("x_shape", "ns"), [((1, 24), (24, 8, 8)), ((3, 17), (5, 9)),
                                             ((2, 3, 40), (40, 13, 13))])
def test_mir_fuse_merges_sibling_matmuls(x_shape, ns):
    g, params = _siblings(x_shape, ns)
    assert _counts(g, True)[SHARED] == 1 and "mir.matmul" not in _counts(g, True)
    assert SHARED not in _counts(g, False) and _counts(g, False)["mir.matmul"] == len(ns)
    for threads in (1, 2):
        _check(g, params, {"x": _f32(*x_shape)}, threads=threads)


def test_symbolic_rows():
    g, params = _siblings(("S", 20), (12, 7))
    for rows in (1, 5):
        _check(g, params, {"x": _f32(rows, 20)}, threads=2)


@pytest.mark.parametrize("activations", ["f32", "q8"])
def test_symbolic_intermediate_products(activations):
    """Products used inside the graph get buffers of the run-time row count (their
    symbolic shapes come from the op's rule)."""
    k = 64
    g = rlx.Graph("mid")
    x = g.input("x", ("S", k))
    ws = {"wa": blocks("q4_1", 16, k), "wb": blocks("q4_1", 16, k)}
    a, b = (g.dequant_matmul(x, g.param(name, w.shape, "ui8"), "q4_1", activations)
            for name, w in ws.items())
    c, d = g.shared_linear_pair(x, g.param("w1", (k, 9)), g.param("w2", (k, 9)))
    g.output(g.silu(a) * b, c - d)
    ws.update(w1=_f32(k, 9), w2=_f32(k, 9))
    for rows in (1, 7):
        _check(g, ws, {"x": _f32(rows, k)}, threads=2)


def test_epilogue_matmul_stays_fused():
    """A matmul fused with its bias/activation stays a fused_matmul (the epilogue round
    runs first); the plain sibling then has no partner left."""
    g = rlx.Graph("epi")
    x = g.input("x", (2, 16))
    y = g.relu(x @ g.param("w1", (16, 8)))
    z = x @ g.param("w2", (16, 8))
    g.output(y, z)
    counts = _counts(g, True)
    assert counts["mir.fused_matmul"] == 1 and counts["mir.matmul"] == 1 and SHARED not in counts


@pytest.mark.parametrize(("scheme", "activations"), [("q8_0", "f32"), ("q4_0", "q8"),
                                                     ("q4_k", "f32"), ("q6_k", "q8")])
def test_mir_fuse_merges_dequant_siblings(scheme, activations):
    values = QUANT_BLOCKS[scheme][0]
    k = 2 * values
    g = rlx.Graph("qkv")
    x = g.input("x", ("S", k))
    ns = (24, 8, 8)
    ws = {f"w{i}": blocks(scheme, n, k) for i, n in enumerate(ns)}
    outs = [g.dequant_matmul(x, g.param(name, w.shape, "ui8"), scheme, activations)
            for name, w in ws.items()]
    other = g.dequant_matmul(x, g.param("w_other", ws["w1"].shape, "ui8"), scheme,
                             "f32" if activations == "q8" else "q8")  # another form: apart
    g.output(*outs, other)
    ws["w_other"] = blocks(scheme, ns[1], k)
    counts = _counts(g, True)
    assert counts[SHARED] == 1 and counts["mir.dequant_matmul"] == 1
    assert SHARED not in _counts(g, False)
    for rows in (1, 3):
        _check(g, ws, {"x": _f32(rows, k)}, threads=2)


# ----------------------------------------------------------------------------- the q8 kernel


@pytest.mark.parametrize("cpu", [None, "haswell"])
@pytest.mark.parametrize("scheme", ["q4_0", "q4_1", "q8_0", "q4_k"])
def test_q8_kernel_reads_x_once(scheme, cpu, monkeypatch):
    """One lir.shared_input_matmul kernel (VNNI where the CPU has it; haswell: maddubs, and
    the emulation for q8_0),
    split across two threads over the weights' joint columns (N not a multiple of the
    tile), one and several rows, equal to the reference and to the separate kernels."""
    if cpu is not None:
        monkeypatch.setenv("RLX_TARGET_CPU", cpu)
    k = 512
    ns = (500, 129, 129)
    g = rlx.Graph("q8")
    x = g.input("x", ("S", k))
    ws = {f"w{i}": blocks(scheme, n, k) for i, n in enumerate(ns)}
    g.output(*(g.dequant_matmul(x, g.param(name, w.shape, "ui8"), scheme, "q8")
               for name, w in ws.items()))
    lowered = GraphModule.from_graph(g).into_lir()
    kernels = [op for op in lowered.walk() if isinstance(op, lir.KernelOp)
               and "matmul" in op.name]
    assert [op.name for op in kernels] == ["lir.shared_input_matmul"]
    assert splits(kernels[0], PARALLEL_MIN_WORK)  # threads=2 splits it
    for rows in (1, 6):
        _check(g, ws, {"x": _f32(rows, k)}, threads=2)
