"""`python -m benchmarks.shared_f32`: the f32 forms of `lir.shared_input_matmul` (issue 22
item 3) at SmolLM2-135M shapes, one kernel per group of siblings (after) vs one kernel per
weight (before: `FusionPolicy(shared_input=False)`, the kernels the f32 forms lowered to
until then; the same numbers bit for bit).

x_a [M, 576] @ q/k/v (N = 576, 192, 192) and x_b [M, 576] @ gate/up (N = 1536, 1536), x
symbolic (`S` rows, as in the model), weights f32 [K, N] (bound: prepacked) or q4_1 blocks
with f32 activations (the exact form); M = 1 and 64, threads 1 and 2; interleaved reps,
median µs per call and after/before ratios.

`--regions [PATH]`: the parallel regions (barriers) of one SmolLM2 call (decode step)
built as `load_gguf(..., exact_dequant=True)` builds it, lowered to lir and parallelized
(no JIT): with and without shared-input fusion, and the q8 form for comparison.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import rlx_mlir as rlx
from rlx_mlir.core.shape_inference import QUANT_BLOCKS
from rlx_mlir.random_inputs import random_blocks

D, KV, F = 576, 192, 1536
GROUPS = {"qkv": (D, KV, KV), "gate_up": (F, F)}


def graph(form: str) -> tuple[rlx.Graph, dict[str, np.ndarray]]:
    """The q/k/v and gate/up projections of one layer: f32 weights or `form` blocks."""
    rng = np.random.default_rng(22)
    g = rlx.Graph(f"proj_{form}")
    params: dict[str, np.ndarray] = {}
    outs = []
    for group, ns in GROUPS.items():
        x = g.input(f"x_{group}", ("S", D))
        for i, n in enumerate(ns):
            name = f"{group}{i}"
            if form == "f32":
                params[name] = (rng.standard_normal((D, n)) * 0.05).astype(np.float32)
                outs.append(x @ g.param(name, (D, n)))
            else:
                values, block_bytes = QUANT_BLOCKS[form]
                params[name] = random_blocks(form, (n, D // values * block_bytes), rng)
                outs.append(g.dequant_matmul(x, g.param(name, params[name].shape, "ui8"), form,
                                             "f32"))
    g.output(*outs)
    return g, params


def measure(form: str, rows: tuple[int, ...], threads: tuple[int, ...], reps: int,
            calls: int) -> list[tuple[str, int, int, float, float]]:
    """(form, M, threads, before µs, after µs) per case."""
    g, params = graph(form)
    results = []
    for t in threads:
        models = {name: rlx.jit(g, params=params, threads=t,
                                fusion=rlx.FusionPolicy(shared_input=shared))
                  for name, shared in (("before", False), ("after", True))}
        for m in rows:
            xs = {f"x_{group}": np.random.default_rng(m).uniform(-1, 1, (m, D)).astype(np.float32)
                  for group in GROUPS}
            outs = {name: model(**xs) for name, model in models.items()}
            for a, b in zip(outs["before"], outs["after"], strict=True):
                assert np.array_equal(a, b), np.abs(a - b).max()
            times: dict[str, list[float]] = {name: [] for name in models}
            for _ in range(reps):
                for name, model in models.items():
                    start = time.perf_counter()
                    for _ in range(calls):
                        model(**xs)
                    times[name].append((time.perf_counter() - start) / calls * 1e6)
            results.append((form, m, t, statistics.median(times["before"]),
                            statistics.median(times["after"])))
    return results


def regions(path: str, exact: bool, shared: bool) -> tuple[int, int, int]:
    """(kernels, parallel kernels, barriers) of one SmolLM2 call (the model's one entry,
    which a decode step runs whole) built as `load_gguf(path, exact_dequant=exact)`
    builds it, lowered to lir and parallelized as the pipeline does (no JIT)."""
    from xdsl.dialects import func

    from rlx_mlir import GraphModule
    from rlx_mlir.dialects import lir
    from rlx_mlir.models.architectures import build_decoder
    from rlx_mlir.models.gguf_file import read_gguf
    from rlx_mlir.passes.lir_parallelize import is_parallel, parallelize

    file = read_gguf(path)
    try:
        decoder = build_decoder(file.check_model(), file.tensors, max_seq=2048,
                                activations="f32" if exact else "q8")
    finally:
        file.close()
    module = GraphModule.from_graph(decoder.graph).with_fusion_policy(
        rlx.FusionPolicy(shared_input=shared)).into_lir()
    kernels = parallel = barriers = 0
    for fn in list(module.walk()):
        if isinstance(fn, func.FuncOp) and not fn.is_declaration:
            parallelize(fn)
            for op in fn.body.block.ops:
                barriers += isinstance(op, lir.BarrierOp)
                kernels += isinstance(op, lir.KernelOp)
                parallel += is_parallel(op)
    return kernels, parallel, barriers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--forms", default="f32,q4_1")
    parser.add_argument("--rows", default="1,64")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--regions", metavar="GGUF", help="count SmolLM2's parallel regions "
                        "(a path, or smollm2-135m-instruct) instead of timing")
    args = parser.parse_args()
    if args.regions:
        from rlx_mlir.models import KNOWN_MODELS, fetch

        path = str(fetch(args.regions) if args.regions in KNOWN_MODELS else args.regions)
        print("| activations | shared-input fusion | kernels | parallel kernels | barriers |")
        print("|---|---|---|---|---|")
        for exact, shared in ((True, False), (True, True), (False, True)):
            counts = regions(path, exact, shared)
            print(f"| {'f32 (exact_dequant)' if exact else 'q8'} | {'on' if shared else 'off'} | "
                  + " | ".join(map(str, counts)) + " |", flush=True)
        return
    rows = tuple(int(r) for r in args.rows.split(","))
    threads = tuple(int(t) for t in args.threads.split(","))
    print("| form | M | threads | before µs | after µs | after/before |")
    print("|---|---|---|---|---|---|")
    for form in args.forms.split(","):
        for f, m, t, before, after in measure(form, rows, threads, args.reps, args.calls):
            print(f"| {f} | {m} | {t} | {before:.1f} | {after:.1f} | {after / before:.3f} |",
                  flush=True)


if __name__ == "__main__":
    main()
