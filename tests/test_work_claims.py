"""One-row q8 products share their column panels by claims (quant_dot.claimed_panels,
parallel.claimed_chunks): whatever thread takes which panels, every output is written
once with the serial kernel's bits, call after call, and every call site has a counter
of its own."""

from __future__ import annotations

import numpy as np
import pytest

import rlx_mlir as rlx
from rlx_mlir.core.shape_inference import QUANT_BLOCKS
from rlx_mlir.passes.lir_to_llvm.parallel import CLAIMS_PREFIX
from rlx_mlir.random_inputs import random_blocks


def _weights(scheme: str, n: int, k: int, seed: int) -> np.ndarray:
    values, block_bytes = QUANT_BLOCKS[scheme]
    return random_blocks(scheme, (n, k // values * block_bytes), np.random.default_rng(seed))


def _two_products(scheme: str, n: int, k: int) -> tuple[rlx.Graph, dict[str, np.ndarray]]:
    """Two independent q8 products of one x (separate kernels, no barrier needed between
    them) and a third that reads the first: three call sites."""
    w1, w2, w3 = (_weights(scheme, n, k, seed) for seed in (1, 2, 3))
    g = rlx.Graph("claims")
    x = g.input("x", ("S", k))
    a = g.dequant_matmul(x, g.param("w1", w1.shape, "ui8"), scheme, activations="q8")
    b = g.dequant_matmul(g.mul(x, 2.0), g.param("w2", w2.shape, "ui8"), scheme, activations="q8")
    c = g.dequant_matmul(g.narrow(a, 1, 0, k), g.param("w3", w3.shape, "ui8"), scheme,
                         activations="q8")
    g.output(a=a, b=b, c=c)
    return g, {"w1": w1, "w2": w2, "w3": w3}


@pytest.mark.parametrize("scheme", ["q8_0", "q4_1", "q4_k"])
def test_claimed_panels_give_the_serial_bits_call_after_call(scheme):
    k = 256
    n = 16 * 64 + 5  # whole panels and a rest: claims of uneven size; large enough to split
    graph, params = _two_products(scheme, n, k)
    rng = np.random.default_rng(0)
    serial = rlx.jit(graph, params=params, threads=1)
    for threads in (2, 3, 5):
        parted = rlx.jit(graph, params=params, threads=threads)
        assert parted.threads == threads
        for call in range(40):
            x = rng.standard_normal((1, k)).astype(np.float32)
            want, got = serial(x), parted(x)
            for name, w, g in zip("abc", want, got, strict=True):
                np.testing.assert_array_equal(g, w, err_msg=f"{scheme} {threads} threads "
                                                            f"call {call} output {name}")
        rows = rng.standard_normal((4, k)).astype(np.float32)  # more rows: the static split
        for w, g in zip(serial(rows), parted(rows), strict=True):
            np.testing.assert_array_equal(g, w, err_msg=f"{scheme} {threads} threads, 4 rows")


def test_every_call_site_has_its_own_counter():
    graph, params = _two_products("q8_0", 1029, 256)
    llvm_text = rlx.jit(graph, params=params, threads=2).mlir("llvm")
    globals_ = [line for line in llvm_text.splitlines() if "llvm.mlir.global" in line]
    counters = {line.split("@")[1].split("(")[0] for line in globals_ if CLAIMS_PREFIX in line}
    assert len(counters) == 3, globals_
