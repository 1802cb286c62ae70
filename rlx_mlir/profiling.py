"""`model.profile(repeat=20, **inputs)`: where the time of a call goes, kernel by kernel.

```python
prof = model.profile(repeat=20, x=X)
print(prof.to_markdown())     # kernel, origin, calls, total/mean µs, % of the call, GB/s or GFLOP/s
prof.trace("trace.json")      # Chrome trace events: open in https://ui.perfetto.dev
prof.by_phase()               # {rlx.Phase: µs per call}: prologue, steady state, epilogue
prof.kernel_us, prof.call_us  # thread 0's kernels per call vs the instrumented call's wall time
```

The profile runs an instrumented build of the same module
(`model.recompile(profile=True)`: `convert-lir-to-llvm{profile=true}`, see
`rlx_mlir.passes.lir_to_llvm.profile`), compiled once per model and cached like any build; the model's own build is never
instrumented. Both builds run the same kernels on the same arena plan, so results are
identical. Time stamps are the CPU's time stamp counter, calibrated against
`time.perf_counter_ns`.

The table reads thread 0's timeline: a partitioned kernel's time is thread 0's share
(the other threads' waits for it show up in the `barrier` rows), so the rows add up to
the call; `by_phase` sums them per streaming phase (each kernel's `rlx.phase`, see
`rlx_mlir.phases`; a barrier counts in the phase of the kernel it waits for). The trace
has every thread: one track per thread, barrier waits as their own events.
"""

from __future__ import annotations

import ctypes
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rlx_mlir.core.errors import RlxError
from rlx_mlir.core.profile_log import (
    CLOCK,
    EVENT_WORDS,
    LOG_ALIGNMENT,
    LOG_HEADER_BYTES,
    log_offset,
)
from rlx_mlir.phases import Phase

if TYPE_CHECKING:
    from rlx_mlir.compiled_graph import CompiledGraph
    from rlx_mlir.models.model import LanguageModel

MATMUL_OPS = frozenset({"matmul", "fused_matmul", "dequant_matmul"})
"""Kernels whose work is counted in flops: 2·(output elements)·K."""
LOG_SETTLE_SECONDS = 0.05
"""How long `read` waits for the workers' last events after a call returns."""
EVENTS_PER_SITE = 4
"""Log capacity per call site and thread (a scan's body kernels run several times)."""


@dataclass(frozen=True)
class KernelRow:
    """One call site of the entry (a kernel instance in the schedule, or a barrier)."""

    kernel: str
    """The llvm function called (its serial wrapper or row driver for those)."""
    origin: str
    op: str
    calls: int
    """Calls per model call (more than 1 inside a scan)."""
    total_us: float
    """Thread 0's time in it per model call."""
    mean_us: float
    percent: float
    """Of the instrumented call's wall time."""
    rate: str
    """`GFLOP/s` for matmuls and attention, `GB/s` (operand bytes) for the others."""
    phase: Phase
    """The kernel's streaming phase (a barrier's: that of the kernel before it)."""


