"""The f32 forms of `lir.shared_input_matmul` (issue 22 item 3): sibling products on one x
with f32 weights, or GGUF weights with f32 activations, are ONE kernel that reads x once
and splits the weights' joint columns across threads (passes/lir_to_llvm/shared_matmul.py).

Each test compiles one graph holding two shared ops (3 weights on one x, 2 on another, of
different K; N not a multiple of the vector width, N = 1) and checks it, at M = 1, 3, 17
and 64 rows of a symbolic x (the one-row, decode and many-row plans), on 1 and 2 threads,
against the reference and against the same graph with `shared_input=False` (the separate
kernels: the same tiles, so the same bits).
"""

from __future__ import annotations

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
GROUPS = ((150, 1, 37), (5, 70))
"""The N of each weight of the two shared ops."""


def _f32(*shape: int) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype(np.float32)


def _ks(form: str) -> tuple[int, int]:
    """Two K per form: whole blocks of the scheme; any K for f32 and f16 (a tail)."""
    values = 1 if form == "f32" else QUANT_BLOCKS[form][0]
    return (2 * values, 3 * values) if values > 1 else (45, 96)


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


def _compare(graph: rlx.Graph, params: dict, inputs: list[dict]) -> None:
    """Compiled on 1 and 2 threads vs the reference (within f32 rounding) and vs the
    separate kernels (bit for bit), for every set of inputs."""
    reference = rlx.reference(graph, params=params)
    apart = rlx.jit(graph, params=params, threads=2, fusion=FusionPolicy(shared_input=False))
    models = [rlx.jit(graph, params=params, threads=t) for t in (1, 2)]
    for xs in inputs:
        want, separate = reference(**xs), apart(**xs)
        for model in models:
            got = model(**xs)
            for g, w, s in zip(got, want, separate, strict=True):
                np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-4)
                np.testing.assert_array_equal(g, s)


@pytest.mark.parametrize("form", ["f32", "q4_0", "q4_1", "q8_0", "q4_k", "q6_k", "f16"])
def test_f32_forms_are_one_kernel(form):
    graph, params = _graph(form)
    kernels = _kernels(graph)
    assert [op.name for op in kernels] == ["lir.shared_input_matmul"] * 2
    assert Counter(len(op.weights) for op in kernels) == Counter((3, 2))
    ka, kb = _ks(form)
    _compare(graph, params, [{"x0": _f32(m, ka), "x1": _f32(m, kb)} for m in ROWS])


@pytest.mark.parametrize("form", ["f32", "q4_k"])
def test_static_rows(form):
    """Static x (M = 17 and 64: the decode-tile and the many-row plans at build time)."""
    graph, params = _graph(form, rows=(17, 64))
    assert [op.name for op in _kernels(graph)] == ["lir.shared_input_matmul"] * 2
    ka, kb = _ks(form)
    _compare(graph, params, [{"x0": _f32(17, ka), "x1": _f32(64, kb)}])


@pytest.mark.parametrize("form", ["f32", "q4_1"])
def test_haswell(form, monkeypatch):
    """AVX2 (W = 8: other panels and dequant tiles)."""
    monkeypatch.setenv("RLX_TARGET_CPU", "haswell")
    graph, params = _graph(form)
    ka, kb = _ks(form)
    _compare(graph, params, [{"x0": _f32(m, ka), "x1": _f32(m, kb)} for m in ROWS])


def test_split_across_threads_and_packed():
    """Large enough to split: lir-parallelize marks the one kernel; bound f32 weights are
    all prepacked (`packed_rhs` on the op), one left unbound keeps the op unpacked."""
    g = rlx.Graph("big")
    x = g.input("x", ("S", 576))
    ws = {name: _f32(576, n) for name, n in (("q", 576), ("k", 192), ("v", 192))}
    g.output(*(x @ g.param(name, w.shape) for name, w in ws.items()))
    (kernel,) = _kernels(g)
    assert splits(kernel, PARALLEL_MIN_WORK)
    packed = rlx.jit(g, params=ws, threads=2)
    assert packed.abi.layouts == dict.fromkeys(ws, "packed_rhs")
    assert "packed_rhs" in packed.mlir("lir")
    partly = rlx.jit(g, params={"q": ws["q"], "k": ws["k"]}, threads=2)
    assert partly.abi.layouts == {}
    for m in (1, 20):
        xs = _f32(m, 576)
        want = [xs @ w for w in ws.values()]
        for got in (packed(xs), partly(xs, ws["v"])):
            for a, e in zip(got, want, strict=True):
                np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-4)
