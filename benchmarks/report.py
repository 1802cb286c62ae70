"""Goals of issue 5 from the measured numbers, and the markdown report."""

from __future__ import annotations

from typing import Any

PEERS = ("numpy", "torch", "onnxruntime")
TOLERANCE = 1e-3
"""Max relative error (max |got − numpy| / max |numpy|) before a result is flagged."""


def fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.3g} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s"


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return "—"
    return f"{n:,} B"


def _median(entry: dict[str, Any], engine: str) -> float | None:
    m = entry.get(engine)
    return m.get("median_s") if isinstance(m, dict) else None


def throughput(flops: float | None, nbytes: float | None, memory_bound: bool,
               seconds: float | None) -> str:
    if not seconds:
        return "—"
    parts = []
    if flops:
        parts.append(f"{flops / seconds / 1e9:.1f} GF/s")
    if nbytes and memory_bound:
        parts.append(f"{nbytes / seconds / 1e9:.1f} GB/s")
    return " · ".join(parts) or "—"


# ------------------------------------------------------------------------------------ goals


def goal_threads(threads: list[int]) -> int:
    """Goals are judged at 2 threads (or the largest measured count if 2 was not run)."""
    return 2 if 2 in threads else max(threads)


def evaluate_goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    ws = results["workloads"]
    threads = results["meta"]["threads"]
    t2 = goal_threads(threads)
    note = "" if results["meta"]["rlx_threads_supported"] else " (rlx 1T only)"
    goals: list[dict[str, Any]] = []

    def row(goal: str, measured: str, met: bool | None):
        goals.append({"goal": goal, "measured": measured,
                      "status": "not measured" if met is None else "met" if met else "not met"})

    def at(name: str, t: int) -> dict[str, Any] | None:
        w = ws.get(name)
        return None if w is None else w["threads"].get(str(t))

    def ran(e: dict[str, Any] | None) -> str:
        used = (e or {}).get("rlx_threads_used")
        return f" (rlx ran {used}T)" if used is not None and used < t2 and not note else ""

    def missing(name: str, t: int) -> str:
        e = at(name, t)
        if e is None:
            return "not run"
        return "rlx failed (see Problems)" if not _median(e, "rlx") else "a peer is missing"

    def missing_status(name: str, t: int) -> bool | None:
        e = at(name, t)
        return None if e is None or _median(e, "rlx") else False

    def vs_numpy(names: list[str], t: int) -> list[tuple[str, float]]:
        out = []
        for name in names:
            e = at(name, t)
            if e and _median(e, "rlx") and _median(e, "numpy"):
                out.append((name, _median(e, "numpy") / _median(e, "rlx")))  # rlx speed / numpy's
        return out

    sgemm = sorted((n for n in ws if n.startswith("sgemm_")), key=lambda n: int(n.split("_")[1]))
    for t, label in ((t2, f"{t2} threads"), (1, "1 thread")):
        if t not in threads:
            row(f"sgemm N ≥ 512, {label}: ≥ 0.8× numpy's GF/s", "not run", None)
            continue
        got = vs_numpy(sgemm, t)
        failed = [n for n in sgemm if missing_status(n, t) is False]
        if failed:
            row(f"sgemm N ≥ 512, {label}: ≥ 0.8× numpy's GF/s",
                f"rlx failed on {', '.join(failed)} (see Problems)", False)
            continue
        row(f"sgemm N ≥ 512, {label}: ≥ 0.8× numpy's GF/s" + (note if t != 1 else ""),
            ", ".join(f"{n}: {r:.2f}×" + (ran(at(n, t)) if t != 1 else "") for n, r in got)
            or "not run",
            all(r >= 0.8 for _, r in got) if got else None)

    e = at("decode_m1", t2)
    if e and _median(e, "rlx") and _median(e, "numpy"):
        r = _median(e, "rlx") / _median(e, "numpy")
        row(f"decode matmul M=1: ≤ 1.2× numpy's time{note}", f"{r:.2f}× numpy's time" + ran(e), r <= 1.2)
    else:
        row("decode matmul M=1: ≤ 1.2× numpy's time", missing("decode_m1", t2),
            missing_status("decode_m1", t2))

    for name in ("ffn_32", "ffn_128", "llama_32", "llama_128"):
        e = at(name, t2)
        peers = {p: _median(e, p) for p in PEERS} if e else {}
        peers = {p: v for p, v in peers.items() if v}
        if e and _median(e, "rlx") and peers:
            rlx = _median(e, "rlx")
            best = min(peers, key=peers.get)
            row(f"{name}: faster than every peer{note}",
                f"{rlx / peers[best]:.2f}× the best peer ({best})" + ran(e), rlx < peers[best])
        else:
            row(f"{name}: faster than every peer", missing(name, t2), missing_status(name, t2))

    e = at("llama_1", t2)
    if e and _median(e, "rlx") and _median(e, "onnxruntime"):
        r = _median(e, "rlx") / _median(e, "onnxruntime")
        row(f"llama_1: faster than onnxruntime{note}", f"{r:.2f}× onnxruntime's time" + ran(e), r < 1)
    else:
        row("llama_1: faster than onnxruntime", missing("llama_1", t2), missing_status("llama_1", t2))

    for name in ("silu_mul_add", "rms_norm"):
        got = vs_numpy([name], t2)
        if got:
            r = got[0][1]
            row(f"{name}: ≥ 2× numpy's throughput{note}",
                f"{r:.2f}× numpy's throughput" + ran(at(name, t2)), r >= 2)
        else:
            row(f"{name}: ≥ 2× numpy's throughput", missing(name, t2), missing_status(name, t2))

    comp = results.get("compile", {})
    cold = comp.get("cold", {}).get("workloads", {})
    disk = comp.get("disk", {}).get("workloads", {})
    llamas = [n for n in ws if n.startswith("llama_")]
    cold_s = {n: cold[n]["jit_s"] for n in llamas if n in cold}
    disk_s = {n: disk[n]["jit_s"] for n in llamas if n in disk}
    if not cold_s:  # the cold worker failed: the harness's own jits, if they compiled
        cold_s = {n: ws[n]["rlx"]["jit_s"] for n in llamas
                  if ws[n].get("rlx", {}).get("cache") == "compiled"}
        where = " (the harness's in-process jit: the cold compile subprocess failed)"
    else:
        where = (f" (+ {comp['cold'].get('warmup_jit_s', 0):.2f} s one-time first jit, "
                 f"{comp['cold'].get('import_s', 0):.2f} s import)")
    crashed = [n for n in llamas if n in comp.get("cold", {}).get("crashed", {})]
    if crashed:
        row("Llama block compile: < 2 s cold", f"rlx.jit crashed on {', '.join(crashed)}", False)
    elif cold_s:
        worst = max(cold_s, key=cold_s.get)
        row("Llama block compile: < 2 s cold",
            ", ".join(f"{n}: {v:.2f} s" for n, v in cold_s.items()) + where, cold_s[worst] < 2)
    else:
        row("Llama block compile: < 2 s cold", "not run", None)
    if disk_s:
        hits = all(disk[n].get("cache") == "disk" for n in disk_s)
        worst = max(disk_s, key=disk_s.get)
        row("Llama block compile: < 0.2 s from the disk cache",
            ", ".join(f"{n}: {v * 1e3:.0f} ms" for n, v in disk_s.items())
            + ("" if hits else " (NOT a disk hit: compiler source changed mid-run?)"),
            disk_s[worst] < 0.2 and hits)
    else:
        row("Llama block compile: < 0.2 s from the disk cache", "not run", None)
    return goals


