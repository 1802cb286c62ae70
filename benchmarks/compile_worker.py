"""Compile-time worker, run in a fresh subprocess by the harness (not by hand).

    python -m benchmarks.compile_worker --cache DIR --names a,b [--threads 2,1]

Sets RLX_CACHE_DIR=DIR, imports rlx_mlir (timed), jits a tiny warm-up graph (the one-time
cost of a process's first compile, timed), then times `rlx.jit(graph, params=...)` of each
workload, once per thread count (the first one is the reported compile time). Prints JSON
lines as it goes (a header, {"start": name} before each workload and its result after), so
the harness knows which workload was compiling if the process dies (an LLVM abort).
Run on an empty DIR it measures cold compiles; run again on the same DIR, loads from the
disk cache.
"""

from __future__ import annotations

import argparse
import json
import os
import time


def emit(obj: dict) -> None:
    print(json.dumps(obj), flush=True)


def fingerprint() -> str | None:
    """The compiler-source hash in rlx's cache keys (a change makes every entry a miss)."""
    try:
        from rlx_mlir.backend import code_fingerprint
    except ImportError:
        return None
    return code_fingerprint()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cache", required=True)
    parser.add_argument("--names", required=True)
    parser.add_argument("--threads", default="")
    args = parser.parse_args()
    os.environ["RLX_CACHE_DIR"] = args.cache
    thread_counts = [int(t) for t in args.threads.split(",") if t] or [0]

    start = time.perf_counter()
    import numpy as np

    import rlx_mlir as rlx
    import_s = time.perf_counter() - start

    from benchmarks.rlx_runner import jit_kwargs, model_info
    from benchmarks.workloads import BY_NAME, build_graph, make_data

    kwargs = jit_kwargs(thread_counts[0] or None)
    g = rlx.Graph("bench_warmup")
    g.output(g.input("x", (3,)) * 2.0)
    start = time.perf_counter()
    warm = rlx.jit(g, **kwargs)
    warmup_s = time.perf_counter() - start
    warm(np.ones(3, np.float32))
    emit({"import_s": import_s, "warmup_jit_s": warmup_s, "jit_kwargs": kwargs,
          "fingerprint": fingerprint()})

    for name in args.names.split(","):
        w = BY_NAME[name]
        _, params = make_data(w)
        emit({"start": name})
        start = time.perf_counter()
        graph = build_graph(w)
        build_s = time.perf_counter() - start
        result: dict = {"build_s": build_s}
        for i, t in enumerate(thread_counts):
            start = time.perf_counter()
            model = rlx.jit(graph, params=params, **jit_kwargs(t or None))
            jit_s = time.perf_counter() - start
            info = {"jit_s": jit_s, **model_info(model)}
            if i == 0:
                result.update(info)
            result.setdefault("by_threads", {})[str(t)] = info
        emit({"workload": name, "result": result})


if __name__ == "__main__":
    main()
