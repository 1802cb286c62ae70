"""Per-token greedy decode time at 1 thread, SmolLM2 Q4_1 (fetched on first use):
logits out + numpy argmax (the old path), ids with fresh output arrays, and ids written
into outputs allocated once (the path `generate` takes). Run:
`python benchmarks/greedy_step.py`."""

import time

import numpy as np

import rlx_mlir as rlx

TOKENS = 32


def old_logits_argmax(lm, prompt):
    lm.reset()
    token = int(np.argmax(lm.prefill(prompt)[-1]))
    start = time.perf_counter()
    for _ in range(TOKENS):
        token = int(np.argmax(lm.step(token)[-1]))
    return (time.perf_counter() - start) / TOKENS


def ids_fresh_arrays(lm, prompt):
    lm.reset()
    token = lm._next_id(np.array(prompt, np.int32), None)
    start = time.perf_counter()
    for _ in range(TOKENS):
        inputs = lm._inputs(np.array([token], np.int32), np.array([0], np.int32), None)
        token = int(lm.runner(**inputs)[1][0])
    return (time.perf_counter() - start) / TOKENS


def ids_preallocated(lm, prompt):
    lm.reset()
    token = lm._next_id(np.array(prompt, np.int32), None)
    start = time.perf_counter()
    for _ in range(TOKENS):
        token = lm._next_id(np.array([token], np.int32), None)
    return (time.perf_counter() - start) / TOKENS


def main() -> None:
    lm = rlx.models.load_gguf("smollm2-135m-instruct", max_seq=512, threads=1)
    prompt = lm.tokenizer.encode("The capital of France is")
    paths = (old_logits_argmax, ids_fresh_arrays, ids_preallocated)
    for path in paths:
        path(lm, prompt)  # warm up
    for _ in range(3):  # back to back, so the machine's load hits each path alike
        print("  ".join(f"{p.__name__} {p(lm, prompt) * 1e3:.2f} ms/token" for p in paths))


if __name__ == "__main__":
    main()
