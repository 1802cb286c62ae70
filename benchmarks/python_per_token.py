"""Python work per decode token outside the native code (issue 19: "no Python work per
token beyond the call"): the greedy ids path `generate` takes and the `step` + argmax of
`python -m benchmarks llm`, with the compiled entry replaced by a no-op so only the
Python around the call is timed (binding, the argument words, the KV caches' undo
copy). Best of 5 runs of 1000 steps. Run:
`python -m benchmarks.python_per_token [MODEL.gguf] [--threads 1]` (default: SmolLM2
Q4_1, fetched on first use). The native call through ctypes adds ~13 µs on top
(348 arguments for SmolLM2). Results: benchmarks/results/issue19-final.md."""

import argparse
import time

import numpy as np

import rlx_mlir as rlx
from rlx_mlir.models.sampling import SamplingParams

STEPS = 1000


def stub_native_calls(lm) -> None:
    """Replace every native entry of `lm` with a no-op returning status 0."""
    for build in {id(b): b for b in (lm.runner, lm.ids_runner) if b is not None}.values():
        build._entry = lambda *args: 0
        build.threads = 1  # no worker team: thread 0's entry is the whole call


def best_per_token(lm, step) -> float:
    best = float("inf")
    for _ in range(5):
        lm.reset()
        lm.prefill([1] * 8)
        start = time.perf_counter()
        for _ in range(STEPS):
            step()
        best = min(best, (time.perf_counter() - start) / STEPS)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", default="smollm2-135m-instruct")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    lm = rlx.models.load_gguf(args.model, max_seq=STEPS * 4, threads=args.threads)
    stub_native_calls(lm)
    greedy = SamplingParams(0.0, 0, 1.0, 0)
    token = np.array([1], np.int32)
    for name, step in (("greedy ids path", lambda: lm._next_id(token, greedy)),
                       ("step + argmax", lambda: int(lm.step(1).argmax()))):
        print(f"{name}: {best_per_token(lm, step):.1f} µs of Python per token")


if __name__ == "__main__":
    main()
