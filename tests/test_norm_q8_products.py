"""mir-fuse gives an rms_norm read by several q8 products of different schemes (a Q4_K_M
file's Q8_0 attn_v beside its Q5_0 q/k; a Q6_K v beside Q4_K q/k) to each of them, and a
lone q8 product its norm too (as a one-weight `mir.shared_input_matmul`): no rms_norm
kernel, and no barrier, between the layer's products. With Gemma 3's sandwich norm in
front, every product forms the sum itself; the first one hands it out.

The kernels must give the bits of the unfused build (`FusionPolicy(q8_edges=False)`),
split over threads or not."""

from __future__ import annotations

import numpy as np
import pytest
from test_barrier_hazards import _barriers_between_products
from test_jit_dequant import blocks
from test_q8_edges import fused_and_apart

import rlx_mlir as rlx
from rlx_mlir.core import quants
from rlx_mlir.core.locations import origin

RNG = np.random.default_rng(13)
K_DIM, N = 256, 1024
"""x's width (a K-quant superblock) and each product's rows (every product is split)."""


def _raw(g: rlx.Graph, name: str, scheme: str) -> rlx.Value:
    block = quants.quant_type(scheme)
    return g.param(name, (N, K_DIM // block.block_size * block.type_size), "ui8")


def _normed_qkv(schemes: tuple[str, str, str], *, sandwich: bool = False) -> rlx.Graph:
    """q, k, v of rms_norm(x) (each weight of its scheme); with `sandwich`, x = h +
    rms_norm(p, g1) (Gemma 3's post-FFN norm), also an output (the next residual)."""
    g = rlx.Graph("normed_qkv")
    h = g.input("h", ("S", K_DIM))
    gamma = g.param("gamma", (K_DIM,), "f32")
    x = h
    if sandwich:
        x = g.add(h, g.rms_norm(g.input("p", ("S", K_DIM)), g.param("g1", (K_DIM,), "f32"),
                                eps=1e-6))
    n = g.rms_norm(x, gamma, eps=1e-6)
    products = [g.dequant_matmul(n, _raw(g, name, scheme), scheme, activations="q8")
                for name, scheme in zip("qkv", schemes, strict=True)]
    g.output(*products, *([x] if sandwich else []))
    return g


def _params(schemes: tuple[str, ...], names: str = "qkv", sandwich: bool = False
            ) -> dict[str, np.ndarray]:
    params = {name: blocks(scheme, N, K_DIM) for name, scheme in zip(names, schemes, strict=True)}
    norms = ("gamma", "g1") if sandwich else ("gamma",)
    return params | {name: RNG.uniform(0.5, 1.5, K_DIM).astype(np.float32) for name in norms}


def _inputs(m: int, sandwich: bool) -> dict[str, np.ndarray]:
    names = ("h", "p") if sandwich else ("h",)
    return {name: RNG.standard_normal((m, K_DIM)).astype(np.float32) for name in names}


def _check_bits(g: rlx.Graph, params: dict[str, np.ndarray], threads: int, sandwich: bool
                ) -> rlx.CompiledGraph:
    fused, apart = fused_and_apart(g, params, threads)
    reference = rlx.reference(g, params=params)
    for m in (1, 3, 17):
        inputs = _inputs(m, sandwich)
        got, want = fused(**inputs), reference(**inputs)
        for a, b, r in zip(got, apart(**inputs), want, strict=True):
            np.testing.assert_array_equal(a, b, err_msg=f"M={m}")
            np.testing.assert_allclose(a, r, rtol=1e-3, atol=5e-3 * np.abs(r).max())
    return fused


def _check_interpreters(g: rlx.Graph, params: dict[str, np.ndarray], sandwich: bool) -> None:
    """The fused ops' references (the mir and the lir interpreters) against the graph's."""
    reference = rlx.reference(g, params=params)
    inputs = _inputs(3, sandwich)
    for stage in ("mir", "lir"):
        staged = rlx.reference(rlx.jit(g, params=params).stage_module(stage).clone(), params)
        for got, want in zip(staged(**inputs), reference(**inputs), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=5e-3 * np.abs(want).max())


@pytest.mark.parametrize(("schemes", "threads"), [
    (("q5_0", "q5_0", "q8_0"), 2),  # Q4_K_M's legacy fallback (K not a multiple of 256)
    (("q4_k", "q4_k", "q6_k"), 3),  # Q4_K_M's K-quants: the K-quant kernel for both
    (("q4_1", "q4_1", "iq4_nl"), 1),  # the emulated kernel beside the VNNI one
])
def test_a_norm_goes_into_each_product(schemes, threads):
    """q/k share one kernel, v its own; both normalize x themselves: no rms_norm kernel,
    no barrier between them, the bits of the unfused build at 1, 3 and 17 rows."""
    g = _normed_qkv(schemes)
    fused = _check_bits(g, _params(schemes), threads, sandwich=False)
    mir = fused.mlir("mir")
    assert "mir.rms_norm" not in mir and mir.count("norm(") == 2
    assert mir.count("mir.shared_input_matmul") == 2
    origins = [origin(op) for op in fused.stage_module("mir").walk()
               if op.name == "mir.shared_input_matmul"]  # each at its products and the norm
    assert origins == ["rms_norm#0 + dequant_matmul#0 + dequant_matmul#1",
                       "rms_norm#0 + dequant_matmul#2"]
    if threads > 1:
        assert _barriers_between_products(fused, hazards_only=True) == 0
    _check_interpreters(g, _params(schemes), sandwich=False)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_sandwich_sum_is_formed_by_each_product(threads):
    """x = h + rms_norm(p, g1) before the norm: both products take the residual form; the
    first one's sum is the output, the second's is unused (no barrier waits for it)."""
    schemes = ("q5_0", "q5_0", "q8_0")
    g = _normed_qkv(schemes, sandwich=True)
    fused = _check_bits(g, _params(schemes, sandwich=True), threads, sandwich=True)
    mir = fused.mlir("mir")
    assert "mir.rms_norm" not in mir and "mir.add" not in mir
    assert mir.count("residual(") == 2
    lir = fused.mlir("lir")
    assert "lir.rms_norm" not in lir and "lir.elementwise" not in lir
    if threads > 1:
        assert _barriers_between_products(fused, hazards_only=True) == 0
    _check_interpreters(g, _params(schemes, sandwich=True), sandwich=True)


def test_the_products_run_side_by_side():
    """A norm read by q/k, then an op on q, then v (a Q4_K_M layer's order): v's product
    moves next to q/k's, so the op after q runs after both (one region)."""
    g = rlx.Graph("moved")
    h = g.input("h", ("S", K_DIM))
    n = g.rms_norm(h, g.param("gamma", (K_DIM,), "f32"), eps=1e-6)
    q, k = (g.dequant_matmul(n, _raw(g, name, "q5_0"), "q5_0", activations="q8") for name in "qk")
    scaled = g.mul(q, 0.5)
    v = g.dequant_matmul(n, _raw(g, "v", "q8_0"), "q8_0", activations="q8")
    g.output(scaled, k, v)
    params = _params(("q5_0", "q5_0", "q8_0"))
    model = _check_bits(g, params, 2, sandwich=False)
    lir = model.mlir("lir")
    first = lir.index("lir.shared_input_matmul")
    assert lir.index("lir.shared_input_matmul", first + 1) < lir.index("lir.elementwise mul")


def test_a_lone_product_takes_its_norm():
    """A norm read by one q8 product (an output projection) becomes its one-weight
    shared_input_matmul's prologue; one read by a product that a residual add follows
    stays a kernel (the add's epilogue is kept)."""
    g = rlx.Graph("lone")
    h = g.input("h", ("S", K_DIM))
    n = g.rms_norm(h, g.param("gamma", (K_DIM,), "f32"), eps=1e-6)
    head = g.dequant_matmul(n, _raw(g, "q", "q8_0"), "q8_0", activations="q8")
    g.output(head)
    params = _params(("q8_0",), "q")
    model = _check_bits(g, params, 2, sandwich=False)
    assert "mir.shared_input_matmul" in model.mlir("mir") and "rms_norm" not in model.mlir("mir")

    g = rlx.Graph("residual_kept")
    h = g.input("h", ("S", K_DIM))
    w = g.param("q", (K_DIM, K_DIM // 32 * 34), "ui8")
    n = g.rms_norm(h, g.param("gamma", (K_DIM,), "f32"), eps=1e-6)
    g.output(g.add(h, g.dequant_matmul(n, w, "q8_0", activations="q8")))
    params = {"q": blocks("q8_0", K_DIM, K_DIM), "gamma": np.ones(K_DIM, np.float32)}
    mir = rlx.jit(g, params=params).mlir("mir")
    assert "mir.rms_norm" in mir and "residual %" in mir


def test_one_weight_needs_a_norm():
    """The shape rule: a shared_input_matmul of one weight only with a norm_weight."""
    from rlx_mlir.core.errors import ShapeError
    from rlx_mlir.core.shape_inference import shared_input_matmul
    with pytest.raises(ShapeError, match="or 1 with a norm_weight, got 1"):
        shared_input_matmul((2, 64), [(8, 68)], "q8_0")
    assert shared_input_matmul((2, 64), [(8, 68)], "q8_0", norm_weight=(64,)) == [(2, 8)]
