"""The recurrences over time of issue 12 against Hugging Face's torch implementations.

Usage: python -m benchmarks.sequence_ops [--rounds 7] [--out FILE.md]

- gated_delta_net at Qwen3.5-0.8B-like heads (batch 1, 16 heads, n = m = 128) next to
  `torch_recurrent_gated_delta_rule` and `torch_chunk_gated_delta_rule` of transformers'
  qwen3_5 model (chunked: chunk 64, the prefill path; recurrent: the decode path);
- selective_scan at Mamba-130m sizes (batch 1, d_inner 1536 channels, state n = 16) next to
  transformers' `mamba_selective_scan` (its sequential torch path, the slow path of
  MambaMixer without the CUDA kernels; it starts from a zero state, so rlx's initial
  state is zeros here);

both with a carried state (initial_state and return_state, as in decoding), at s = 1
(one decode step) and s = 512 (a prefill), on 1 and 2 threads (rlx: `rlx.jit(threads=)`,
torch: `torch.set_num_threads`). Each row is the best wall time per call over `--rounds`
rounds of interleaved calls (rlx and torch alternate, so load from other processes hits
both alike). The rlx model is one compiled graph holding only the op (its call overhead
included). The torch columns are absent when torch/transformers are not importable; the
last column is the largest difference of the outputs relative to torch's largest.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import rlx_mlir as rlx

GDN = {"heads": 16, "n": 128}
MAMBA = {"channels": 1536, "n": 16}
STEPS = (1, 512)
THREADS = (1, 2)
DEFAULT_OUT = Path(__file__).parent / "results" / "issue12-sequence-ops.md"


def gdn_graph(steps: int) -> rlx.Graph:
    h, n = GDN["heads"], GDN["n"]
    g = rlx.Graph("gdn")
    q, k, v = (g.input(name, (1, steps, h, n)) for name in "qkv")
    gate, beta = g.input("g", (1, steps, h)), g.input("beta", (1, steps, h))
    state = g.input("state", (1, h, n, n))
    g.output(*g.gated_delta_net(q, k, v, gate, beta, initial_state=state, return_state=True))
    return g


def gdn_inputs(steps: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    h, n = GDN["heads"], GDN["n"]

    def unit(shape):  # l2-normalized rows, as Qwen3.5 feeds q and k
        x = rng.standard_normal(shape).astype(np.float32)
        return x / np.linalg.norm(x, axis=-1, keepdims=True)

    return {"q": unit((1, steps, h, n)) / np.float32(np.sqrt(n)), "k": unit((1, steps, h, n)),
            "v": rng.standard_normal((1, steps, h, n)).astype(np.float32),
            "g": -rng.uniform(0.01, 0.5, (1, steps, h)).astype(np.float32),
            "beta": rng.uniform(0.1, 0.9, (1, steps, h)).astype(np.float32),
            "state": (0.1 * rng.standard_normal((1, h, n, n))).astype(np.float32)}


def scan_graph(steps: int) -> rlx.Graph:
    c, n = MAMBA["channels"], MAMBA["n"]
    g = rlx.Graph("ssm")
    x, delta = g.input("x", (1, steps, c)), g.input("delta", (1, steps, c))
    a = g.input("A", (c, n))
    b, cc = g.input("B", (1, steps, n)), g.input("C", (1, steps, n))
    state = g.input("state", (1, c, n))
    g.output(*g.selective_scan(x, delta, a, b, cc, initial_state=state, return_state=True))
    return g


def scan_inputs(steps: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    c, n = MAMBA["channels"], MAMBA["n"]
    return {"x": rng.standard_normal((1, steps, c)).astype(np.float32),
            "delta": rng.uniform(0.001, 0.1, (1, steps, c)).astype(np.float32),
            "A": -np.tile(np.arange(1, n + 1, dtype=np.float32), (c, 1)),
            "B": rng.standard_normal((1, steps, n)).astype(np.float32),
            "C": rng.standard_normal((1, steps, n)).astype(np.float32),
            # zero: HF's mamba_selective_scan starts from zeros (it takes no initial state)
            "state": np.zeros((1, c, n), np.float32)}


def torch_functions() -> dict[str, Callable] | None:
    """HF's torch implementations over our inputs (numpy -> torch once, outside the
    timing), or None when torch/transformers are missing."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # mamba_selective_scan: no hub kernel
    try:
        import torch
        from transformers.models.mamba.modeling_mamba import mamba_selective_scan
        from transformers.models.qwen3_5.modeling_qwen3_5 import (
            torch_chunk_gated_delta_rule,
            torch_recurrent_gated_delta_rule,
        )
    except ImportError:
        return None

    def gdn(rule):
        def prepare(inputs):
            t = {k: torch.from_numpy(v) for k, v in inputs.items()}
            q = t["q"] * t["q"].shape[-1] ** 0.5  # HF scales q by 1/sqrt(n) itself
            args = (q, t["k"], t["v"], t["g"], t["beta"])

            def call():
                with torch.no_grad():
                    return rule(*args, initial_state=t["state"], output_final_state=True)
            return call
        return prepare

    def mamba(inputs):
        t = {k: torch.from_numpy(v) for k, v in inputs.items()}
        x, dt = t["x"].transpose(1, 2).contiguous(), t["delta"].transpose(1, 2).contiguous()
        b, c = t["B"].transpose(1, 2).contiguous(), t["C"].transpose(1, 2).contiguous()

        def call():
            with torch.no_grad():
                return mamba_selective_scan(x, dt, t["A"], b, c, return_last_state=True)
        return call

    return {"torch_recurrent_gated_delta_rule": gdn(torch_recurrent_gated_delta_rule),
            "torch_chunk_gated_delta_rule": gdn(torch_chunk_gated_delta_rule),
            "mamba_selective_scan": mamba, "set_threads": torch.set_num_threads}


