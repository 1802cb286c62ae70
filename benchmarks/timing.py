"""Timing: warm-up, then repeated calls until a call count and a time budget are both met."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Budget:
    warmup_calls: int = 2
    warmup_s: float = 0.05
    min_calls: int = 20
    min_s: float = 0.5
    max_s: float = 6.0
    """Stop after this long once at least `floor_calls` calls ran (slow workloads)."""
    floor_calls: int = 5
    max_calls: int = 20000
    settle_s: float = 0.2
    """Sleep before each measurement so the previous engine's spinning threads go idle."""


FULL = Budget()
QUICK = Budget(warmup_calls=1, warmup_s=0.01, min_calls=5, min_s=0.1, max_s=0.8,
               floor_calls=3, max_calls=5000, settle_s=0.05)


def measure(fn: Callable[[], Any], budget: Budget) -> dict[str, float]:
    """Median, min and mean seconds per call of `fn` (and how many calls were timed)."""
    time.sleep(budget.settle_s)
    start = time.perf_counter()
    calls = 0
    while calls < budget.warmup_calls or time.perf_counter() - start < budget.warmup_s:
        fn()
        calls += 1
    times: list[float] = []
    enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        while True:
            t0 = time.perf_counter()
            fn()
            t1 = time.perf_counter()
            times.append(t1 - t0)
            elapsed = t1 - start
            if len(times) >= budget.max_calls:
                break
            if len(times) >= budget.min_calls and elapsed >= budget.min_s:
                break
            if len(times) >= budget.floor_calls and elapsed >= budget.max_s:
                break
    finally:
        if enabled:
            gc.enable()
    return {"median_s": statistics.median(times), "min_s": min(times),
            "mean_s": statistics.fmean(times), "calls": len(times)}
