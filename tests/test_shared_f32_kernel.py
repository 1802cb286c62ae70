"""The f32 forms of `lir.shared_input_matmul` (issue 22 item 3): sibling products on one x
with f32 weights, or GGUF weights with f32 activations, are ONE kernel that reads x once
and splits the weights' joint columns across threads (passes/lir_to_llvm/shared_matmul.py).

Each form compiles one graph holding two shared ops (3 weights on one x, large enough to
be split across threads, and 2 on another, of other K, run on one thread; N not a multiple
of the vector width, N = 1) and checks it at M = 1, 3, 17 and 64 rows of a symbolic x (the
one-row, decode and many-row plans), on 1 and 2 threads, against the reference, and for
two forms against the same graph with `shared_input=False` (the separate kernels: the same
tiles, so the same bits).
"""

from __future__ import annotations

import functools
from collections import Counter

import numpy as np
import pytest
from test_jit_dequant import blocks

import rlx_mlir as rlx
from rlx_mlir import FusionPolicy, GraphModule
from rlx_mlir.core.shape_inference import QUANT_BLOCKS
from rlx_mlir.dialects import lir
from rlx_mlir.passes.lir_parallelize import PARALLEL_MIN_WORK, splits

RNG = np.random.default_rng(2211)
ROWS = (1, 3, 17, 64)
GROUPS = ((500, 1, 37), (5, 70))
"""The N of each weight of the two shared ops (the first: 538·K >= PARALLEL_MIN_WORK)."""


def _f32(*shape: int) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype(np.float32)


def _ks(form: str) -> tuple[int, int]:
    """The K of each shared op: 512 (or 520, a tail for f16), and a smaller one."""
    values = 1 if form == "f32" else QUANT_BLOCKS[form][0]
    if values == 1:
        return (512 if form == "f32" else 520), 45
    return 512, 3 * values if values < 256 else 256


def _graph(form: str, rows: tuple[int | str, ...] = ("S", "S")) -> tuple[rlx.Graph, dict]:
    """x_a [rows_a, K_a] @ three weights, x_b [rows_b, K_b] @ two: f32 [K, N] matmuls, or
    dequant_matmuls of scheme `form` with f32 activations."""
    g = rlx.Graph(f"shared_{form}")
    params: dict[str, np.ndarray] = {}
    outs = []
    for group, (m, k, ns) in enumerate(zip(rows, _ks(form), GROUPS, strict=True)):
        x = g.input(f"x{group}", (m, k))
        for i, n in enumerate(ns):
            name = f"w{group}{i}"
            if form == "f32":
                params[name] = _f32(k, n)
                outs.append(x @ g.param(name, (k, n)))
            else:
                params[name] = blocks(form, n, k)
                w = g.param(name, params[name].shape, "ui8")
                outs.append(g.dequant_matmul(x, w, form, "f32"))
    g.output(*outs)
    return g, params


def _kernels(graph: rlx.Graph) -> list[lir.KernelOp]:
    lowered = GraphModule.from_graph(graph).into_lir()
    return [op for op in lowered.walk() if isinstance(op, lir.KernelOp) and "matmul" in op.name]


def _inputs(form: str, rows: tuple[int, ...] = ROWS) -> list[dict[str, np.ndarray]]:
    ka, kb = _ks(form)
    return [{"x0": _f32(m, ka), "x1": _f32(m, kb)} for m in rows]


def _compare(graph: rlx.Graph, params: dict, model: rlx.CompiledGraph,
             inputs: list[dict], separate: rlx.CompiledGraph | None = None) -> None:
    """`model` (threads=2) and the same compiled on 1 thread vs the reference (within f32
    rounding) and, if given, vs the separate kernels (bit for bit), for every input set."""
    reference = rlx.reference(graph, params=params)
    one = rlx.jit(graph, params=params, threads=1)  # the compile cache's copy of `model`
    for xs in inputs:
        want = reference(**xs)
        apart = separate(**xs) if separate is not None else want
        for compiled in (one, model):
            for g, w, a in zip(compiled(**xs), want, apart, strict=True):
                np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-4)
                if separate is not None:
                    np.testing.assert_array_equal(g, a)


@functools.cache
def _compiled(form: str) -> tuple[rlx.Graph, dict, rlx.CompiledGraph]:
    graph, params = _graph(form)
    return graph, params, rlx.jit(graph, params=params, threads=2)


@pytest.mark.parametrize("form", ["f32", "q4_0", "q4_1", "q8_0", "q4_k", "q6_k", "f16"])
def test_f32_forms_are_one_kernel(form):
    graph, params, model = _compiled(form)
    kernels = _kernels(graph)
    assert [op.name for op in kernels] == ["lir.shared_input_matmul"] * 2
    assert Counter(len(op.weights) for op in kernels) == Counter((3, 2))
    # the 3-weight op is split across threads (its joint columns), the small one is not
    assert [splits(op, PARALLEL_MIN_WORK) for op in kernels] == [len(op.weights) == 3
                                                                 for op in kernels]
    assert model.threads == 2
    _compare(graph, params, model, _inputs(form))


@pytest.mark.parametrize("form", ["f32", "q4_1"])
def test_same_bits_as_the_separate_kernels(form):
    graph, params, model = _compiled(form)
    apart = rlx.jit(graph, params=params, threads=2, fusion=FusionPolicy(shared_input=False))
    _compare(graph, params, model, _inputs(form), apart)


def test_static_rows():
    """Static x (M = 17 and 64: the decode-tile and the packed many-row plans at build time)."""
    graph, params = _graph("f32", rows=(17, 64))
    assert [op.name for op in _kernels(graph)] == ["lir.shared_input_matmul"] * 2
    model = rlx.jit(graph, params=params, threads=2)
    ka, kb = _ks("f32")
    _compare(graph, params, model, [{"x0": _f32(17, ka), "x1": _f32(64, kb)}])


@pytest.mark.parametrize("form", ["f32", "q4_1"])
def test_haswell(form, monkeypatch):
    """AVX2 (W = 8: other panels and dequant tiles)."""
    monkeypatch.setenv("RLX_TARGET_CPU", "haswell")
    graph, params = _graph(form)
    _compare(graph, params, rlx.jit(graph, params=params, threads=2), _inputs(form))


def test_packed_weights():
    """Bound f32 weights of a shared op are all prepacked (`packed_rhs` on the op); one left
    unbound keeps the op's weights row-major."""
    g = rlx.Graph("qkv")
    x = g.input("x", ("S", 64))
    ws = {name: _f32(64, n) for name, n in (("q", 100), ("k", 36), ("v", 36))}
    g.output(*(x @ g.param(name, w.shape) for name, w in ws.items()))
    packed = rlx.jit(g, params=ws, threads=1)
    assert packed.abi.layouts == dict.fromkeys(ws, "packed_rhs")
    assert "packed_rhs" in packed.mlir("lir")
    partly = rlx.jit(g, params={"q": ws["q"], "k": ws["k"]}, threads=1)
    assert partly.abi.layouts == {}
    for m in (1, 20):
        xs = _f32(m, 64)
        want = [xs @ w for w in ws.values()]
        for got in (packed(xs), partly(xs, ws["v"])):
            for a, e in zip(got, want, strict=True):
                np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-4)
