"""`python -m benchmarks.shared_input`: one SmolLM2-135M-sized decoder layer's projections
(q/k/v and gate/up share x), q4_1 weights (random blocks) with q8 activations, rms norms
between, decode (1 row) and prefill (32 rows), threads=2: FusionPolicy(shared_input=False)
vs True (bit-identical outputs), interleaved reps, median us/call."""

import time

import numpy as np

import rlx_mlir as rlx
from rlx_mlir.core.shape_inference import QUANT_BLOCKS
from rlx_mlir.random_inputs import random_blocks


def blocks(scheme: str, n: int, k: int) -> np.ndarray:
    values, block_bytes = QUANT_BLOCKS[scheme]
    return random_blocks(scheme, (n, k // values * block_bytes), np.random.default_rng(n + k))


D, KV, F = 576, 192, 1536
scheme = "q4_1"
g = rlx.Graph("layer")
x = g.input("x", ("S", D))
W = {"q": (D, D), "k": (KV, D), "v": (KV, D), "g": (F, D), "u": (F, D), "o": (D, D), "d": (D, F)}
ws = {n: blocks(scheme, r, c) for n, (r, c) in W.items()}
p = {n: g.param(n, w.shape, "ui8") for n, w in ws.items()}


def mm(a: rlx.Value, n: str) -> rlx.Value:
    return g.dequant_matmul(a, p[n], scheme, "q8")


gamma = g.param("gamma", (D,))
n1 = g.rms_norm(x, gamma)
q, k, v = mm(n1, "q"), mm(n1, "k"), mm(n1, "v")
h = x + mm(g.rms_norm(q + g.concat([k, v, k], 1), gamma), "o")
n2 = g.rms_norm(h, gamma)
y = h + mm(g.rms_norm(g.silu(mm(n2, "g")) * mm(n2, "u"), g.param("gamma_f", (F,))), "d")
g.output(y)
ws["gamma"] = np.full(D, 0.05, np.float32)
ws["gamma_f"] = np.full(F, 0.05, np.float32)
models = {name: rlx.jit(g, params=ws, threads=2, fusion=rlx.FusionPolicy(shared_input=s))
          for name, s in (("apart", False), ("shared", True))}
for rows in (1, 32):
    xs = np.random.default_rng(0).uniform(-1, 1, (rows, D)).astype(np.float32)
    outs = {n: m(xs) for n, m in models.items()}
    assert np.isfinite(outs["apart"]).all() and np.array_equal(outs["apart"], outs["shared"]), np.abs(outs["apart"] - outs["shared"]).max()
    times = {n: [] for n in models}
    for _ in range(15):
        for n, m in models.items():
            t = time.perf_counter()
            for _ in range(20):
                m(xs)
            times[n].append((time.perf_counter() - t) / 20 * 1e6)
    print(f"rows={rows}: " + ", ".join(f"{n} {np.median(t):.1f} us (min {min(t):.1f})" for n, t in times.items()))
