"""Training steps (issue 23, item 6): rlx's compiled step next to torch.

Usage: python -m benchmarks train [--rounds 5] [--only char_lm,llama_block,llama_decoder_block] [--out FILE.md]

Workloads (float32, one step = forward + backward (+ the optimizer where it says so)):
- `char_lm`: the training step of examples/train_char_lm.py (a 2-layer character-level
  transformer, d 64, 4 heads, context 32, batch 16; forward, backward and AdamW in one
  compiled entry) against the same model in torch eager with torch.optim.AdamW
  (zero_grad, forward, backward, step), and under torch.compile when it works here;
- `llama_block`: a Llama-style decoder block built from primitives (RMS norms written
  with the builder, multi-head causal attention from matmuls and softmax, SwiGLU FFN; no
  rope), S 128, d 256, 4 heads, ffn 704: `rlx.grad` of sum(block(x) * r) with respect
  to x and every weight, against torch's `backward()` of the same function;
- `llama_decoder_block`: the same for `g.llama_decoder_block` (the `llama_128` workload of
  benchmarks/workloads.py: S 128, d 512, 8 heads, 2 kv heads, head_dim 64, ffn 1408, rope,
  causal GQA) against torch with `F.scaled_dot_product_attention`, when the block is
  differentiable (its attention and rope VJPs); else the report says why not.

Each at 1 and 2 threads (rlx: `rlx.jit(threads=)`, torch: `torch.set_num_threads`),
best wall time per step over interleaved rounds (`benchmarks.sequence_ops.best_times`),
and the step's memory: the compiled model's arena (every intermediate of forward and
backward, the saved activations and the gradients included) and, for both engines, the
growth of the process's peak resident memory (VmHWM) over the first step in a fresh
process whose weights (and optimizer) are already built -- torch's allocations are not
visible to tracemalloc, so RSS is what both can be measured by.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

import rlx_mlir as rlx
from benchmarks.sequence_ops import best_times

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = Path(__file__).parent / "results" / "issue23-train.md"
THREADS = (1, 2)
BLOCK = {"seq": 128, "dim": 256, "heads": 4, "ffn": 704}


def char_lm():
    """The example module and its benchmark config."""
    sys.path.insert(0, str(ROOT / "tests"))
    from examples_loader import load_example

    example = load_example("train_char_lm")
    data, chars = example.load_text()
    return example, data, replace(example.Config(), vocab=len(chars), layers=2)


# ----------------------------------------------------------------------------- llama block


def block_weights(seed: int = 0) -> dict[str, np.ndarray]:
    d, f = BLOCK["dim"], BLOCK["ffn"]
    rng = np.random.default_rng(seed)
    shapes = {"norm1": (d,), "wq": (d, d), "wk": (d, d), "wv": (d, d), "wo": (d, d),
              "norm2": (d,), "gate": (d, f), "up": (d, f), "down": (f, d)}
    return {n: (np.ones(s, np.float32) if "norm" in n
                else (rng.standard_normal(s) / math.sqrt(s[0])).astype(np.float32))
            for n, s in shapes.items()}


def block_inputs(seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = (BLOCK["seq"], BLOCK["dim"])
    return {"x": rng.standard_normal(shape).astype(np.float32),
            "r": rng.standard_normal(shape).astype(np.float32)}


def block_grad_graph() -> rlx.Graph:
    """rlx.grad of sum(block(x) * r) with respect to x and every weight."""
    s, d, h = BLOCK["seq"], BLOCK["dim"], BLOCK["heads"]
    hd = d // h
    g = rlx.Graph("llama_block_train")
    x, r = g.input("x", (s, d)), g.input("r", (s, d))
    p = {n: g.param(n, w.shape) for n, w in block_weights().items()}
    mask = g.constant(np.triu(np.full((s, s), -1e9, np.float32), 1))

    def norm(v, gamma):
        return v * g.rsqrt(g.reduce_sum(v * v, -1, keepdim=True) * (1.0 / d) + 1e-5) * gamma

    def heads(v, w, perm):
        return g.transpose(g.reshape(v @ w, (s, h, hd)), perm)

    n = norm(x, p["norm1"])
    q, kt, v = heads(n, p["wq"], (1, 0, 2)), heads(n, p["wk"], (1, 2, 0)), heads(n, p["wv"], (1, 0, 2))
    attn = g.softmax((q @ kt) * (1.0 / math.sqrt(hd)) + mask, -1)
    hidden = x + g.reshape(g.transpose(attn @ v, (1, 0, 2)), (s, d)) @ p["wo"]
    n = norm(hidden, p["norm2"])
    out = hidden + (g.silu(n @ p["gate"]) * (n @ p["up"])) @ p["down"]
    loss = g.reduce_sum(out * r, (0, 1))
    g.output(loss)
    return rlx.grad(g, loss, wrt=["x", *p])


def torch_block_step():
    """torch: the same block, a step = zero the grads, forward, backward."""
    import torch

    s, d, h = BLOCK["seq"], BLOCK["dim"], BLOCK["heads"]
    hd = d // h
    p = {n: torch.tensor(w, requires_grad=True) for n, w in block_weights().items()}
    inputs = block_inputs()
    x = torch.tensor(inputs["x"], requires_grad=True)
    r = torch.tensor(inputs["r"])
    mask = torch.triu(torch.full((s, s), -1e9), 1)

    def norm(v, gamma):
        return v * torch.rsqrt((v * v).sum(-1, keepdim=True) / d + 1e-5) * gamma

    def forward(x):
        n = norm(x, p["norm1"])
        q, k, v = ((n @ p[w]).reshape(s, h, hd).transpose(0, 1) for w in ("wq", "wk", "wv"))
        attn = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd) + mask, -1)
        hidden = x + (attn @ v).transpose(0, 1).reshape(s, d) @ p["wo"]
        n = norm(hidden, p["norm2"])
        out = hidden + (torch.nn.functional.silu(n @ p["gate"]) * (n @ p["up"])) @ p["down"]
        return (out * r).sum()

    leaves = [x, *p.values()]

    def step(fn=forward):
        for leaf in leaves:
            leaf.grad = None
        fn(x).backward()
    return step, forward, leaves


def decoder_block_grad_graph() -> rlx.Graph:
    """rlx.grad of sum(llama_decoder_block(x) * r) with respect to x and every weight."""
    from benchmarks.workloads import BY_NAME, EPS

    d = BY_NAME["llama_128"].dims
    s, dm, h, hkv, hd = d["seq"], d["d_model"], d["heads"], d["kv_heads"], d["head_dim"]
    g = rlx.Graph("llama_decoder_block_train")
    x, r = g.input("x", (s, dm)), g.input("r", (s, dm))
    cos, sin = g.input("cos", (s, hd // 2)), g.input("sin", (s, hd // 2))
    p = {n: g.param(n, w.shape) for n, w in decoder_block_data()[1].items()}
    out = g.llama_decoder_block(
        x, p["ln1_g"], None, p["q_w"], p["k_w"], p["v_w"], p["o_w"], p["ln2_g"], None,
        p["gate_w"], p["up_w"], p["down_w"], cos, sin, num_heads=h, head_dim=hd,
        num_kv_heads=hkv, eps=EPS)
    loss = g.reduce_sum(out * r, (0, 1))
    g.output(loss)
    return rlx.grad(g, loss, wrt=["x", *p])


def decoder_block_data() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The `llama_128` workload's inputs (and the loss weights r) and weights."""
    from benchmarks.workloads import BY_NAME, make_data

    inputs, params = make_data(BY_NAME["llama_128"])
    r = np.random.default_rng(2).standard_normal(inputs["x"].shape).astype(np.float32)
    return {**inputs, "r": r}, params


