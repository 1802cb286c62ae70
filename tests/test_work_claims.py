"""One-row q8 products share their column panels by claims (quant_dot.claimed_panels,
parallel.claimed_chunks): whatever thread takes which panels, every output is written
once with the serial kernel's bits, call after call, and every call site has a counter
of its own."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import rlx_mlir as rlx
from rlx_mlir.core.abi import CLAIM_SLOTS
from rlx_mlir.core.shape_inference import QUANT_BLOCKS
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
    fn = rlx.jit(graph, params=params, threads=2)
    assert fn.abi.claim_slots == 3
    assert f"{CLAIM_SLOTS} = 3" in fn.mlir("llvm")


def test_two_builds_sharing_an_executable_run_at_once():
    """Two compiled graphs of one graph share the executable (the in-memory cache) but not
    their barrier state, claim counters included: run side by side from two threads,
    each keeps the serial bits."""
    graph, params = _two_products("q8_0", 1029, 256)
    serial = rlx.jit(graph, params=params, threads=1)
    builds = [rlx.jit(graph, params=params, threads=2) for _ in range(2)]
    xs = np.random.default_rng(5).standard_normal((60, 1, 256)).astype(np.float32)
    want = [serial(x) for x in xs]
    failures: list[str] = []

    def run(build) -> None:
        for call, x in enumerate(xs):
            got = build(x)
            if not all(np.array_equal(g, w) for g, w in zip(got, want[call], strict=True)):
                failures.append(f"call {call}")

    workers = [threading.Thread(target=run, args=(build,)) for build in builds]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not failures, failures
