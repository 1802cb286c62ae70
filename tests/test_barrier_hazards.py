"""lir-parallelize's `hazards-only`: two parallel kernels with no memory between them (the
later reads no byte the earlier writes, writes no byte it reads or writes) run without a
barrier between them, as a Q4_K_M layer's q/k product (q5_0) and its v product (q8_0)
do; the numbers stay those of one thread."""

from __future__ import annotations

import numpy as np
import pytest
from test_jit_dequant import blocks

import rlx_mlir as rlx
from rlx_mlir.core import quants
from rlx_mlir.ir import make_context, module_text
from rlx_mlir.passes.lir_parallelize import LirParallelizePass

RNG = np.random.default_rng(5)
K_DIM, N = 256, 1024
"""Large enough that every product is split across threads (PARALLEL_MIN_WORK)."""


def _qkv(schemes: tuple[str, str, str]) -> rlx.Graph:
    """q, k, v = x @ w_i^T of q8 activations, each weight of its scheme."""
    g = rlx.Graph("qkv")
    x = g.input("x", ("S", K_DIM))
    products = []
    for name, scheme in zip("qkv", schemes, strict=True):
        block = quants.quant_type(scheme)
        w = g.param(name, (N, K_DIM // block.block_size * block.type_size), "ui8")
        products.append(g.dequant_matmul(x, w, scheme, activations="q8"))
    g.output(*products)
    return g


def _barriers_between_products(model, hazards_only: bool) -> int:
    """Barriers lir-parallelize puts between the products of `model`'s lir (a copy)."""
    module = model.stage_module("lir").clone()
    LirParallelizePass(hazards_only=hazards_only).apply(make_context(), module)
    text = module_text(module)
    body = text[text.index("lir.shared_input_matmul"):text.index("func.return")]
    return body.count("lir.barrier") - body.count('lir.barrier "gather"')


@pytest.mark.parametrize("threads", [2, 3])
def test_independent_products_share_a_barrier(threads):
    """q/k (q5_0, one shared-input kernel) and v (q8_0): no barrier between them, every
    output the bits of one thread at 1, 3 and 17 rows."""
    schemes = ("q5_0", "q5_0", "q8_0")
    g = _qkv(schemes)
    params = {name: blocks(scheme, N, K_DIM) for name, scheme in zip("qkv", schemes, strict=True)}
    model = rlx.jit(g, params=params, threads=threads)
    one = rlx.jit(g, params=params, threads=1)
    assert _barriers_between_products(model, hazards_only=True) == 0
    assert _barriers_between_products(model, hazards_only=False) == 1
    reference = rlx.reference(g, params=params)
    for m in (1, 3, 17):
        x = RNG.standard_normal((m, K_DIM)).astype(np.float32)
        got, want = model(x), reference(x)
        for a, b, r in zip(got, one(x), want, strict=True):
            np.testing.assert_array_equal(a, b)
            np.testing.assert_allclose(a, r, rtol=1e-3, atol=5e-3 * np.abs(r).max())
