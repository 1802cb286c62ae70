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
WORKER_FAILED = 255
"""Status of a worker whose native call raised (it cannot, but a hang would be worse)."""


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
    """`size - 1` daemon workers; `run` executes `entry(*args, part, size, *tail)` on all."""

    def __init__(self, size: int):
        self.size = size
        self._tasks: list[queue.SimpleQueue] = []
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        for part in range(1, size):
            tasks: queue.SimpleQueue = queue.SimpleQueue()
            self._tasks.append(tasks)
            threading.Thread(target=self._work, args=(tasks,), name=f"rlx-worker-{part}",
                             daemon=True).start()

    def _work(self, tasks: queue.SimpleQueue) -> None:
        while True:
            entry, args, part, tail = tasks.get()
            try:
                status = entry(*args, part, self.size, *tail)
            except BaseException:  # noqa: BLE001 - the caller must be released whatever happens
                status = WORKER_FAILED
            self._done.put(status)

    def run(self, entry: Callable[..., int], args: Sequence[object], tail: Sequence[object]) -> int:
        """Run the entry on every thread of the team; the OR of their statuses."""
        for part, tasks in enumerate(self._tasks, start=1):
            tasks.put((entry, args, part, tail))
        status = entry(*args, 0, self.size, *tail)
        for _ in self._tasks:
            status |= self._done.get()
        return status
