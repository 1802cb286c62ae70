"""The matmul-family kernels over a run-time M against the static ones (issue 9, item 6).

Usage: python -m benchmarks.dynamic_matmul [--rounds 9] [--out FILE.md] [--threads 1,2]

For the projections of the Llama block of benchmarks/workloads.py (d 512, kv 128, ff 1408)
and of SmolLM2-135M (d 576, kv 192, ff 1536): `lir.matmul` with f32 weights and, at the
SmolLM2 shapes, `lir.dequant_matmul` with q4_1 and q8_0 weights (the model's tensor types).
One static kernel per M in (1, 32, 128) and ONE dynamic kernel over x `[S, K]` called at
every M. One thread calls the serial kernel; two threads call parts 0 and 1 of the
partitioned kernel, each looping over its share (no barrier between calls): the time is
the CPU time of the slower part. Times are thread CPU times (not wall time) so that other
processes on a shared machine inflate them less; variants are interleaved round by round,
in alternating order, so that the memory traffic of other processes hits them alike; the
table gives the best time per call and the ratio dynamic / static.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import math
import threading
import time
from collections.abc import Callable, Sequence

import llvmlite.binding as llvmb
import numpy as np
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation

from benchmarks.report import publish
from benchmarks.workloads import LLAMA
from rlx_mlir.backend import optimize
from rlx_mlir.core import reference_kernels as R
from rlx_mlir.core.shape_inference import QUANT_BLOCKS
from rlx_mlir.core.target import host_target
from rlx_mlir.dialects import lir
from rlx_mlir.dialects.common import memref_type
from rlx_mlir.passes.lir_to_llvm import dynamic
from rlx_mlir.passes.lir_to_llvm.kernels import kernel_builders, partitioned_builders
from rlx_mlir.random_inputs import random_blocks

_D, _KV, _FF = LLAMA["d_model"], LLAMA["kv_heads"] * LLAMA["head_dim"], LLAMA["d_ff"]
SHAPES: dict[str, list[tuple[int, int]]] = {
    "llama block": [(_D, _D), (_D, _KV), (_D, _FF), (_FF, _D)],
    "smollm2-135m": [(576, 576), (576, 192), (576, 1536), (1536, 576)],
}
"""(K, N) of the q (and o), k/v, gate/up and down projections."""

ROWS = (1, 32, 128)
SCHEMES = ("f32", "q4_1", "q8_0")
"""f32: lir.matmul; the others: lir.dequant_matmul (SmolLM2 shapes only)."""


def matmul_op(scheme: str, rows: int | str, k: int, n: int) -> Operation:
    """lir.matmul (f32) or lir.dequant_matmul of x [rows, K] (a symbol: `?`) with a [K, N]
    weight."""
    if scheme == "f32":
        shapes, dtypes = [(rows, k), (k, n), (rows, n)], ["f32"] * 3
    else:
        values, block_bytes = QUANT_BLOCKS[scheme]
        shapes, dtypes = [(rows, k), (n, k // values * block_bytes), (rows, n)], ["f32", "ui8", "f32"]
    args = Block(arg_types=[memref_type(s, d) for s, d in zip(shapes, dtypes, strict=True)]).args
    op = lir.MatmulOp(*args) if scheme == "f32" else lir.DequantMatmulOp(*args, scheme=scheme)
    if dynamic.is_dynamic(op):
        dynamic.set_operand_shapes(op, shapes)
    return op


def weight(scheme: str, k: int, n: int, rng: np.random.Generator) -> np.ndarray:
    if scheme == "f32":
        return rng.uniform(-1, 1, (k, n)).astype(np.float32)
    values, block_bytes = QUANT_BLOCKS[scheme]
    return random_blocks(scheme, (n, k // values * block_bytes), rng)


def expected(scheme: str, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return R.matmul(x, w) if scheme == "f32" else R.dequant_matmul(x, w, scheme)


class Kernels:
    """Every kernel of the benchmark, compiled in one module for the host."""

    def __init__(self, functions: Sequence[Operation]):
        target = host_target()
        self.engine = llvmb.create_mcjit_compiler(optimize(ModuleOp(list(functions)), target),
                                                  target.machine())
        self.engine.finalize_object()

    def function(self, name: str, sizes: int) -> Callable:
        address = self.engine.get_function_address(name)
        return ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 3, *[ctypes.c_int64] * sizes)(address)


def time_serial(fn: Callable, args: Sequence, calls: int) -> float:
    """CPU time per call of this thread (robust to other processes taking the core)."""
    start = time.thread_time()
    for _ in range(calls):
        fn(*args)
    return (time.thread_time() - start) / calls


def time_parts(fn: Callable, args_of: Callable[[int], Sequence], calls: int,
               parts: int) -> float:
    """Per-call time of `parts` threads, each calling fn(*args_of(part)) `calls` times
    (ctypes releases the GIL during the call): the CPU time of the slowest part, which is
    the wall time of a call on `parts` idle cores (and, unlike it, not inflated when other
    processes take a core)."""
    spent = [0.0] * parts

    def worker(part: int) -> None:
        args = args_of(part)
        start = time.thread_time()
        for _ in range(calls):
            fn(*args)
        spent[part] = time.thread_time() - start

    threads = [threading.Thread(target=worker, args=(p,)) for p in range(parts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return max(spent) / calls


def part_arguments(pointers: Sequence[int], rows: int, static: bool, parts: int,
                   part: int) -> list[int]:
    """The arguments of a partitioned kernel: (pointers, part, parts) for a static one (and
    M, ignored), (pointers, M, part, parts) for a dynamic one."""
    return [*pointers, *([part, parts, rows] if static else [rows, part, parts])]


def cases() -> list[tuple[str, str, int, int]]:
    """(model, scheme, K, N) of every benchmarked projection."""
    out = []
    for model, shapes in SHAPES.items():
        for scheme in SCHEMES:
            if scheme != "f32" and model != "smollm2-135m":
                continue
            out += [(model, scheme, k, n) for k, n in shapes]
    return out


def build(threads: Sequence[int]) -> tuple[Kernels, list[tuple[str, str, int, int]]]:
    width = host_target().vector_width
    parted = any(t > 1 for t in threads)
    functions = []
    for i, (_, scheme, k, n) in enumerate(cases()):
        for rows in (*ROWS, "S"):
            op = matmul_op(scheme, rows, k, n)
            name = f"c{i}_{rows}"
            functions.append(kernel_builders()[type(op)](op, name, width))
            if parted:
                functions.append(partitioned_builders()[type(op)](op, name + "_p", width))
    return Kernels(functions), cases()


def run(rounds: int, threads: Sequence[int]) -> list[dict]:
    kernels, plan = build(threads)
    rng = np.random.default_rng(0)
    results = []
    for i, (model, scheme, k, n) in enumerate(plan):
        w = weight(scheme, k, n, rng)
        for m in ROWS:
            x = rng.standard_normal((m, k)).astype(np.float32)
            calls = max(3, int(4e6 / (m * k * n) * (4 if scheme == "f32" else 1)) + 2)
            timers: dict[tuple[str, int], Callable[[], float]] = {}
            outs: dict[tuple[str, int], np.ndarray] = {}
            for label, name in (("static", f"c{i}_{m}"), ("dynamic", f"c{i}_S")):
                for t in threads:
                    out = outs[(label, t)] = np.zeros((m, n), np.float32)
                    pointers = [x.ctypes.data, w.ctypes.data, out.ctypes.data]
                    # Both variants get the same arguments so that ctypes costs them the
                    # same: the static kernel ignores a trailing M (x86-64 calling convention).
                    if t == 1:
                        timers[(label, t)] = functools.partial(
                            time_serial, kernels.function(name, 1), [*pointers, m], calls)
                    else:
                        args_of = functools.partial(part_arguments, pointers, m,
                                                    label == "static", t)
                        timers[(label, t)] = functools.partial(
                            time_parts, kernels.function(name + "_p", 3), args_of, calls, t)
            best = dict.fromkeys(timers, math.inf)
            for r in range(rounds):  # the order alternates: no variant always runs first
                for key, timer in (timers.items() if r % 2 else reversed(timers.items())):
                    best[key] = min(best[key], timer())
            want = expected(scheme, x, w)
            for key, out in outs.items():
                np.testing.assert_allclose(out, want, rtol=1e-3, atol=1e-3 * math.sqrt(k),
                                           err_msg=str(key))
            results.append(dict(model=model, scheme=scheme, k=k, n=n, m=m, best=best))
    return results


def report(rows: list[dict], rounds: int, threads: Sequence[int]) -> str:
    target = host_target()
    head = "| model | weights | K × N | M |"
    rule = "|---|---|---|---|"
    for t in threads:
        head += f" static µs ({t}T) | dynamic µs ({t}T) | ratio ({t}T) |"
        rule += "---|---|---|"
    lines = [
        "# Matmul kernels over a run-time M vs static (issue 9)",
        "",
        f"`python -m benchmarks.dynamic_matmul --rounds {rounds} --threads "
        f"{','.join(map(str, threads))}` on {target.cpu} (W = {target.vector_width}); best "
        f"thread CPU time per call over {rounds} interleaved rounds; ratio = dynamic / static. "
        f"1T: the serial kernel; 2T: two threads running parts 0 and 1 of the partitioned "
        f"kernel (no barrier: the CPU time of the slower part).",
        "",
        head,
        rule,
    ]
    ratios: dict[int, list[float]] = {t: [] for t in threads}
    for r in rows:
        line = f"| {r['model']} | {r['scheme']} | {r['k']} × {r['n']} | {r['m']} |"
        for t in threads:
            s, d = r["best"][("static", t)], r["best"][("dynamic", t)]
            ratios[t].append(d / s)
            line += f" {s * 1e6:.1f} | {d * 1e6:.1f} | {d / s:.3f} |"
        lines.append(line)
    lines.append("")
    for t in threads:
        values = ratios[t]
        geo = math.exp(sum(map(math.log, values)) / len(values))
        lines.append(f"{t} thread(s): geometric mean ratio {geo:.3f}, "
                     f"min {min(values):.3f}, max {max(values):.3f}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--out", help="also write the markdown table to this file")
    args = parser.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    text = report(run(args.rounds, threads), args.rounds, threads)
    publish(text, args.out)


if __name__ == "__main__":
    main()