def best_times(calls: dict[str, Callable[[], object]], rounds: int, round_s: float = 0.02,
               budget_s: float = 20.0) -> dict[str, float]:
    """Best seconds per call of each, rounds interleaved: a round times one call, then
    (when it took under `round_s`) the mean of enough repeated calls to fill `round_s`;
    a call stops taking part after `budget_s` in total (very slow ones)."""
    best = dict.fromkeys(calls, float("inf"))
    spent = dict.fromkeys(calls, 0.0)
    for fn in calls.values():
        fn()  # warm-up
    for _ in range(rounds):
        for name, fn in calls.items():
            if spent[name] > budget_s:
                continue
            start = time.perf_counter()
            fn()
            once = time.perf_counter() - start
            best[name] = min(best[name], once)
            if once < round_s:
                repeat = min(200, int(round_s / max(once, 1e-7)))
                start = time.perf_counter()
                for _ in range(repeat):
                    fn()
                best[name] = min(best[name], (time.perf_counter() - start) / repeat)
            spent[name] += time.perf_counter() - start
    return best


def agreement(ours: np.ndarray, theirs: object) -> float:
    """max |ours - theirs| / max |theirs| of the sequence outputs (theirs: torch, in our
    layout)."""
    want = np.asarray(theirs)
    return float(np.abs(ours - want).max() / np.abs(want).max())


def run(rounds: int) -> list[dict[str, object]]:
    torch_fns = torch_functions()
    rng = np.random.default_rng(0)
    rows = []
    cases = [("gated_delta_net", f"b=1, H={GDN['heads']}, n=m={GDN['n']}", gdn_graph, gdn_inputs,
              ("torch_recurrent_gated_delta_rule", "torch_chunk_gated_delta_rule")),
             ("selective_scan", f"b=1, h={MAMBA['channels']}, n={MAMBA['n']}", scan_graph,
              scan_inputs, ("mamba_selective_scan",))]
    for op, sizes, graph, make_inputs, peers in cases:
        for steps in STEPS:
            inputs = make_inputs(steps, rng)
            for threads in THREADS:
                model = rlx.jit(graph(steps), threads=threads)
                calls: dict[str, Callable[[], object]] = {"rlx": lambda m=model, x=inputs: m(**x)}
                errors = {}
                if torch_fns is not None:
                    torch_fns["set_threads"](threads)
                    ours = model(**inputs)[0]
                    for peer in peers:
                        calls[peer] = torch_fns[peer](inputs)
                        out = calls[peer]()[0]
                        if op == "selective_scan":
                            out = out.transpose(1, 2)
                        errors[peer] = agreement(ours, out.numpy())
                best = best_times(calls, rounds)
                rows.append({"op": op, "sizes": sizes, "s": steps, "threads": threads, **best,
                             "errors": errors})
                print(rows[-1], flush=True)
    return rows


def markdown(rows: list[dict[str, object]]) -> str:
    lines = ["| op | sizes | s | threads | rlx (µs) | torch (µs) | torch / rlx | max rel. diff |",
             "|---|---|---:|---:|---:|---|---|---|"]
    for row in rows:
        rlx_us = row["rlx"] * 1e6
        errors = row["errors"]
        peers = list(errors)
        torch_us = "<br>".join(f"{k}: {row[k] * 1e6:.0f}" for k in peers) or "—"
        ratio = "<br>".join(f"×{row[k] / row['rlx']:.1f}" for k in peers) or "—"
        diff = "<br>".join(f"{errors[k]:.1e}" for k in peers) or "—"
        lines.append(f"| {row['op']} | {row['sizes']} | {row['s']} | {row['threads']} | "
                     f"{rlx_us:.0f} | {torch_us} | {ratio} | {diff} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    rows = run(args.rounds)
    table = markdown(rows)
    load = os.getloadavg()
    text = (f"# Sequence ops (issue 12): rlx vs Hugging Face torch\n\n"
            f"`python -m benchmarks.sequence_ops --rounds {args.rounds}`; best wall time per "
            f"call, interleaved rounds, load average at the end "
            f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}. State carried in and out "
            f"(initial_state, return_state) on both sides; f32.\n\n{table}\n")
    args.out.write_text(text)
    print(table)


if __name__ == "__main__":
    main()