def torch_decoder_block_step():
    """torch: the same block (half-style rope, causal GQA by SDPA), a step = zero the
    grads, forward, backward."""
    import torch
    import torch.nn.functional as F

    from benchmarks.workloads import BY_NAME, EPS

    d = BY_NAME["llama_128"].dims
    s, h, hkv, hd = d["seq"], d["heads"], d["kv_heads"], d["head_dim"]
    inputs, params = decoder_block_data()
    i = {k: torch.from_numpy(v) for k, v in inputs.items()}
    p = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    x = i["x"].clone().requires_grad_(True)
    cos, sin = i["cos"][None], i["sin"][None]

    def norm(v, gamma):
        return v * torch.rsqrt((v * v).mean(-1, keepdim=True) + EPS) * gamma

    def rope(t):
        t1, t2 = t[..., : hd // 2], t[..., hd // 2 :]
        return torch.cat([t1 * cos - t2 * sin, t2 * cos + t1 * sin], dim=-1)

    def forward(x):
        n1 = norm(x, p["ln1_g"])
        q = rope((n1 @ p["q_w"]).view(s, h, hd).transpose(0, 1))
        k = rope((n1 @ p["k_w"]).view(s, hkv, hd).transpose(0, 1))
        v = (n1 @ p["v_w"]).view(s, hkv, hd).transpose(0, 1)
        a = F.scaled_dot_product_attention(q, k.repeat_interleave(h // hkv, 0),
                                           v.repeat_interleave(h // hkv, 0), is_causal=True)
        hres = x + a.transpose(0, 1).reshape(s, h * hd) @ p["o_w"]
        n2 = norm(hres, p["ln2_g"])
        out = hres + (F.silu(n2 @ p["gate_w"]) * (n2 @ p["up_w"])) @ p["down_w"]
        return (out * i["r"]).sum()

    leaves = [x, *p.values()]

    def step(fn=forward):
        for leaf in leaves:
            leaf.grad = None
        fn(x).backward()
    return step, forward, leaves


def torch_char_lm_step(example, cfg, data):
    import torch

    loss_fn, optimizer = example.torch_model(cfg)
    x, y = next(example.batches(data, cfg, 1))
    xs, ys = (torch.from_numpy(example.one_hot(a, cfg.vocab)) for a in (x, y))

    def step(fn=loss_fn):
        optimizer.zero_grad()
        fn(xs, ys).backward()
        optimizer.step()
    return step, loss_fn


# ----------------------------------------------------------------------------- engines


def engines(workload: str, threads: int) -> tuple[dict[str, Callable[[], object]], dict]:
    """The step of each engine (warmed up), and facts about them (arena bytes, whether
    torch.compile worked and why not)."""
    facts: dict[str, object] = {}
    calls: dict[str, Callable[[], object]] = {}
    try:
        import torch
        torch.set_num_threads(threads)
    except ImportError:
        torch = None
    if workload == "char_lm":
        example, data, cfg = char_lm()
        model = example.compile_step(cfg, threads)
        x, y = next(example.batches(data, cfg, 1))
        xs, ys = example.one_hot(x, cfg.vocab), example.one_hot(y, cfg.vocab)
        calls["rlx"] = lambda: model(x=xs, y=ys)
        if torch is not None:
            step, loss_fn = torch_char_lm_step(example, cfg, data)
            calls["torch eager"] = step
            compiled = _torch_compile(torch, loss_fn, facts)
            if compiled is not None:
                calls["torch.compile"] = lambda: step(compiled)
    else:
        model, inputs, torch_step = _block_engines(workload, threads, torch is not None)
        calls["rlx"] = lambda: model(**inputs)
        if torch_step is not None:
            step, forward, leaves = torch_step
            calls["torch eager"] = step
            step()
            facts["max grad rel. diff"] = _grad_difference(model(**inputs), leaves)
            compiled = _torch_compile(torch, forward, facts)
            if compiled is not None:
                calls["torch.compile"] = lambda: step(compiled)
    facts["arena_bytes"] = model.arena_bytes
    facts["threads_used"] = model.threads
    for name, fn in list(calls.items()):
        try:
            fn()
        except Exception as err:  # torch.compile fails at its first call when it fails
            facts[f"{name} failed"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
            del calls[name]
    return calls, facts


def _block_engines(workload: str, threads: int, with_torch: bool):
    """The compiled gradient graph of a block workload, its inputs, and torch's step."""
    if workload == "llama_block":
        model = rlx.jit(block_grad_graph(), params=block_weights(), threads=threads)
        return model, block_inputs(), torch_block_step() if with_torch else None
    inputs, params = decoder_block_data()
    model = rlx.jit(decoder_block_grad_graph(), params=params, threads=threads)
    return model, inputs, torch_decoder_block_step() if with_torch else None


def _grad_difference(ours: tuple[np.ndarray, ...], leaves) -> float:
    """The largest max|ours - torch| / max|torch| over the gradients (x, then weights)."""
    return max(float(np.abs(a - t.grad.numpy()).max() / np.abs(t.grad.numpy()).max())
               for a, t in zip(ours[1:], leaves, strict=True))


def _torch_compile(torch, fn, facts):
    try:
        return torch.compile(fn)
    except Exception as err:
        facts["torch.compile failed"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
        return None


# ----------------------------------------------------------------------------- memory


def memory_worker(workload: str, engine: str) -> dict[str, int]:
    """In a fresh process: build the engine's step (weights, optimizer), then the growth of
    the peak resident set over its first step."""
    if engine == "rlx":
        if workload == "char_lm":
            example, data, cfg = char_lm()
            model = example.compile_step(cfg, 1)
            x, y = next(example.batches(data, cfg, 1))
            xs, ys = example.one_hot(x, cfg.vocab), example.one_hot(y, cfg.vocab)
            step = lambda: model(x=xs, y=ys)  # noqa: E731
        else:
            model, inputs, _ = _block_engines(workload, 1, with_torch=False)
            step = lambda: model(**inputs)  # noqa: E731
        model.release_stages()
    else:
        import torch
        torch.set_num_threads(1)
        if workload == "char_lm":
            example, data, cfg = char_lm()
            step, _ = torch_char_lm_step(example, cfg, data)
        elif workload == "llama_block":
            step, _, _ = torch_block_step()
        else:
            step, _, _ = torch_decoder_block_step()
    before = _status("VmRSS")
    _reset_peak()
    step()
    return {"rss_before": before, "peak": _status("VmHWM")}


def _status(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return -1


def _reset_peak() -> None:
    """Reset VmHWM to the current RSS (Linux >= 4.0: write 5 to clear_refs)."""
    Path("/proc/self/clear_refs").write_text("5")


def step_memory(workload: str, engine: str) -> int | None:
    """The peak-RSS growth of the first step, from a fresh process (None if it failed)."""
    out = subprocess.run([sys.executable, "-m", "benchmarks.train", "--memory-worker",
                          workload, engine], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "RLX_NUM_THREADS": "1"})
    try:
        result = json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        print(f"memory worker {workload}/{engine} failed: {out.stderr[-500:]}", file=sys.stderr)
        return None
    return result["peak"] - result["rss_before"]


# ----------------------------------------------------------------------------- the report


skipped: dict[str, str] = {}
"""Workloads that could not be built here, and why."""


def run(rounds: int, workloads: tuple[str, ...]) -> tuple[list[dict], dict]:
    rows = []
    for workload in workloads:
        for threads in THREADS:
            try:
                calls, facts = engines(workload, threads)
            except rlx.RlxError as err:  # e.g. an op with no VJP rule on this branch
                print(f"{workload}: skipped: {err}", file=sys.stderr)
                skipped[workload] = str(err).splitlines()[0][:300]
                break
            best = best_times(calls, rounds, round_s=0.05, budget_s=30.0)
            rows.append({"workload": workload, "threads": threads, **best, "facts": facts})
            print(rows[-1], file=sys.stderr, flush=True)
    measured = [w for w in workloads if w not in skipped]
    memory = {(w, e): step_memory(w, e) for w in measured for e in ("rlx", "torch")}
    return rows, memory


def markdown(rows: list[dict], memory: dict) -> str:
    lines = ["| workload | threads | rlx (ms) | torch eager (ms) | eager / rlx | "
             "torch.compile (ms) | compile / rlx |", "|---|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        ours = row["rlx"]
        eager, compiled = row.get("torch eager"), row.get("torch.compile")

        def cell(t, ours=ours):
            return ("—", "—") if t is None else (f"{t * 1e3:.2f}", f"×{t / ours:.2f}")
        lines.append(f"| {row['workload']} | {row['threads']} | {ours * 1e3:.2f} | "
                     f"{' | '.join(cell(eager))} | {' | '.join(cell(compiled))} |")
    lines += ["", "| workload | rlx arena (MB) | rlx peak-RSS growth (MB) | "
              "torch peak-RSS growth (MB) |", "|---|---:|---:|---:|"]
    arenas = {row["workload"]: row["facts"]["arena_bytes"] for row in rows}
    def mb(n):
        return "—" if n is None else f"{n / 1e6:.2f}"
    for workload, arena in arenas.items():
        lines.append(f"| {workload} | {mb(arena)} | {mb(memory[(workload, 'rlx')])} | "
                     f"{mb(memory[(workload, 'torch')])} |")
    failures = {f"{row['workload']}, {row['threads']} threads: {k}": v
                for row in rows for k, v in row["facts"].items() if "failed" in k}
    failures.update({f"{w}: not measured": why for w, why in skipped.items()})
    diffs = {row["workload"]: row["facts"]["max grad rel. diff"]
             for row in rows if "max grad rel. diff" in row["facts"]}
    if diffs:
        lines += ["", "Gradients against torch's (largest max|Δ| / max|torch| over x and "
                  "the weights): " + ", ".join(f"{w} {d:.1e}" for w, d in diffs.items())]
    if failures:
        lines += ["", *(f"- {k}: {v}" for k, v in failures.items())]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", default="char_lm,llama_block,llama_decoder_block")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--memory-worker", nargs=2, metavar=("WORKLOAD", "ENGINE"))
    args = parser.parse_args(argv)
    if args.memory_worker:
        print(json.dumps(memory_worker(*args.memory_worker)))
        return
    start = time.time()
    rows, memory = run(args.rounds, tuple(args.only.split(",")))
    load = os.getloadavg()
    text = (f"# Training steps (issue 23): rlx vs torch\n\n"
            f"`python -m benchmarks train --rounds {args.rounds}`: best wall time per step "
            f"over interleaved rounds; {time.time() - start:.0f} s; load average at the end "
            f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} on {os.cpu_count()} cores.\n\n"
            f"{markdown(rows, memory)}\n")
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
