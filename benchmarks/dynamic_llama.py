"""The Llama block compiled once with a symbolic sequence length, next to static compiles,
and decoding one token with a KV cache (issue 9).

    python -m benchmarks.dynamic_llama [--threads N] [--repeat R] [--out results/x.md]

1. `llama_S`: the Llama block of the anchors table (d 512, 8 heads / 2 kv heads, ff 1408)
   compiled with `x: ("S", 512)` once and called at S = 1, 32, 128, against the block
   compiled for each S statically: the ratio symbolic / static of the median call times
   (goal: within 5%).
2. `decode`: the same block with 2048-row KV caches (`kv_cache=`), one token decoded at
   positions 1, 512 and 2047 (`model.reset(position=p)` before each step): the step time
   grows with the position (attention reads rows [0, P+1)), not with the capacity.

Calls alternate between the models being compared (round-robin), so drifting machine
load hits them alike; each number is the median of `--repeat` rounds.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from pathlib import Path

import numpy as np

from benchmarks.workloads import BY_NAME, build_graph, make_data, rope_tables

SEQS = (1, 32, 128)
POSITIONS = (1, 512, 2047)
CAPACITY = 2048


def _median_us(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def symbolic_vs_static(threads: int | None, repeat: int) -> list[tuple[int, float, float]]:
    import rlx_mlir as rlx

    w = BY_NAME["llama_1"]
    _, params = make_data(w)
    symbolic = rlx.jit(build_graph(w, seq="S"), params=params, threads=threads,
                       max_dims={"S": 2048})
    rows = []
    for s in SEQS:
        inputs, _ = make_data(BY_NAME[f"llama_{s}"])
        static = rlx.jit(build_graph(BY_NAME[f"llama_{s}"]), params=params, threads=threads)
        np.testing.assert_allclose(symbolic(**inputs), static(**inputs), rtol=1e-4, atol=1e-4)
        for _ in range(3):
            symbolic(**inputs), static(**inputs)
        run_symbolic = functools.partial(symbolic, **inputs)
        run_static = functools.partial(static, **inputs)
        sym, stat = [], []
        for _ in range(repeat):
            sym.append(_median_us(run_symbolic, 5))
            stat.append(_median_us(run_static, 5))
        rows.append((s, statistics.median(sym), statistics.median(stat)))
    return rows


def decode_steps(threads: int | None, repeat: int) -> list[tuple[int, float]]:
    import rlx_mlir as rlx

    w = BY_NAME["llama_1"]
    inputs, params = make_data(w)
    model = rlx.jit(build_graph(w, seq="S", cache=CAPACITY), params=params, threads=threads,
                    max_dims={"S": CAPACITY})
    hd = w.dims["head_dim"]
    cos_all, sin_all = rope_tables(CAPACITY, hd)
    rows = []
    for p in POSITIONS:
        args = dict(x=inputs["x"], cos=cos_all[p:p + 1], sin=sin_all[p:p + 1])

        def step(p=p, args=args):
            model.reset(position=p)
            model(**args)

        for _ in range(3):
            step()
        rows.append((p, statistics.median(_median_us(step, 5) for _ in range(repeat))))
    return rows


def report(threads: int | None, repeat: int) -> str:
    lines = [f"# Symbolic S vs static, and decode steps (threads: {threads or 'all'})", "",
             "| Llama block | symbolic S (µs) | static (µs) | symbolic / static |",
             "|---|---|---|---|"]
    for s, sym, stat in symbolic_vs_static(threads, repeat):
        lines.append(f"| S = {s} | {sym:.1f} | {stat:.1f} | {sym / stat:.3f} |")
    lines += ["", f"| decode 1 token, {CAPACITY}-row cache | step (µs) |", "|---|---|"]
    for p, us in decode_steps(threads, repeat):
        lines.append(f"| position {p} | {us:.1f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--out", type=Path, default=None, help="also write the table here")
    args = parser.parse_args()
    text = report(args.threads, args.repeat)
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
