"""`python -m benchmarks profile`: where a decode step's time goes at a thread count.

    python -m benchmarks profile [--model NAME|PATH] [--threads 16] [--repeat 20] [--out DIR] [--name STEM]

Profiles (`lm.profile`, see rlx_mlir/profiling.py) a 64-token prefill and one decode step
after it, and writes the decode step's barrier count, its thread balance per op kind
(thread 0's time, the mean and the busiest thread's: a partitioned kernel's imbalance and
every thread's barrier waits), its phases and its slowest call sites, with the same for
the prefill's balance. The number for scaling past a few threads: the barrier waits.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.llm import DECODE_PROMPT, HERE, _prompt_ids

TOP_SITES = 25


def report(model: str, threads: int, repeat: int) -> str:
    import rlx_mlir as rlx
    from benchmarks.cli import cpu_name

    lm = rlx.models.load_gguf(model, max_seq=2048, threads=threads)
    prof = lm.profile(_prompt_ids(lm, DECODE_PROMPT), repeat=repeat)
    decode = prof.decode
    barriers = sum(row.calls for row in decode.rows if row.op == "barrier")
    slowest = sorted(decode.rows, key=lambda row: -row.total_us)[:TOP_SITES]
    lines = [f"# Decode profile: {Path(model).name}, {threads} thread(s), {cpu_name()}", "",
             f"decode step: call {decode.call_us:.1f} µs (best {decode.best_call_us:.1f}), "
             f"thread 0 in kernels and barriers {decode.kernel_us:.1f} µs; "
             f"{barriers} barriers per token; mean of {decode.repeat} calls", "",
             "## Decode: balance per op kind (µs per call)", "", decode.balance_markdown(), "",
             "## Decode: phases", "", decode.phase_markdown(), "",
             f"## Decode: the {TOP_SITES} slowest call sites (thread 0)", "",
             "| kernel | origin | total µs | throughput |", "|---|---|---:|---|"]
    lines += [f"| {r.kernel} | {r.origin} | {r.total_us:.1f} | {r.rate} |" for r in slowest]
    lines += ["", f"## Prefill ({DECODE_PROMPT} tokens): balance per op kind (µs per call)", "",
              f"call {prof.prefill.call_us:.1f} µs", "", prof.prefill.balance_markdown(), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks profile", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct", help="a GGUF path or a known name")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=20, help="profiled calls (means are reported)")
    p.add_argument("--out", default=str(HERE / "results"), help="folder of the .md")
    p.add_argument("--name", default="", help="file name stem (default: profile-t<threads>)")
    args = p.parse_args(argv)
    import rlx_mlir as rlx

    model = args.model if Path(args.model).exists() else str(rlx.models.fetch(args.model))
    text = report(model, args.threads, args.repeat)
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name or f'profile-t{args.threads}'}.md").write_text(text)


if __name__ == "__main__":
    main(sys.argv[1:])
