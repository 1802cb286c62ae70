"""`python -m benchmarks llm`: rlx-mlir on SmolLM2-135M-Instruct (Q4_1 GGUF), next to
llama.cpp's llama-bench when one is found.

    python -m benchmarks llm [--threads 1,2] [--model NAME|PATH] [--repeat 3] [--out DIR] [--name STEM]
    RLX_LLAMA_BENCH=path/to/llama-bench python -m benchmarks llm [--llama-bench-args '--repack 0']
    RLX_LLAMA_QUANTIZE=path/to/llama-quantize python -m benchmarks llm --requantize Q4_K_M

Per thread count, in a fresh subprocess (so peak memory and load time are its own):
- load: `rlx.models.load_gguf` wall time (compile from the disk cache after the first run)
  and the peak resident memory of the process after the measurements;
- prefill: tok/s of `lm.prefill` on 16, 64 and 256-token prompts (from position 0);
- decode: tok/s of `lm.step` for 32 and 128 tokens after a 64-token prompt (greedy).
Each number is the best of `--repeat` runs (llama-bench reports means of 5 by default;
`-r` sets its repetitions). With `RLX_LLAMA_BENCH`, llama-bench runs the same model
file at the same thread counts (`-p 16,64,256 -n 32,128`), and the report gives the ratio
rlx / llama.cpp for each number (above 1: rlx is faster).

`--requantize TYPE` first makes `<model>.TYPE.gguf` from the model file with llama.cpp's
`llama-quantize --allow-requantize` (RLX_LLAMA_QUANTIZE) into RLX_CACHE_DIR/models (once;
never committed) and measures that file: the K-quant files people download (Q4_K_M,
Q5_K_M, Q6_K) from the Q4_1 SmolLM2 that the harness fetches.

Decode streams the weights: each thread count's row also gives the machine's read
bandwidth at that thread count, measured in the same run (`read_bandwidth`), and the
bandwidth each decode rate implies (tg128 tok/s × the bytes of weights a step reads,
`decode_weight_bytes`): how far from the memory's ceiling each side runs.

The markdown goes to stdout and `DIR/STEM.md`, everything to `DIR/STEM.json`; both name
the target (`RLX_TARGET_CPU`, else the host).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
PREFILL = (16, 64, 256)
DECODE = (32, 128)
DECODE_PROMPT = 64
TEXT = ("The history of computing is a story of people who wanted machines to do the "
        "arithmetic they found tedious. Charles Babbage designed engines of brass and "
        "steam; Ada Lovelace saw that such a machine could manipulate any symbols, not "
        "just numbers. A century later, electronic computers filled rooms, and programs "
        "were written in the language of the machine itself. ") * 8


def _prompt_ids(lm: Any, n: int) -> list[int]:
    ids = lm.tokenizer.encode(TEXT)
    if len(ids) < n:
        raise RuntimeError(f"the benchmark text has {len(ids)} tokens, fewer than {n}")
    return ids[:n]


def measure(model: str, threads: int, repeat: int) -> dict[str, Any]:
    """The numbers of one thread count, in this process."""
    import rlx_mlir as rlx

    start = time.perf_counter()
    lm = rlx.models.load_gguf(model, max_seq=2048, threads=threads)
    load_s = time.perf_counter() - start
    result: dict[str, Any] = {"threads": threads, "load_s": load_s, "prefill": {}, "decode": {}}
    for n in PREFILL:
        ids = _prompt_ids(lm, n)
        lm.reset()
        lm.prefill(ids)  # warm-up
        best = float("inf")
        for _ in range(repeat):
            lm.reset()
            t0 = time.perf_counter()
            lm.prefill(ids)
            best = min(best, time.perf_counter() - t0)
        result["prefill"][n] = n / best
    prompt = _prompt_ids(lm, DECODE_PROMPT)
    for n in DECODE:
        best = float("inf")
        for _ in range(repeat):
            lm.reset()
            logits = lm.prefill(prompt)
            token = int(logits.argmax())
            t0 = time.perf_counter()
            for _ in range(n):
                token = int(lm.step(token).argmax())
            best = min(best, time.perf_counter() - t0)
        result["decode"][n] = n / best
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def requantized(source: str, kind: str) -> str:
    """The path of `source` requantized to `kind` (a llama-quantize type name) in
    RLX_CACHE_DIR/models, made by RLX_LLAMA_QUANTIZE when absent."""
    from rlx_mlir.backend import cache_dir

    name = Path(source).name.removesuffix(".gguf")
    base = name.rsplit(".", 1)[0] if "." in name else name
    folder = (cache_dir() or Path(source).parent) / "models"
    target = folder / f"{base}.{kind}.gguf"
    if target.exists():
        return str(target)
    binary = os.environ.get("RLX_LLAMA_QUANTIZE", "")
    if not binary:
        raise SystemExit(f"--requantize {kind}: {target} is absent and RLX_LLAMA_QUANTIZE "
                         "(the path of llama.cpp's llama-quantize) is not set")
    folder.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    done = subprocess.run([binary, "--allow-requantize", source, str(partial), kind],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"llama-quantize {kind} failed:\n{done.stderr[-2000:]}")
    partial.rename(target)
    return str(target)


def llama_bench(binary: str, model_path: str, threads: int, repeat: int,
                extra: list[str] | None = None) -> dict[str, Any]:
    """llama-bench's tok/s for the same prompt and generation lengths (`extra`: more
    llama-bench options, e.g. `--repack 0`)."""
    cmd = [binary, "-m", model_path, "-t", str(threads), "-p", ",".join(map(str, PREFILL)),
           "-n", ",".join(map(str, DECODE)), "-r", str(repeat), "-o", "json", *(extra or [])]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"llama-bench failed ({done.returncode}): {done.stderr[-800:]}")
    out: dict[str, Any] = {"threads": threads, "prefill": {}, "decode": {},
                           "build": None, "command": " ".join(cmd)}
    for row in json.loads(done.stdout):
        out["build"] = row.get("build_commit")
        if row.get("n_prompt") and not row.get("n_gen"):
            out["prefill"][int(row["n_prompt"])] = float(row["avg_ts"])
        elif row.get("n_gen") and not row.get("n_prompt"):
            out["decode"][int(row["n_gen"])] = float(row["avg_ts"])
    return out


def read_bandwidth(threads: int, megabytes: int = 256, repeat: int = 5) -> float:
    """GB/s of this machine reading memory with `threads` threads: numpy OR-reductions
    (they release the GIL) of one slice each of a buffer far larger than the caches, best
    of `repeat`. The ceiling of a decode step that streams its weights from memory."""
    data = np.ones(megabytes << 20, np.uint8).view(np.uint64)
    slices = np.array_split(data, threads)
    best = float("inf")
    for _ in range(repeat):
        workers = [threading.Thread(target=np.bitwise_or.reduce, args=(part,)) for part in slices]
        start = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        best = min(best, time.perf_counter() - start)
    return data.nbytes / best / 1e9


def decode_weight_bytes(model_path: str) -> int:
    """Bytes of the weights one decode step reads: every tensor of the GGUF file but a
    token table that is only looked up (a separate output.weight is the head)."""
    from rlx_mlir.models.gguf_file import read_gguf

    with read_gguf(model_path) as gguf:
        looked_up = {"token_embd.weight"} if "output.weight" in gguf.tensors else set()
        return sum(t.n_bytes for name, t in gguf.tensors.items() if name not in looked_up)


def _gbps(tok_s: float | None, weight_bytes: int) -> str:
    return f"{tok_s * weight_bytes / 1e9:.1f}" if tok_s else "–"


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}×" if a and b else "–"


def markdown(meta: dict[str, Any], rlx: list[dict[str, Any]], peer: list[dict[str, Any]]) -> str:
    by_threads = {p["threads"]: p for p in peer}
    lines = [f"# LLM speed: {meta['model']}", "",
             f"{meta['timestamp']} · {meta['cpu']} · {meta['cores']} cores · "
             f"rlx target: {meta.get('target', 'host')} · "
             f"llama.cpp: {meta['llama_bench'] or 'not found (set RLX_LLAMA_BENCH)'}", ""]
    if "loadavg_end" in meta:  # other processes on the machine make the numbers noisy
        lines[-1:-1] = ["", "load average (1, 5, 15 min) at the start: " + ", ".join(
            f"{x:.2f}" for x in meta["loadavg_start"]) + "; at the end: " + ", ".join(
            f"{x:.2f}" for x in meta["loadavg_end"])]
    head = "| threads | | " + " | ".join(
        [f"prefill pp{n}" for n in PREFILL] + [f"decode tg{n}" for n in DECODE]) + " |"
    lines += [head, "|---|---|" + "---|" * (len(PREFILL) + len(DECODE))]
    for r in rlx:
        t = r["threads"]
        ours = [r["prefill"][n] for n in PREFILL] + [r["decode"][n] for n in DECODE]
        lines.append(f"| {t} | rlx-mlir tok/s | " + " | ".join(f"{v:.1f}" for v in ours) + " |")
        p = by_threads.get(t)
        if p is not None:
            theirs = [p["prefill"].get(n) for n in PREFILL] + [p["decode"].get(n) for n in DECODE]
            lines.append(f"| {t} | llama.cpp tok/s | " + " | ".join(
                f"{v:.1f}" if v else "–" for v in theirs) + " |")
            lines.append(f"| {t} | rlx / llama.cpp | " + " | ".join(
                _ratio(a, b) for a, b in zip(ours, theirs, strict=True)) + " |")
    lines += ["", "| threads | load (s) | peak memory (MB) |", "|---|---|---|"]
    lines += [f"| {r['threads']} | {r['load_s']:.2f} | {r['peak_rss_mb']:.0f} |" for r in rlx]
    if "weight_bytes" in meta:
        weight_bytes = meta["weight_bytes"]
        lines += ["", f"Decode reads {weight_bytes / 1e6:.1f} MB of weights a token; GB/s at "
                  f"tg{DECODE[-1]}, next to this machine's read bandwidth measured in the same run:",
                  "", "| threads | read GB/s (memory) | rlx-mlir decode GB/s | llama.cpp decode GB/s |",
                  "|---|---|---|---|"]
        for r in rlx:
            theirs = by_threads.get(r["threads"], {}).get("decode", {}).get(DECODE[-1])
            lines.append(f"| {r['threads']} | {r['read_gbps']:.1f} | "
                         f"{_gbps(r['decode'][DECODE[-1]], weight_bytes)} | "
                         f"{_gbps(theirs, weight_bytes)} |")
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks llm", description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", default="1,2", help="thread counts, comma-separated (default 1,2)")
    p.add_argument("--model", default="smollm2-135m-instruct", help="a GGUF path or a known name")
    p.add_argument("--repeat", type=int, default=3, help="runs per number (best is kept)")
    p.add_argument("--out", default=str(HERE / "results"), help="folder of the .md and .json")
    p.add_argument("--name", default="", help="file name stem (default: llm-<timestamp>)")
    p.add_argument("--requantize", default="", metavar="TYPE",
                   help="measure the model requantized to TYPE by llama-quantize (RLX_LLAMA_QUANTIZE)")
    p.add_argument("--llama-bench-args", default="",
                   help="more llama-bench options, one string (e.g. '--repack 0')")
    p.add_argument("--worker", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.thread_list = sorted({int(t) for t in args.threads.split(",") if t.strip()})
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        print(json.dumps(measure(args.model, args.worker, args.repeat)))
        return
    import rlx_mlir as rlx
    from benchmarks.cli import cpu_name

    model_path = str(rlx.models.fetch(args.model)) if not Path(args.model).exists() else args.model
    if args.requantize:
        model_path = requantized(model_path, args.requantize)
    binary = os.environ.get("RLX_LLAMA_BENCH", "")
    meta = {"timestamp": dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S"), "model": model_path,
            "cpu": cpu_name(), "cores": os.cpu_count(), "llama_bench": binary or None,
            "target": os.environ.get("RLX_TARGET_CPU") or "host",
            "loadavg_start": os.getloadavg(), "weight_bytes": decode_weight_bytes(model_path)}
    rlx_rows, peer_rows = [], []
    for threads in args.thread_list:
        print(f"rlx-mlir, {threads} thread(s) ...", file=sys.stderr, flush=True)
        done = subprocess.run([sys.executable, "-m", "benchmarks", "llm", "--worker", str(threads),
                               "--model", model_path, "--repeat", str(args.repeat)],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"the rlx-mlir worker failed:\n{done.stderr[-2000:]}")
        row = json.loads(done.stdout.strip().splitlines()[-1])
        for kind in ("prefill", "decode"):  # JSON keys are strings
            row[kind] = {int(n): v for n, v in row[kind].items()}
        row["read_gbps"] = read_bandwidth(threads)
        rlx_rows.append(row)
        if binary:
            print(f"llama.cpp, {threads} thread(s) ...", file=sys.stderr, flush=True)
            peer_rows.append(llama_bench(binary, model_path, threads, max(args.repeat, 3),
                                         shlex.split(args.llama_bench_args)))
    meta["loadavg_end"] = os.getloadavg()
    text = markdown(meta, rlx_rows, peer_rows)
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = args.name or "llm-" + dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    (out / f"{stem}.md").write_text(text)
    (out / f"{stem}.json").write_text(json.dumps(
        {"meta": meta, "rlx": rlx_rows, "llama_cpp": peer_rows}, indent=1, default=str))


if __name__ == "__main__":
    main()
