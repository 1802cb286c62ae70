"""The harness: `python -m benchmarks [--quick] [--threads 1,2] [--only NAME,...] [--out DIR]`."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.report import evaluate_goals, markdown
from benchmarks.rlx_runner import supports_threads
from benchmarks.timing import FULL, QUICK
from benchmarks.workloads import WORKLOADS, select

HERE = Path(__file__).resolve().parent
OPENBLAS_SLOW_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
THREAD_CAP_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "GOTO_NUM_THREADS")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    p.add_argument("--quick", action="store_true", help="small budgets and fewer sizes (< 2 min)")
    p.add_argument("--threads", default="1,2", help="thread counts, comma-separated (default 1,2)")
    p.add_argument("--only", default="", help="workloads, comma-separated: "
                   + ", ".join(w.name for w in WORKLOADS))
    p.add_argument("--out", default=str(HERE / "results"), help="folder of the .md and .json")
    p.add_argument("--name", default="", help="file name stem (default: a timestamp)")
    p.add_argument("--wait-idle", type=float, default=0, metavar="SECONDS",
                   help="first wait up to SECONDS for other processes to leave the CPU idle")
    p.add_argument("--no-compile-workers", action="store_true",
                   help="skip the cold / disk-cache compile subprocesses")
    args = p.parse_args(argv)
    try:
        args.thread_list = sorted({int(t) for t in args.threads.split(",") if t.strip()})
    except ValueError:
        p.error(f"--threads: expected comma-separated integers, got {args.threads!r}")
    if not args.thread_list or min(args.thread_list) < 1:
        p.error("--threads: expected positive integers")
    args.names = [n.strip() for n in args.only.split(",") if n.strip()]
    return args


# ------------------------------------------------------------------------- environment


def cpu_name() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def environment_warnings(threads: list[int]) -> list[str]:
    warnings = []
    slow = {v: os.environ[v] for v in OPENBLAS_SLOW_VARS if v in os.environ}
    if slow:
        settings = ", ".join(f"{k}={v}" for k, v in slow.items())
        unset = " ".join(f"-u {k}" for k in slow)
        warnings.append(f"{settings} is set: it can make numpy's OpenBLAS pick a slower kernel or "
                        f"blocking, so numpy's numbers may be too low. It is read when numpy loads "
                        f"(changing it from Python has no effect): unset it for the run, "
                        f"`env {unset} python -m benchmarks`.")
    caps = {v: os.environ[v] for v in THREAD_CAP_VARS if v in os.environ}
    if caps:
        warnings.append(f"{', '.join(f'{k}={v}' for k, v in caps.items())} is set: it may cap the "
                        f"peers' thread pools below the thread counts of this run.")
    cores = os.cpu_count() or 1
    if max(threads) > cores:
        warnings.append(f"{max(threads)} threads requested on {cores} cores")
    if not supports_threads():
        warnings.append("rlx.jit has no `threads=` keyword: rlx is measured single-threaded "
                        "and the same time is shown in every thread column (1T only).")
    return warnings


def _proc_stat() -> tuple[float, float] | None:
    """(busy, total) core-seconds of the whole machine since boot, from /proc/stat."""
    try:
        fields = [float(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    except (OSError, ValueError, IndexError):
        return None
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    idle = fields[3] + fields[4]
    total = sum(fields)
    return (total - idle) / hz, total / hz


def _own_cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class LoadMonitor:
    """How busy the machine is with other processes (their share of all cores)."""

    def __init__(self):
        self.start = _proc_stat()
        self.own = _own_cpu()
        self.wall = time.perf_counter()

    def foreign_load(self) -> float | None:
        end = _proc_stat()
        if self.start is None or end is None:
            return None
        wall = time.perf_counter() - self.wall
        busy = end[0] - self.start[0] - (_own_cpu() - self.own)
        return max(0.0, busy / (wall * (os.cpu_count() or 1))) if wall > 0 else None


def idle_check(seconds: float = 0.5) -> float | None:
    monitor = LoadMonitor()
    time.sleep(seconds)
    return monitor.foreign_load()




# ------------------------------------------------------------------------- compile workers


def _worker_process(cache: str, names: list[str], threads: list[int]) -> tuple[int, list[dict], str]:
    env = dict(os.environ, RLX_CACHE_DIR=cache)
    root = str(HERE.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cmd = [sys.executable, "-m", "benchmarks.compile_worker", "--cache", cache,
           "--names", ",".join(names), "--threads", ",".join(map(str, threads))]
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=1800)
    lines = []
    for line in proc.stdout.splitlines():
        with contextlib.suppress(ValueError):
            lines.append(json.loads(line))
    return proc.returncode, lines, proc.stderr.strip()[-600:]


def run_compile_worker(cache: str, names: list[str], threads: list[int]) -> dict[str, Any]:
    """Jit every workload in fresh subprocesses; a workload whose compile kills the process
    (an LLVM abort) is recorded in "crashed" and the rest go on in a new process."""
    out: dict[str, Any] = {"workloads": {}, "crashed": {}, "processes": 0}
    remaining = list(names)
    while remaining:
        code, lines, stderr = _worker_process(cache, remaining, threads)
        out["processes"] += 1
        header = next((x for x in lines if "import_s" in x), None)
        if header is None:
            raise RuntimeError(f"exit {code} before its first compile: {stderr}")
        for key in ("import_s", "warmup_jit_s", "jit_kwargs", "fingerprint"):
            out.setdefault(key, header[key])
        started = None
        for x in lines:
            if "start" in x:
                started = x["start"]
            elif "workload" in x:
                out["workloads"][x["workload"]] = x["result"]
                started = None
        if code == 0 and started is None:
            break
        if started is None:
            raise RuntimeError(f"exit {code}: {stderr}")
        out["crashed"][started] = f"exit {code}: {stderr}"
        log(f"  rlx.jit of {started} killed the compile process: {stderr.splitlines()[-1] if stderr else code}")
        remaining = remaining[remaining.index(started) + 1:]
    return out


def compile_workers(out: dict[str, Any], cache: str, names: list[str], threads: list[int]) -> None:
    """Cold compiles, then loads from the disk cache, each in fresh subprocesses.

    When the compiler's source changes between the two (someone editing it during the run),
    the disk process misses; it is then rerun (up to twice) on the entries it just stored.
    """
    try:
        log("compile worker (cold) ...")
        out["cold"] = cold = run_compile_worker(cache, names, threads)
        names = [n for n in names if n not in cold["crashed"]]
        for attempt in range(3):
            if not names:
                break
            log("compile worker (disk cache) ...")
            out["disk"] = disk = run_compile_worker(cache, names, threads)
            disk["attempt"] = attempt + 1
            misses = [n for n, r in disk["workloads"].items() if r.get("cache") != "disk"]
            if not misses:
                break
            out["errors"].append(
                f"disk-cache process {attempt + 1}: {len(misses)} miss(es) ({', '.join(misses)}); "
                f"compiler fingerprint {cold.get('fingerprint')} (cold) vs "
                f"{disk.get('fingerprint')} (this process): "
                + ("the compiler source changed during the run"
                   if cold.get("fingerprint") != disk.get("fingerprint") else "unexplained")
                + (", retrying" if attempt < 2 else ""))
            log(f"  {out['errors'][-1]}")
    except Exception as err:  # noqa: BLE001 - the harness jits in-process anyway
        out["errors"].append(f"compile worker failed: {err}")
        log(f"  failed: {err}")


# ------------------------------------------------------------------------------------ main


def run_measure_workers(names: list[str], args: argparse.Namespace, skip_rlx: dict[str, str],
                        results_dir: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Measure the workloads in subprocesses (progress echoed to stderr); when one dies, a
    new one goes on, without rlx for the workload that was running (its crash recorded)."""
    meta: dict[str, Any] = {}
    entries: dict[str, Any] = {}
    crashes = dict(skip_rlx)
    remaining = list(names)
    root = str(HERE.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    for attempt in range(len(names) * 2 + 1):
        if not remaining:
            break
        results_file = Path(results_dir) / f"measure-{attempt}.jsonl"
        cmd = [sys.executable, "-m", "benchmarks.measure_worker", "--results", str(results_file),
               "--names", ",".join(remaining), "--threads", ",".join(map(str, args.thread_list)),
               "--skip-rlx", ",".join(n for n in crashes if n in remaining)]
        if args.quick:
            cmd.append("--quick")
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        tail: list[str] = []
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stderr.write(line)
            tail = (tail + [line.rstrip()])[-8:]
        code = proc.wait()
        started = None
        if results_file.exists():
            for line in results_file.read_text().splitlines():
                with contextlib.suppress(ValueError):
                    x = json.loads(line)
                    if "meta" in x:
                        meta = meta or x["meta"]
                    elif "start" in x:
                        started = x["start"]
                    elif "workload" in x:
                        entries[x["workload"]] = x["result"]
                        started = None
        if code == 0 and started is None:
            break
        last = [t for t in tail if t.strip() and not t.startswith("  ") and not t.startswith(f"{started}:")]
        message = f"exit {code}: " + " | ".join(last[-2:])[-400:]
        if started is None:  # died before its first workload
            for n in remaining:
                entries[n] = {"label": n, "error": f"measurement process failed, {message}",
                              "threads": {}, "correctness": {}, "flops": None, "bytes": None,
                              "memory_bound": False}
            break
        log(f"  the measurement process died in {started} ({message}); continuing in a new one")
        index = remaining.index(started)
        if started in crashes:  # it died even without rlx: give up on this workload
            entries[started] = {"label": started, "error": f"measurement process died: {message}",
                                "threads": {}, "correctness": {}, "flops": None, "bytes": None,
                                "memory_bound": False}
            remaining = remaining[index + 1:]
        else:
            crashes[started] = f"rlx killed the process ({message})"
            remaining = remaining[index:]
    for name, why in crashes.items():
        if name in entries and "errors" in entries[name]:
            entries[name]["errors"]["rlx"] = why
            entries[name]["rlx_crashed"] = True
    return meta, entries


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.perf_counter()
    workloads = select(args.names, args.quick)
    names = [w.name for w in workloads]
    timestamp = dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    meta: dict[str, Any] = {
        "timestamp": timestamp, "quick": args.quick, "threads": args.thread_list,
        "workloads": names, "budget": (QUICK if args.quick else FULL).__dict__,
        "cpu": cpu_name(), "cores": os.cpu_count(), "python": platform.python_version(),
        "rlx_threads_supported": supports_threads(),
        "env": {k: os.environ[k] for k in OPENBLAS_SLOW_VARS + THREAD_CAP_VARS if k in os.environ},
        "warnings": environment_warnings(args.thread_list),
    }
    if args.wait_idle > 0:
        deadline = time.perf_counter() + args.wait_idle
        while time.perf_counter() < deadline:
            load = idle_check(1.0)
            if load is None or load < 0.05:
                break
            log(f"waiting for an idle machine (other processes: {load:.0%} of the cores) ...")
    before = idle_check()
    meta["foreign_load_before"] = before
    if before is not None and before > 0.1:
        meta["warnings"].append(
            f"other processes kept {before:.0%} of the cores busy just before the run: "
            f"timings (2-thread ones most) are unreliable; rerun on an idle machine.")
    for warning in meta["warnings"]:
        log(f"WARNING: {warning}")
    monitor = LoadMonitor()

    results: dict[str, Any] = {"meta": meta, "compile": {"errors": []}, "workloads": {}}
    scratch = tempfile.mkdtemp(prefix="rlx-bench-")
    cache = str(Path(scratch) / "cache")
    Path(cache).mkdir()
    os.environ["RLX_CACHE_DIR"] = cache  # the measurement jits hit what the workers stored
    try:
        if not args.no_compile_workers:
            compile_workers(results["compile"], cache, names, sorted(args.thread_list, reverse=True))
        crashed = {**results["compile"].get("disk", {}).get("crashed", {}),
                   **results["compile"].get("cold", {}).get("crashed", {})}
        skip = {n: f"rlx.jit killed the compile subprocess ({why[-300:]})" for n, why in crashed.items()}
        worker_meta, results["workloads"] = run_measure_workers(names, args, skip, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    meta.update(worker_meta)
    if meta.get("onnx_missing"):
        meta["warnings"].append("onnxruntime is installed but onnx is not: no onnxruntime column "
                                "(pip install onnx, or the `bench` extra)")

    during = monitor.foreign_load()
    meta["foreign_load_during"] = during
    if during is not None and during > 0.05:
        meta["warnings"].append(
            f"other processes used {during:.0%} of the cores during the run: the timings are "
            f"contended (2-thread ones most); rerun on an idle machine.")
    results["goals"] = evaluate_goals(results)
    meta["elapsed_s"] = time.perf_counter() - started
    text = markdown(results) + f"\nTotal harness time: {meta['elapsed_s']:.0f} s.\n"
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = args.name or dt.datetime.now().strftime("%Y%m%d-%H%M%S") + ("-quick" if args.quick else "")
    (out / f"{stem}.md").write_text(text)
    (out / f"{stem}.json").write_text(json.dumps(results, indent=1, default=str))
    log(f"wrote {out / (stem + '.md')} and {out / (stem + '.json')}")
