"""The dynamic attention kernel (S and T read at run time) against the static one (issue 9).

Usage: python -m benchmarks.dynamic_attention [--rounds 15] [--out FILE.md]

For the attention shapes of the Llama block of benchmarks/workloads.py (H = 8, Hkv = 2,
D = 64) and of SmolLM2-135M (H = 9, Hkv = 3, D = 64), causal, at (S, T) = (1, 512),
(1, 2048), (32, 32), (128, 128): one static kernel per (S, T), and ONE dynamic kernel over
q `[S, H·D]`, k/v `[T, Hkv·D]` called at every (S, T). Both are called directly (one
thread, serial kernel and the partitioned kernel as part 0 of 1), interleaved round by
round so that load from other processes hits both alike; the table gives the best time per
call of each and their ratio dynamic / static. A second table times the dynamic kernel
decoding one token at positions 1, 512 and 2047 of a 2048-row cache.
"""

from __future__ import annotations

import argparse
import ctypes
import math
import time

import llvmlite.binding as llvmb
import numpy as np
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block

from benchmarks.report import publish
from benchmarks.workloads import LLAMA
from rlx_mlir.backend import optimize
from rlx_mlir.core import reference_kernels as R
from rlx_mlir.core.target import host_target
from rlx_mlir.dialects import lir
from rlx_mlir.dialects.common import memref_type
from rlx_mlir.passes.lir_to_llvm import attention, dynamic
from rlx_mlir.passes.lir_to_llvm.kernels import partitioned_builders

MODELS = {
    "llama block": (LLAMA["heads"], LLAMA["kv_heads"], LLAMA["head_dim"]),
    "smollm2-135m": (9, 3, 64),
}
"""(H, Hkv, D) of each attention."""

SIZES = ((1, 512), (1, 2048), (32, 32), (128, 128))
"""(S, T): decode at two cache lengths, two prefills."""

CAPACITY = 2048
POSITIONS = (1, 512, 2047)
"""Decode positions of the second table (T = P + 1 rows of a CAPACITY-row cache)."""


def attention_op(heads: int, kv_heads: int, dim: int, q_rows: int | str,
                 k_rows: int | str) -> lir.AttentionOp:
    """A causal lir.attention over q [q_rows, H·D], k/v [k_rows, Hkv·D] (symbols: `?`)."""
    shapes = [(q_rows, heads * dim), (k_rows, kv_heads * dim), (k_rows, kv_heads * dim),
              (q_rows, heads * dim)]
    args = Block(arg_types=[memref_type(s) for s in shapes]).args
    op = lir.AttentionOp(args[0], args[1], args[2], args[3], num_heads=heads, head_dim=dim,
                         num_kv_heads=kv_heads, mask_kind="causal", scale=1 / math.sqrt(dim))
    if dynamic.is_dynamic(op):
        dynamic.set_operand_shapes(op, shapes)
    return op


class Kernels:
    """Every kernel of the benchmark, compiled in one module for the host."""

    def __init__(self, functions):
        target = host_target()
        self.engine = llvmb.create_mcjit_compiler(optimize(ModuleOp(functions), target),
                                                  target.machine())
        self.engine.finalize_object()

    def function(self, name: str, sizes: int):
        address = self.engine.get_function_address(name)
        return ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 4,
                                *[ctypes.c_int64] * sizes)(address)


