"""GB/s of a dequant_matmul GEMV (M = 1) per GGUF scheme at one thread (issue 10, item 2).

Usage: python -m benchmarks.dequant_gemv [--repeat 200] [--schemes q4_0,q8_0]
K-quants run K = 512 (576 is not a multiple of 256). Bandwidth counts the weight bytes read per call (the raw blocks; x and out are small).
Each cell is `f32 → q8`: the f32 form (`dequant_matmul(x, w, scheme)`) and the q8 form
(`activations="q8"`, llama.cpp's: q4_0/q4_1/q5_*/q8_0 on a VNNI CPU run int8 dot products,
issue 11; other schemes and CPUs an emulation), timed alternately. Float schemes: f32 only.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import rlx_mlir as rlx
from rlx_mlir.core.quants import VEC_DOT_TYPES
from rlx_mlir.core.shape_inference import QUANT_BLOCKS
from rlx_mlir.random_inputs import random_blocks

SHAPES = ((576, 1536), (576, 49152))
"""(K, N): a SmolLM2-135M FFN projection and its vocabulary projection."""


def gemv_gbps(scheme: str, k: int, n: int, repeat: int) -> tuple[float, float]:
    """(f32 form, q8 form) GB/s of one GEMV, best of 5 alternating rounds."""
    values, block_bytes = QUANT_BLOCKS[scheme]
    k = k // values * values  # K-quants: 576 is not whole 256-blocks, use 512
    w = random_blocks(scheme, (n, k // values * block_bytes), np.random.default_rng(0))
    fns = []
    for form in ("f32", "q8" if scheme in VEC_DOT_TYPES else "f32"):
        g = rlx.Graph("gemv")
        x = g.input("x", (1, k))
        g.output(g.dequant_matmul(x, g.param("w", w.shape, "ui8"), scheme, activations=form))
        fns.append(rlx.jit(g, params={"w": w}, threads=1))
    xs = np.random.default_rng(1).standard_normal((1, k)).astype(np.float32)
    calls = max(3, repeat * 1536 // n)
    best = [float("inf")] * 2
    for fn in fns:
        fn(xs)
    for _ in range(5):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            for _ in range(calls):
                fn(xs)
            best[i] = min(best[i], (time.perf_counter() - start) / calls)
    return w.nbytes / best[0] / 1e9, w.nbytes / best[1] / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--schemes", default=",".join(QUANT_BLOCKS))
    args = parser.parse_args()
    print(f"{'scheme':8}" + "".join(f"{f'K={k} N={n}':>22}" for k, n in SHAPES)
          + "   (GB/s of weights, 1 thread: f32 form → q8 form)")
    for scheme in args.schemes.split(","):
        cells = [gemv_gbps(scheme, k, n, args.repeat) for k, n in SHAPES]
        print(f"{scheme:8}" + "".join(f"{f'{a:.1f} → {b:.1f}':>22}" for a, b in cells), flush=True)


if __name__ == "__main__":
    main()