# --------------------------------------------------------------------------------- markdown


def markdown(results: dict[str, Any]) -> str:
    meta = results["meta"]
    lines = [f"# rlx-mlir benchmarks — {meta['timestamp']}{' (quick)' if meta['quick'] else ''}", ""]
    lines.append(f"- machine: {meta['cpu']}, {meta['cores']} cores; python {meta['python']}")
    lines.append(f"- numpy {meta.get('numpy')} (BLAS: {meta.get('blas')}); torch {meta.get('torch') or 'absent'}; "
                 f"onnxruntime {meta.get('onnxruntime') or 'absent'}")
    rlx_t = "`threads=` supported" if meta["rlx_threads_supported"] else \
        "`rlx.jit` has no `threads=` keyword: rlx runs single-threaded in every column (1T only)"
    lines.append(f"- rlx-mlir: {rlx_t}; RLX env: {meta.get('rlx_env') or 'none'}")
    lines.append("- median per call after warm-up; ratio = rlx time / best peer time "
                 "(< 1: rlx faster); err = max |rlx − numpy| / max |numpy|")
    load = [f"{k}: {meta[k]:.0%}" for k in ("foreign_load_before", "foreign_load_during")
            if meta.get(k) is not None]
    if load:
        lines.append(f"- CPU used by other processes (share of all cores): {', '.join(load)}")
    for warning in meta["warnings"]:
        lines.append(f"- **WARNING**: {warning}")
    lines.append("")

    lines += ["## Per-call time", "",
              "| workload | T | rlx | rlx out= | numpy | torch | onnxruntime | best peer | "
              "rlx / best | rlx throughput | best-peer throughput | err |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for w in results["workloads"].values():
        err = w["correctness"].get("rlx")
        err_s = "—" if err is None else f"{err:.1e}" + (" **MISMATCH**" if err > TOLERANCE else "")
        for t, e in w["threads"].items():
            best = e.get("best_peer")
            ratio = e.get("ratio")
            rlx_label = fmt_time(_median(e, "rlx"))
            used = e.get("rlx_threads_used")
            if e.get("rlx_1t_only") and t != "1":
                rlx_label += " (1T)"
            elif used is not None and str(used) != t and "rlx" in e:
                rlx_label += f" (ran {used}T)"
            cells = [w["label"], t, rlx_label, fmt_time(_median(e, "rlx_out")),
                     *(fmt_time(_median(e, p)) for p in PEERS),
                     best or "—", "—" if ratio is None else f"**{ratio:.2f}**",
                     throughput(w["flops"], w["bytes"], w["memory_bound"], _median(e, "rlx")),
                     throughput(w["flops"], w["bytes"], w["memory_bound"],
                                _median(e, best) if best else None),
                     err_s]
            lines.append("| " + " | ".join(cells) + " |")
    lines.append("")

    comp = results.get("compile", {})
    cold, disk = comp.get("cold", {}), comp.get("disk", {})
    lines += ["## Compile (rlx.jit of the graph with its params bound)", ""]
    if cold:
        lines.append(f"Fresh subprocesses, RLX_CACHE_DIR = a new temp dir. Cold process: import "
                     f"{fmt_time(cold.get('import_s'))}, first (tiny) jit {fmt_time(cold.get('warmup_jit_s'))} "
                     f"(one-time); disk-cache process: import {fmt_time(disk.get('import_s'))}, "
                     f"first jit {fmt_time(disk.get('warmup_jit_s'))}.")
        lines.append("")
    for err in comp.get("errors", []):
        lines.append(f"- compile workers: {err}")
    if comp.get("errors"):
        lines.append("")
    lines += ["| workload | build graph | cold compile | from disk cache | disk hit | "
              "in-process jit (harness) | arena | naive (no reuse) |",
              "|---|---|---|---|---|---|---|---|"]
    for name, w in results["workloads"].items():
        if name in cold.get("crashed", {}):
            lines.append(f"| {w['label']} | — | **crashed** (see Problems) | — | — | — | — | — |")
            continue
        c = cold.get("workloads", {}).get(name, {})
        d = disk.get("workloads", {}).get(name, {})
        r = w.get("rlx", {})
        lines.append("| " + " | ".join([
            w["label"], fmt_time(c.get("build_s")), fmt_time(c.get("jit_s")),
            fmt_time(d.get("jit_s")), "yes" if d.get("cache") == "disk" else "no" if d else "—",
            fmt_time(r.get("jit_s")) + (f" ({r['cache']})" if r.get("cache") else ""),
            fmt_bytes(r.get("arena_bytes")), fmt_bytes(r.get("naive_bytes")),
        ]) + " |")
    lines.append("")

    lines += [f"## Goals of issue 5 (judged at {goal_threads(meta['threads'])} threads unless said)", "",
              "| goal | measured | status |", "|---|---|---|"]
    during = meta.get("foreign_load_during")
    if during is not None and during > 0.05:
        lines[-2:-2] = [f"(Contended run: other processes used {during:.0%} of the cores; "
                        f"ratios, 2-thread ones most, are unreliable.)", ""]
    for g in results["goals"]:
        status = {"met": "met", "not met": "**not met**"}.get(g["status"], g["status"])
        lines.append(f"| {g['goal']} | {g['measured']} | {status} |")
    lines.append("")

    problems = []
    for name, w in results["workloads"].items():
        for engine, err in w["correctness"].items():
            if err is not None and err > TOLERANCE:
                problems.append(f"{name}: {engine} differs from numpy by {err:.2e} (relative)")
        if "error" in w:
            problems.append(f"{name}: harness error: {w['error'].strip().splitlines()[-1]}")
        for engine, msg in w.get("errors", {}).items():
            problems.append(f"{name}: {engine} failed: {msg}")
    if problems:
        lines += ["## Problems", ""] + [f"- {p}" for p in problems] + [""]
    return "\n".join(lines)


def publish(text: str, out: str | None) -> None:
    """Print a focused benchmark's markdown table, and write it to `out` when given."""
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text)
