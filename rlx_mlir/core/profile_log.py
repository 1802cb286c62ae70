"""The event log of an instrumented build (`convert-lir-to-llvm{profile=true}`): where it
lives in the arena buffer and how its events are laid out, read by the profiler
(`rlx_mlir.profiling`) and written by the generated code (`passes/lir_to_llvm/profile.py`).

The log lives in the caller's arena buffer, `log_offset(arena_bytes)` bytes in:

    log + 0                       i64 stride: bytes of one thread's log (0: record nothing)
    log + 64 + part * stride      i64 count, i64 capacity of that thread's log
    ... + 64 + k * 32             event k: i64 site, i64 t0, i64 t1, i64 unused

`count` keeps counting past `capacity` (events past it are dropped), so the reader can
tell. `CLOCK()` returns the time stamp counter, to calibrate it.
"""

from __future__ import annotations

RECORD = "rlx_profile_record"
"""`void rlx_profile_record(ptr log, i64 part, i64 site, i64 t0, i64 t1)`."""
CLOCK = "rlx_profile_clock"
"""`i64 rlx_profile_clock()`: the time stamp counter."""
PROFILE_SITE = "rlx.profile_site"
"""Discardable attribute of an instrumented llvm.call: what it calls (JSON: `kernel`, `op`,
`origin`, the operands' symbolic `shapes` and `element_bytes`, `serial`)."""
LOG_HEADER_BYTES = 64
"""Bytes before the first thread's log, and before the first event of each log."""
EVENT_WORDS = 4
"""i64 words per event."""
EVENT_BYTES = EVENT_WORDS * 8
LOG_ALIGNMENT = 64
"""The log starts at the first multiple of this after the arena plan."""


def log_offset(arena_bytes: int) -> int:
    """Byte offset of the event log in the arena buffer of an instrumented build."""
    return -(-arena_bytes // LOG_ALIGNMENT) * LOG_ALIGNMENT
