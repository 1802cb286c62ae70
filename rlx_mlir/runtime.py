"""Threads for compiled graphs: a team of workers that run the native entry with the GIL
released, each with its thread id, while the calling thread runs part 0.

The generated code does the rest (kernels split their work by thread id, spin barriers
between kernels; see rlx_mlir/codegen/parallel.py), so a call costs one wake-up per
worker, not one per kernel.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Sequence

from rlx_mlir.errors import RlxError

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


class ThreadTeam:
    """`size - 1` daemon workers; `run` executes `entry(*args, part, size, *tail)` on all.

    The entry ends in a barrier when it is split across threads, so when part 0 returns
    every worker's share is written: the caller does not wait for the workers to report
    back (that hand-off through Python would cost another thread wake-up per call).
    Partitioned kernels never fail, so a worker's status is always 0.
    """

    def __init__(self, size: int):
        self.size = size
        self._tasks: list[queue.SimpleQueue] = []
        for part in range(1, size):
            tasks: queue.SimpleQueue = queue.SimpleQueue()
            self._tasks.append(tasks)
            threading.Thread(target=self._work, args=(tasks,), name=f"rlx-worker-{part}",
                             daemon=True).start()

    def _work(self, tasks: queue.SimpleQueue) -> None:
        while True:
            entry, args, part, tail = tasks.get()
            entry(*args, part, self.size, *tail)

    def run(self, entry: Callable[..., int], args: Sequence[object], tail: Sequence[object]) -> int:
        """Run the entry on every thread of the team; thread 0's status."""
        for part, tasks in enumerate(self._tasks, start=1):
            tasks.put((entry, args, part, tail))
        return entry(*args, 0, self.size, *tail)
