"""Per-token greedy decode time at 1 thread, SmolLM2 Q4_1 (fetched on first use):
logits out + numpy argmax (the path before in-graph sampling), the whole decoder's
outputs (logits and ids) written into arrays allocated once, and the ids-only entry
(`CompiledGraph.entry("next_ids")`, the path `generate` takes). Run:
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


def logits_and_ids_preallocated(lm, prompt):
    lm.reset()
    token = lm._next_id(np.array(prompt, np.int32), None)
    outs = (np.empty((1, lm.config.n_vocab), np.float32), np.empty(1, np.int32))
    start = time.perf_counter()
    for _ in range(TOKENS):
        inputs = lm._inputs(np.array([token], np.int32), np.array([0], np.int32), None)
        lm.runner.run(**inputs, out=outs)
        token = int(outs[1][0])
    return (time.perf_counter() - start) / TOKENS


def ids_entry(lm, prompt):
    lm.reset()
    token = lm._next_id(np.array(prompt, np.int32), None)
    start = time.perf_counter()
    for _ in range(TOKENS):
        token = lm._next_id(np.array([token], np.int32), None)
    return (time.perf_counter() - start) / TOKENS


def main() -> None:
    lm = rlx.models.load_gguf("smollm2-135m-instruct", max_seq=512, threads=1)
    prompt = lm.tokenizer.encode("The capital of France is")
    paths = (old_logits_argmax, logits_and_ids_preallocated, ids_entry)
    for path in paths:
        path(lm, prompt)  # warm up
    for _ in range(3):  # back to back, so the machine's load hits each path alike
        print("  ".join(f"{p.__name__} {p(lm, prompt) * 1e3:.2f} ms/token" for p in paths))


if __name__ == "__main__":
    main()
