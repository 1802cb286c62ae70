"""`python -m benchmarks.q8_edges`: four SmolLM2-135M-sized llama layers without attention
(rms_norm → q/k/v, o projection + residual, rms_norm → gate/up, SwiGLU, down + residual),
q4_1 weights (random blocks) with q8 activations, decode (1 row) and prefill (32 rows) at
1 and 2 threads: `FusionPolicy(q8_edges=False)` vs True (mir-fuse folds each rms_norm into
the shared product after it, the SwiGLU into the gate/up product's epilogue and each
residual add into the product before it; outputs bit-identical), interleaved reps, median µs/call. Four layers' weights (10 MB) stay in
the caches, so the numbers compare the kernels and barriers, not where the weights sit in
memory (a whole model's decode varies by ±10 % from one process to the next)."""

import time

import numpy as np

import rlx_mlir as rlx
from rlx_mlir.core.shape_inference import QUANT_BLOCKS
from rlx_mlir.random_inputs import random_blocks

D, KV, F, LAYERS = 576, 192, 1536, 4
SCHEME = "q4_1"


def blocks(n: int, k: int, seed: int) -> np.ndarray:
    values, block_bytes = QUANT_BLOCKS[SCHEME]
    return random_blocks(SCHEME, (n, k // values * block_bytes), np.random.default_rng(seed))


def layers() -> tuple[rlx.Graph, dict[str, np.ndarray]]:
    g = rlx.Graph("layers")
    h = g.input("x", ("S", D))
    params: dict[str, np.ndarray] = {}

    def mm(a: rlx.Value, name: str, rows: int, cols: int) -> rlx.Value:
        params[name] = blocks(rows, cols, len(params))
        return g.dequant_matmul(a, g.param(name, params[name].shape, "ui8"), SCHEME, "q8")

    def norm(a: rlx.Value, name: str) -> rlx.Value:
        params[name] = np.full(D, 0.05, np.float32)
        return g.rms_norm(a, g.param(name, (D,)))

    for i in range(LAYERS):
        n1 = norm(h, f"attn_norm{i}")
        q, k, v = mm(n1, f"q{i}", D, D), mm(n1, f"k{i}", KV, D), mm(n1, f"v{i}", KV, D)
        h = h + mm(q * g.concat([k, v, k], 1), f"o{i}", D, D)  # stands in for attention
        n2 = norm(h, f"ffn_norm{i}")
        h = h + mm(g.silu(mm(n2, f"gate{i}", F, D)) * mm(n2, f"up{i}", F, D), f"down{i}", D, F)
    g.output(h)
    return g, params


def main() -> None:
    g, params = layers()
    for threads in (1, 2):
        models = {name: rlx.jit(g, params=params, threads=threads,
                                fusion=rlx.FusionPolicy(q8_edges=edges))
                  for name, edges in (("apart", False), ("q8 edges", True))}
        for rows in (1, 32):
            xs = np.random.default_rng(0).uniform(-1, 1, (rows, D)).astype(np.float32)
            outs = [m(xs) for m in models.values()]
            assert np.isfinite(outs[0]).all() and np.array_equal(*outs)
            times: dict[str, list[float]] = {n: [] for n in models}
            for _ in range(15):
                for n, m in models.items():
                    start = time.perf_counter()
                    for _ in range(50):
                        m(xs)
                    times[n].append((time.perf_counter() - start) / 50 * 1e6)
            medians = {n: float(np.median(t)) for n, t in times.items()}
            print(f"threads={threads} rows={rows}: "
                  + ", ".join(f"{n} {t:.1f} us" for n, t in medians.items())
                  + f"; apart / q8 edges {medians['apart'] / medians['q8 edges']:.3f}")


if __name__ == "__main__":
    main()
