"""Threads for compiled graphs: a team of workers that run the native entry with the GIL
released, each with its thread id, while the calling thread runs part 0.

The generated code does the rest (kernels split their work by thread id, spin barriers
between kernels; see passes/lir_to_llvm/parallel.py), so a call costs one wake-up per
worker, not one per kernel.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable, Sequence

import numpy as np

from rlx_mlir.core.errors import RlxError

THREADS_ENV = "RLX_NUM_THREADS"


def default_threads() -> int:
    """The cores this process may use, capped by RLX_NUM_THREADS."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    cap = os.environ.get(THREADS_ENV, "").strip()
    if cap:
        try:
            value = int(cap)
        except ValueError:
            raise RlxError(f"{THREADS_ENV}: expected a positive integer, got {cap!r}") from None
        if value < 1:
            raise RlxError(f"{THREADS_ENV}: expected a positive integer, got {cap!r}")
        cores = min(cores, value)
    return max(1, cores)


SPIN_ENV = "RLX_SPIN_US"
SPIN_US = 1000
"""How long an idle worker spins (rounds of `pause`) for the next call before it sleeps, in
µs (RLX_SPIN_US overrides it): back-to-back calls, such as the decode steps of a
generation with Python's work between them, then find it awake instead of paying an OS
wake-up and the GIL per worker (600 µs for 15 workers of a 16-thread decode step). The
rounds are calibrated once per process: one `pause` takes 10-150 cycles depending on the
CPU."""
MAX_SPIN_US = 1_000_000


def spin_rounds() -> int:
    """Rounds of `pause` that take about SPIN_US (or RLX_SPIN_US) µs on this CPU."""
    value = os.environ.get(SPIN_ENV, "").strip()
    try:
        micros = float(value) if value else SPIN_US
    except ValueError:
        raise RlxError(f"{SPIN_ENV}: expected a number of microseconds, got {value!r}") from None
    if not 0 <= micros <= MAX_SPIN_US:
        raise RlxError(f"{SPIN_ENV}: expected microseconds in [0, {MAX_SPIN_US}], got {value!r}")
    return int(micros * _pause_rounds_per_us())


@functools.cache
def _pause_rounds_per_us() -> float:
    wait, _ = _ticket_functions()
    word = np.zeros(1, dtype=np.int64)
    rounds = 20000
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        wait(word.ctypes.data, 0, rounds)  # the word never changes: all rounds run
        best = min(best, time.perf_counter() - start)
    return rounds / max(best * 1e6, 1.0)


class ThreadTeam:
    """`size - 1` daemon workers that run a graph's entry with part ids 1..size-1.

    Workers live in the graph's native worker loop (`<entry>__worker`, see
    passes/lir_to_llvm/parallel.py) without the GIL: a call writes its pointer arguments to
    `argblock` and bumps a ticket word; a spinning worker starts at once. A worker idle for
    `spin_rounds()` (about SPIN_US) returns to Python and sleeps on its queue until a call
    wakes it. Thread 0 passes a gather after the entry's last parallel kernel, so when it
    returns every share is written and the caller never waits for the workers to report
    back.
    """

    def __init__(self, size: int, worker: Callable[..., int], pointer_count: int):
        self.size = size
        self._ticket_buffer = np.zeros(16, dtype=np.int64)  # 128 bytes: its own cache line
        self._ticket = self._ticket_buffer.ctypes.data + 64 - self._ticket_buffer.ctypes.data % 64
        self._argblock = np.zeros(pointer_count + 1, dtype=np.uint64)
        self._argblock_address = self._argblock.ctypes.data
        self._wait, self._bump = _ticket_functions()
        self._worker = worker
        self._stopped = False
        self._spins = spin_rounds()
        self._sleeping = [False] * size
        _TEAMS.add(self)
        self._wakeups: list[queue.SimpleQueue] = []
        for part in range(1, size):
            wakeups: queue.SimpleQueue = queue.SimpleQueue()
            self._wakeups.append(wakeups)
            threading.Thread(target=self._work, args=(part, wakeups), name=f"rlx-worker-{part}",
                             daemon=True).start()

    def _work(self, part: int, wakeups: queue.SimpleQueue) -> None:
        seen = 0
        while not self._stopped:
            seen = self._worker(self._ticket, self._argblock_address, part, self.size, seen,
                                self._spins)
            self._sleeping[part] = True
            if self._wait(self._ticket, seen, 0) == seen:  # re-check after announcing sleep
                wakeups.get()
            self._sleeping[part] = False

    def run(self, entry: Callable[..., int], pointers: Sequence[int], sync: int) -> int:
        """Run the entry on every thread of the team; thread 0's status."""
        self._argblock[:-1] = pointers
        self._argblock[-1] = sync
        self._bump(self._ticket)
        for part, wakeups in enumerate(self._wakeups, start=1):
            if self._sleeping[part]:
                wakeups.put(None)
        return entry(*pointers, 0, self.size, sync)


    def stop(self) -> None:
        """Let the workers leave native code for good (they finish at most one spin)."""
        self._stopped = True
        for wakeups in self._wakeups:
            wakeups.put(None)


_TEAMS: weakref.WeakSet[ThreadTeam] = weakref.WeakSet()


@atexit.register
def _stop_teams() -> None:
    """No worker may still run JIT code when the engines holding it are freed at exit."""
    teams = list(_TEAMS)
    for team in teams:
        team.stop()
    if teams:
        # a spinning worker returns within its spin rounds
        longest = max(team._spins for team in teams) / _pause_rounds_per_us()
        time.sleep(2 * longest / 1e6 + 0.005)


@functools.cache
def _ticket_functions() -> tuple[Callable[..., int], Callable[..., int]]:
    """The native wait and bump functions, compiled once per process (the backend's
    in-memory cache keeps their engine alive)."""
    from xdsl.dialects.builtin import ModuleOp

    from rlx_mlir.backend import cache_key, compile_module
    from rlx_mlir.core.abi import TICKET_BUMP, TICKET_WAIT
    from rlx_mlir.core.target import host_target
    from rlx_mlir.pipeline import build_ticket_functions

    module = ModuleOp(build_ticket_functions())
    target = host_target()
    executable = compile_module(module, target, key=cache_key("rlx-ticket-functions", target, 3))
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    wait = ctypes.CFUNCTYPE(i64, ptr, i64, i64)(executable.address(TICKET_WAIT))
    bump = ctypes.CFUNCTYPE(i64, ptr)(executable.address(TICKET_BUMP))
    return wait, bump