def best_per_call(fn, args, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    return (time.perf_counter() - start) / calls


def run(rounds: int) -> tuple[list[dict], list[dict]]:
    width = host_target().vector_width
    functions, plan = [], []
    for model, (h, hkv, d) in MODELS.items():
        dyn = attention_op(h, hkv, d, "S", "T")
        functions += [attention.build_attention(dyn, f"{model}_dyn", width),
                      partitioned_builders()[lir.AttentionOp](dyn, f"{model}_dyn_p", width)]
        for s, t in SIZES:
            static = attention_op(h, hkv, d, s, t)
            name = f"{model}_{s}_{t}"
            functions += [attention.build_attention(static, name, width),
                          partitioned_builders()[lir.AttentionOp](static, name + "_p", width)]
            plan.append((model, h, hkv, d, s, t, name))
    kernels = Kernels(functions)
    rows = []
    rng = np.random.default_rng(0)
    for model, h, hkv, d, s, t, name in plan:
        q = rng.standard_normal((s, h * d)).astype(np.float32)
        k, v = (rng.standard_normal((t, hkv * d)).astype(np.float32) for _ in range(2))
        outs = [np.zeros_like(q) for _ in range(4)]
        ptrs = [a.ctypes.data for a in (q, k, v)]
        calls = max(3, int(2e6 / (s * t * h * d)))  # ~ a few ms per timed batch
        variants = {
            "static": (kernels.function(name, 0), [*ptrs, outs[0].ctypes.data]),
            "dynamic": (kernels.function(f"{model}_dyn", 2), [*ptrs, outs[1].ctypes.data, s, t]),
            "static part": (kernels.function(name + "_p", 2),
                            [*ptrs, outs[2].ctypes.data, 0, 1]),
            "dynamic part": (kernels.function(f"{model}_dyn_p", 4),
                             [*ptrs, outs[3].ctypes.data, s, t, 0, 1]),
        }
        best = dict.fromkeys(variants, math.inf)
        for _ in range(rounds):
            for label, (fn, args) in variants.items():
                best[label] = min(best[label], best_per_call(fn, args, calls))
        expected = R.attention(q, k, v, None, num_heads=h, head_dim=d, num_kv_heads=hkv,
                               mask_kind="causal", scale=float(np.float32(1 / math.sqrt(d))))
        for out in outs:
            np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
        rows.append(dict(model=model, heads=(h, hkv, d), s=s, t=t, **best))
    return rows, decode_steps(kernels, rounds)


def decode_steps(kernels: Kernels, rounds: int) -> list[dict]:
    """The dynamic kernel decoding one token (S = 1) at positions 1, 512 and 2047 of a
    2048-row cache (T = position + 1): its time grows with T, not with the capacity."""
    rows = []
    rng = np.random.default_rng(1)
    for model, (h, hkv, d) in MODELS.items():
        k, v = (rng.standard_normal((CAPACITY, hkv * d)).astype(np.float32) for _ in range(2))
        q = rng.standard_normal((1, h * d)).astype(np.float32)
        out = np.zeros_like(q)
        fn = kernels.function(f"{model}_dyn", 2)
        times = {}
        for position in POSITIONS:
            args = [q.ctypes.data, k.ctypes.data, v.ctypes.data, out.ctypes.data, 1, position + 1]
            times[position] = min(best_per_call(fn, args, 200) for _ in range(rounds))
        rows.append(dict(model=model, heads=(h, hkv, d), times=times))
    return rows


def report(rows: list[dict], decode: list[dict], rounds: int) -> str:
    target = host_target()
    lines = [
        "# Dynamic attention kernel vs static (issue 9)",
        "",
        f"`python -m benchmarks.dynamic_attention --rounds {rounds}` on {target.cpu} "
        f"(W = {target.vector_width}), one thread, causal; best time per call over "
        f"{rounds} interleaved rounds. Ratio = dynamic / static.",
        "",
        "| attention (H, Hkv, D) | S | T | static µs | dynamic µs | ratio "
        "| static part µs | dynamic part µs | ratio |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} {r['heads']} | {r['s']} | {r['t']} "
            f"| {r['static'] * 1e6:.1f} | {r['dynamic'] * 1e6:.1f} "
            f"| {r['dynamic'] / r['static']:.3f} "
            f"| {r['static part'] * 1e6:.1f} | {r['dynamic part'] * 1e6:.1f} "
            f"| {r['dynamic part'] / r['static part']:.3f} |")
    lines += [
        "",
        f"Decode step of the dynamic kernel (S = 1) at positions {POSITIONS} of a "
        f"{CAPACITY}-row cache (T = position + 1), serial:",
        "",
        "| attention (H, Hkv, D) | " + " | ".join(f"P = {p} µs" for p in POSITIONS) + " |",
        "|---|" + "---|" * len(POSITIONS),
    ]
    for r in decode:
        lines.append(f"| {r['model']} {r['heads']} | "
                     + " | ".join(f"{r['times'][p] * 1e6:.1f}" for p in POSITIONS) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--out", help="also write the markdown table to this file")
    args = parser.parse_args()
    text = report(*run(args.rounds), args.rounds)
    publish(text, args.out)


if __name__ == "__main__":
    main()