@dataclass
class Profile:
    """The per-kernel profile of a model call (see the module docstring)."""

    rows: list[KernelRow]
    call_us: float
    """Mean wall time of one instrumented call, Python binding included."""
    kernel_us: float
    """Mean per call of the time thread 0 spent in timed calls (kernels and barriers):
    the sum of the rows' totals."""
    repeat: int
    threads: int
    best_call_us: float
    """The fastest instrumented call (a loaded machine only adds to the mean)."""
    best_kernel_us: float
    """Thread 0's timed calls in the call with the fewest of them."""
    events: list[tuple[int, int, int, float, float]] = field(repr=False)
    """(repeat, thread, site, start µs, end µs) from the first call's start."""
    sites: list[dict[str, Any]] = field(repr=False)
    dropped: int = 0
    """Events a full log could not keep."""

    def to_markdown(self) -> str:
        head = ("| kernel | origin | calls | total µs | mean µs | % of call | throughput |\n"
                "|---|---|---:|---:|---:|---:|---|")
        lines = [head] + [
            f"| {r.kernel} | {r.origin} | {r.calls} | {r.total_us:.1f} | {r.mean_us:.1f} | "
            f"{r.percent:.1f} | {r.rate} |" for r in self.rows]
        lines.append(f"\nper call: kernels {self.kernel_us:.1f} µs (thread 0), call "
                     f"{self.call_us:.1f} µs; {self.threads} thread(s), mean of "
                     f"{self.repeat} calls (best: kernels {self.best_kernel_us:.1f} µs, "
                     f"call {self.best_call_us:.1f} µs)")
        lines += ["", self.phase_markdown()]
        return "\n".join(lines)

    __str__ = to_markdown

    def by_scope(self) -> list[tuple[str, int, float, float]]:
        """(scope, kernel calls, total µs, % of the call) per outermost `g.scope` of the
        kernels' origins (`layer3` of `layer3.attention/softmax`), in schedule order;
        barriers and kernels outside any scope are grouped as `barrier` and `other`."""
        groups: dict[str, list[float]] = {}
        for row in self.rows:
            entry = groups.setdefault(scope_of(row), [0, 0.0])
            entry[0] += row.calls
            entry[1] += row.total_us
        return [(name, int(calls), total, 100.0 * total / self.call_us if self.call_us else 0.0)
                for name, (calls, total) in groups.items()]

    def scope_markdown(self) -> str:
        """`by_scope` as a markdown table."""
        lines = ["| scope | kernel calls | total µs | % of call |", "|---|---:|---:|---:|"]
        lines += [f"| {name} | {calls} | {total:.1f} | {percent:.1f} |"
                  for name, calls, total, percent in self.by_scope()]
        return "\n".join(lines)

    def by_phase(self) -> dict[Phase, float]:
        """Thread 0's µs per call in each streaming phase (every phase, in order): the
        rows' totals summed by their `phase`, so the values add up to the rows' sum."""
        totals = dict.fromkeys(Phase, 0.0)
        for row in self.rows:
            totals[row.phase] += row.total_us
        return totals

    def phase_markdown(self) -> str:
        """`by_phase` as a markdown table (kernel calls, µs, % of the call per phase)."""
        calls = dict.fromkeys(Phase, 0)
        for row in self.rows:
            calls[row.phase] += row.calls
        lines = ["| phase | kernel calls | total µs | % of call |", "|---|---:|---:|---:|"]
        lines += [f"| {phase.value} | {calls[phase]} | {total:.1f} | "
                  f"{100.0 * total / self.call_us if self.call_us else 0.0:.1f} |"
                  for phase, total in self.by_phase().items()]
        return "\n".join(lines)

    def balance(self) -> list[tuple[str, int, float, float, float]]:
        """Per op kind (barriers as `barrier`): (op, calls per model call, thread 0's µs,
        the mean and the largest µs over the threads), per call: how evenly a partitioned
        kernel's work is split, and how long each thread waits at barriers (where the
        threads stop scaling)."""
        times = np.zeros((max(self.repeat, 1), self.threads, len(self.sites)))
        for repeat, thread, site, start, end in self.events:
            times[repeat, thread, site] += end - start
        per_thread = times.mean(axis=0)  # [thread, site]
        counts = np.zeros(len(self.sites), dtype=np.int64)
        for repeat, thread, site, _, _ in self.events:
            if repeat == 0 and thread == 0:
                counts[site] += 1
        groups: dict[str, list[int]] = {}
        for site, info in enumerate(self.sites):
            groups.setdefault(info["op"], []).append(site)
        rows = []
        for op, sites in groups.items():
            thread_us = per_thread[:, sites].sum(axis=1)
            rows.append((op, int(counts[sites].sum()), float(thread_us[0]),
                         float(thread_us.mean()), float(thread_us.max())))
        return sorted(rows, key=lambda row: -row[4])

    def balance_markdown(self) -> str:
        """`balance` as a markdown table."""
        lines = ["| op | calls | thread 0 µs | mean over threads µs | busiest thread µs |",
                 "|---|---:|---:|---:|---:|"]
        lines += [f"| {op} | {calls} | {t0:.1f} | {mean:.1f} | {most:.1f} |"
                  for op, calls, t0, mean, most in self.balance()]
        return "\n".join(lines)

    def trace(self, path: str | Path) -> Path:
        """Write the Chrome trace-event JSON (Perfetto, chrome://tracing): one track per
        thread, a complete (`ph: "X"`) event per kernel call and barrier wait."""
        events: list[dict[str, Any]] = [
            {"name": "thread_name", "ph": "M", "pid": 0, "tid": t,
             "args": {"name": f"rlx thread {t}"}} for t in range(self.threads)]
        events.append({"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "rlx model"}})
        for repeat, thread, site, start, end in self.events:
            info = self.sites[site]
            events.append({
                "name": info["origin"] if info["op"] != "barrier" else "barrier",
                "cat": "barrier" if info["op"] == "barrier" else info["op"],
                "ph": "X", "pid": 0, "tid": thread, "ts": round(start, 3),
                "dur": round(max(end - start, 0.0), 3),
                "args": {"kernel": info["kernel"], "call": repeat, "site": site,
                         "phase": info["phase"]}})
        path = Path(path)
        path.write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ns"}))
        return path


def scope_of(row: KernelRow) -> str:
    """The outermost scope of a row's origin: `layer3` of `layer3.ffn.matmul#1`."""
    if row.op == "barrier":
        return "barrier"
    head = row.origin.split(" + ")[0].split("/")[0]
    return head.split(".")[0] if "." in head else "other"


@dataclass
class ModelProfile:
    """`lm.profile(ids)`: a prefill of `ids` and one decode step after it."""

    prefill: Profile
    decode: Profile
    prompt_tokens: int

    def to_markdown(self) -> str:
        parts = []
        for title, prof in ((f"prefill ({self.prompt_tokens} tokens)", self.prefill),
                            ("decode step (1 token)", self.decode)):
            parts += [f"### {title}", "", prof.scope_markdown(), "", prof.phase_markdown(), "",
                      f"call {prof.call_us:.1f} µs, kernels {prof.kernel_us:.1f} µs; "
                      f"{prof.threads} thread(s), mean of {prof.repeat} calls", ""]
        return "\n".join(parts)

    __str__ = to_markdown

    def by_phase(self) -> dict[str, dict[Phase, float]]:
        """`Profile.by_phase` of the prefill and of the decode step (µs per call)."""
        return {"prefill": self.prefill.by_phase(), "decode": self.decode.by_phase()}


def profile_language_model(lm: LanguageModel, tokens: np.ndarray, repeat: int) -> ModelProfile:
    """Profile a prefill of `tokens` (checked ids) from an empty cache, then one decode
    step (the greedy next token) after it; the model's cache holds `tokens` afterwards."""
    lm.reset()
    end = tokens.size
    prefill = lm.runner.profile(**lm.runner_inputs(tokens, 0, np.array([end - 1], np.int32)),
                                repeat=repeat)
    logits = lm.prefill(tokens)
    token = np.array([int(np.argmax(logits))], np.int32)
    decode = lm.runner.profile(**lm.runner_inputs(token, end, np.array([0], np.int32)),
                               repeat=repeat)
    return ModelProfile(prefill, decode, int(tokens.size))


def profile_model(model: CompiledGraph, repeat: int, args: Sequence[Any],
                  kwargs: Mapping[str, Any]) -> Profile:
    """Run the instrumented build of `model` `repeat` times on the arguments (after one
    warm-up call) from the model's state, leaving the model itself untouched."""
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise RlxError(f"profile: repeat: expected an int >= 1, got {repeat!r}")
    build = model.recompile(profile=True)  # built once, then kept by the model
    sites = list(build.abi.profile_sites)
    log = _EventLog(build, len(sites) * EVENTS_PER_SITE + 16)
    ticks = _ticks_per_us(build)
    call_ns, per_call = [], []
    origin_tick = None
    events = []
    for index in range(repeat + 1):  # the first call warms up (threads, caches)
        build.copy_state_from(model)  # every profiled call starts from the model's state
        log.clear()
        started = time.perf_counter_ns()
        build(*args, **kwargs)
        elapsed = time.perf_counter_ns() - started
        recorded = log.read()  # also for the warm-up: it waits for the workers' last events
        if index == 0:
            if log.longest > log.capacity:  # loops (scan) call their kernels many times
                log = _EventLog(build, 2 * log.longest)
            log.dropped = 0
            continue
        call_ns.append(elapsed)
        if origin_tick is None:
            origin_tick = min((e[1] for t in recorded for e in t), default=0)
        per_call.append(recorded)
        events += [(index - 1, thread, site, (t0 - origin_tick) / ticks, (t1 - origin_tick) / ticks)
                   for thread, evs in enumerate(recorded) for site, t0, t1 in evs]
    sizes = model.call_sizes(*args, **kwargs)
    call_us = float(np.mean(call_ns)) / 1e3
    rows, kernel_us, best_kernel_us = _table(sites, per_call, ticks, sizes, call_us,
                                             barriers=build.threads > 1)
    return Profile(rows, call_us, kernel_us, repeat, build.threads, min(call_ns) / 1e3,
                   best_kernel_us,
                   events, sites, log.dropped)


class _EventLog:
    """The per-thread event logs after the arena of the instrumented build."""

    def __init__(self, build: CompiledGraph, capacity: int):
        self.threads = build.threads
        self.capacity = capacity
        self.longest = 0
        """The most events one thread recorded in a call (its log keeps `capacity`)."""
        stride = LOG_HEADER_BYTES + self.capacity * EVENT_WORDS * 8
        self.stride = -(-stride // LOG_ALIGNMENT) * LOG_ALIGNMENT
        self.offset = log_offset(build.arena_bytes)
        need = self.offset + LOG_HEADER_BYTES + self.threads * self.stride
        self.words = build.arena_buffer(need)[self.offset : need].view(np.int64)
        self.words[:] = 0
        self.words[0] = self.stride
        self.dropped = 0

    def _thread(self, thread: int) -> np.ndarray:
        start = (LOG_HEADER_BYTES + thread * self.stride) // 8
        return self.words[start : start + self.stride // 8]

    def clear(self) -> None:
        for thread in range(self.threads):
            header = self._thread(thread)
            header[0], header[1] = 0, self.capacity

    def read(self) -> list[list[tuple[int, int, int]]]:
        """Each thread's events (site, t0, t1) in the order recorded. Every thread passes
        the same call sites, so each log ends as long as thread 0's; a worker may still be
        recording its last barrier when the call returns: wait for it (briefly)."""
        final = int(self._thread(0)[0])
        deadline = time.perf_counter() + LOG_SETTLE_SECONDS
        for thread in range(1, self.threads):
            while int(self._thread(thread)[0]) < final and time.perf_counter() < deadline:
                pass
        out = []
        for thread in range(self.threads):
            words = self._thread(thread)
            count = int(words[0])
            self.longest = max(self.longest, count)
            kept = min(count, self.capacity)
            self.dropped += count - kept
            first = LOG_HEADER_BYTES // 8
            events = words[first : first + kept * EVENT_WORDS].reshape(kept, EVENT_WORDS)
            out.append([(int(s), int(a), int(b)) for s, a, b, _ in events])
        return out


_TICKS_PER_US: list[float] = []
"""The calibration, once per process (every build reads the same counter)."""


def _ticks_per_us(build: CompiledGraph) -> float:
    """Time stamp counter ticks per microsecond, measured over 50 ms."""
    if not _TICKS_PER_US:
        clock = ctypes.CFUNCTYPE(ctypes.c_int64)(build.address(CLOCK))
        t0, c0 = time.perf_counter_ns(), clock()
        time.sleep(0.05)
        t1, c1 = time.perf_counter_ns(), clock()
        _TICKS_PER_US.append((c1 - c0) / ((t1 - t0) / 1e3))
    return _TICKS_PER_US[0]


def _table(sites: list[dict[str, Any]], per_call: list[list[list[tuple[int, int, int]]]],
           ticks: float, sizes: Mapping[str, int], call_us: float, barriers: bool
           ) -> tuple[list[KernelRow], float, float]:
    """Thread 0's time per site, mean over the calls (so the rows add up to the call);
    the mean and the least sum over all sites per call. Barrier rows only when several
    threads run (with one, a barrier returns at once)."""
    totals = np.zeros((len(per_call), len(sites)))
    counts = np.zeros((len(per_call), len(sites)), dtype=np.int64)
    for index, threads in enumerate(per_call):
        for site, t0, t1 in threads[0] if threads else ():
            totals[index, site] += (t1 - t0) / ticks
            counts[index, site] += 1
    site_us = totals.mean(axis=0)
    kernel_us, best_kernel_us = float(totals.sum(axis=1).mean()), float(totals.sum(axis=1).min())
    rows = []
    for site, info in enumerate(sites):
        calls = int(counts[0, site]) if len(per_call) else 0
        if calls == 0 or (info["op"] == "barrier" and not barriers):
            continue
        total = float(site_us[site])
        rows.append(KernelRow(
            info["kernel"], info["origin"], info["op"], calls, total, total / calls,
            100.0 * total / call_us if call_us else 0.0, _rate(info, sizes, total / calls),
            Phase(info["phase"])))
    return rows, kernel_us, best_kernel_us


def _numel(shape: Sequence[int | str], sizes: Mapping[str, int]) -> int | None:
    try:
        return math.prod(d if isinstance(d, int) else sizes[d] for d in shape)
    except KeyError:
        return None


def _rate(info: dict[str, Any], sizes: Mapping[str, int], mean_us: float) -> str:
    """GFLOP/s (matmuls, attention) or GB/s of operand bytes; "" when unknown."""
    shapes = info["shapes"]
    if not shapes or mean_us <= 0:
        return ""
    if info["op"] in MATMUL_OPS and len(shapes[0]) >= 1:
        out, k = _numel(shapes[-1], sizes), shapes[0][-1]
        k = sizes.get(k) if isinstance(k, str) else k
        if out is not None and k is not None:
            return f"{2 * out * k / mean_us / 1e3:.1f} GFLOP/s"
    if info["op"] == "attention" and len(shapes) >= 2 and len(shapes[1]) >= 2:
        q, keys = _numel(shapes[0], sizes), shapes[1][-2]
        keys = sizes.get(keys) if isinstance(keys, str) else keys
        if q is not None and keys is not None:
            return f"{4 * q * keys / mean_us / 1e3:.1f} GFLOP/s"
    sized = [_numel(s, sizes) for s in shapes]
    if any(n is None for n in sized):
        return ""
    moved = sum(n * b for n, b in zip(sized, info["element_bytes"], strict=True))
    return f"{moved / mean_us / 1e3:.2f} GB/s"


__all__ = ["KernelRow", "ModelProfile", "Profile", "profile_language_model", "profile_model",
           "scope_of"]
