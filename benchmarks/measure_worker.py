"""Measurement worker: runs workloads in a subprocess started by the harness (not by hand).

    python -m benchmarks.measure_worker --results FILE --names a,b --threads 1,2 [--quick]
        [--skip-rlx a]

Writes JSON lines to FILE: {"meta": ...} (BLAS, versions), then {"start": name} before and
{"workload": name, "result": ...} after each workload. All engines of a workload run in
this one process. If compiling or running rlx kills the process (an LLVM abort), the
harness sees which workload was running and restarts a worker without rlx for it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import peers as peer_mod
from benchmarks.report import PEERS
from benchmarks.rlx_runner import jit_kwargs, model_info, rlx_env, supports_threads
from benchmarks.timing import FULL, QUICK, Budget, measure
from benchmarks.workloads import BY_NAME, Workload, build_graph, make_data, numpy_fn


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def blas_info() -> tuple[str, list[dict[str, Any]]]:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown (threadpoolctl not installed)", []
    info = threadpool_info()
    blas = [i for i in info if i.get("user_api") == "blas"]
    text = ", ".join(f"{i.get('internal_api')} {i.get('version')} {i.get('architecture') or ''} "
                     f"{i.get('threading_layer') or ''} ({Path(i.get('filepath', '')).name})".replace("  ", " ")
                     for i in blas) or "none found"
    return text, info


def blas_limits(threads: int):
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(limits=threads, user_api="blas")


def rel_error(got: Any, ref: np.ndarray) -> float:
    got = np.asarray(got, dtype=np.float64).reshape(ref.shape)
    scale = float(np.max(np.abs(ref))) or 1.0
    return float(np.max(np.abs(got - ref))) / scale


def _to_numpy(value: Any) -> np.ndarray:
    return value.numpy() if hasattr(value, "numpy") else np.asarray(value)


def bench_workload(w: Workload, threads: list[int], budget: Budget, torch, ort, onnx,
                   rlx_crash: str | None = None) -> dict[str, Any]:
    import rlx_mlir as rlx

    inputs, params = make_data(w)
    entry: dict[str, Any] = {
        "label": w.label, "kind": w.kind, "dims": w.dims, "flops": w.flops, "bytes": w.bytes,
        "memory_bound": w.memory_bound, "anchor": w.anchor, "extra": w.extra,
        "correctness": {}, "errors": {}, "threads": {}, "peer_info": {},
    }
    ref_fn = numpy_fn(w, inputs, params)
    ref = np.asarray(ref_fn(), dtype=np.float64)

    # rlx: one model per thread count when jit takes threads=, else one model
    graph = build_graph(w)
    rlx_threaded = supports_threads()
    models: dict[int, Any] = {}
    entry["rlx_by_threads"] = {}
    if rlx_crash:  # compiling it killed a worker process: do not take the harness down too
        entry["errors"]["rlx"] = f"rlx.jit killed the compile subprocess ({rlx_crash[-300:]})"
    for t in [] if rlx_crash else threads if rlx_threaded else [1]:
        try:
            start = time.perf_counter()
            model = rlx.jit(graph, params=params, **jit_kwargs(t))
            jit_s = time.perf_counter() - start
            info = {"jit_s": jit_s, "jit_kwargs": jit_kwargs(t), **model_info(model)}
            entry.setdefault("rlx", info)
            # checked once per compiled model: a threading bug shows in its own T
            info["error_vs_numpy"] = rel_error(model(**inputs), ref)
            entry["rlx_by_threads"][str(t)] = info
            entry["correctness"]["rlx"] = max(entry["correctness"].get("rlx", 0.0),
                                              info["error_vs_numpy"])
            models[t] = model
        except Exception as err:  # noqa: BLE001 - report, keep going
            entry["errors"]["rlx"] = f"{type(err).__name__}: {err}"[:500]
            break

    rlx_1t: dict[str, Any] = {}
    for t in threads:
        row: dict[str, Any] = {}
        with blas_limits(t):
            row["numpy"] = measure(ref_fn, budget)
        if torch is not None:
            try:
                fn = peer_mod.torch_runner(torch, w, inputs, params, t)
                with torch.inference_mode():
                    if "torch" not in entry["correctness"]:
                        entry["correctness"]["torch"] = rel_error(_to_numpy(fn()), ref)
                    row["torch"] = measure(fn, budget)
            except Exception as err:  # noqa: BLE001
                entry["errors"]["torch"] = f"{type(err).__name__}: {err}"[:500]
        if ort is not None and onnx is not None:
            try:
                fn, info = peer_mod.ort_runner(ort, onnx, w, inputs, params, t)
                if w.kind in ("llama", "rms_norm"):
                    entry["peer_info"]["onnxruntime"] = info
                if "onnxruntime" not in entry["correctness"]:
                    entry["correctness"]["onnxruntime"] = rel_error(fn(), ref)
                row["onnxruntime"] = measure(fn, budget)
                del fn
            except Exception as err:  # noqa: BLE001
                entry["errors"]["onnxruntime"] = f"{type(err).__name__}: {err}"[:500]
        model = models.get(t if rlx_threaded else 1)
        if model is not None:
            if rlx_threaded or not rlx_1t:
                out = np.empty_like(ref, dtype=np.float32)
                rlx_1t = {"rlx": measure(lambda m=model: m(**inputs), budget),
                          "rlx_out": measure(lambda m=model, o=out: m.run(**inputs, out=o), budget)}
            row.update(rlx_1t)
            row["rlx_1t_only"] = not rlx_threaded
            row["rlx_threads_used"] = getattr(model, "threads", None)
        peer_times = {p: row[p]["median_s"] for p in PEERS if p in row}
        if peer_times:
            best = min(peer_times, key=peer_times.get)
            row["best_peer"], row["best_peer_s"] = best, peer_times[best]
            if "rlx" in row:
                row["ratio"] = row["rlx"]["median_s"] / peer_times[best]
                row["ratio_vs_numpy"] = row["rlx"]["median_s"] / row["numpy"]["median_s"]
                row["ratio_min"] = row["rlx"]["min_s"] / min(row[p]["min_s"] for p in peer_times)
        if "rlx" in row:
            sec = row["rlx"]["median_s"]
            row["rlx_gflops"] = w.flops / sec / 1e9 if w.flops else None
            row["rlx_gbps"] = w.bytes / sec / 1e9 if w.bytes else None
        entry["threads"][str(t)] = row
        summary = ", ".join(f"{k} {row[k]['median_s'] * 1e3:.3f} ms" for k in ("rlx", *PEERS) if k in row)
        log(f"  {w.name} T={t}: {summary}" + (f"  ratio {row['ratio']:.2f}" if "ratio" in row else ""))
    return entry


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--results", required=True)
    parser.add_argument("--names", required=True)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--skip-rlx", default="")
    args = parser.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    skip = {n for n in args.skip_rlx.split(",") if n}
    budget = QUICK if args.quick else FULL

    torch = peer_mod.optional_import("torch")
    ort = peer_mod.optional_import("onnxruntime")
    onnx = peer_mod.optional_import("onnx")
    import rlx_mlir  # noqa: F401

    blas_text, pools = blas_info()
    with open(args.results, "a") as out:
        def emit(obj: dict[str, Any]) -> None:
            out.write(json.dumps(obj, default=str) + "\n")
            out.flush()

        emit({"meta": {
            "numpy": np.__version__, "blas": blas_text, "threadpools": pools,
            "torch": getattr(torch, "__version__", None),
            "onnxruntime": getattr(ort, "__version__", None),
            "onnx": getattr(onnx, "__version__", None),
            "rlx_threads_supported": supports_threads(), "rlx_env": rlx_env(),
            "onnx_missing": ort is not None and onnx is None,
        }})
        for name in args.names.split(","):
            w = BY_NAME[name]
            log(f"{w.name}: {w.label}")
            emit({"start": name})
            try:
                entry = bench_workload(w, threads, budget, torch, ort, onnx,
                                       "skipped" if name in skip else None)
            except Exception:  # noqa: BLE001 - one broken workload must not lose the others
                log(traceback.format_exc())
                entry = {"label": w.label, "error": traceback.format_exc()[-800:], "threads": {},
                         "correctness": {}, "flops": w.flops, "bytes": w.bytes,
                         "memory_bound": w.memory_bound}
            emit({"workload": name, "result": entry})


if __name__ == "__main__":
    main()
