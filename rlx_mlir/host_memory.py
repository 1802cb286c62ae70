"""Host memory of compiled graphs: aligned buffers, the slab that holds a build's bound
weights, and handing pages back to the operating system.

Why a slab: a decode step streams every weight once, and a model's weights are hundreds
of arrays of a few hundred KB each. Allocated one by one they sit on 4 KB pages (malloc
never gets them huge pages: numpy advises huge pages only for arrays of 4 MB and more,
and most of these land in reused heap memory), so each core takes a TLB miss every 4 KB
of the stream. In one 2 MB-aligned anonymous mapping advised `MADV_HUGEPAGE` they sit on
2 MB pages where the kernel allows it (Linux with transparent huge pages in `madvise` or
`always` mode); elsewhere the slab is plain memory and nothing else changes.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
from collections.abc import Mapping
from typing import Any

import numpy as np

ARENA_ALIGNMENT = 64
"""Byte alignment of the arena and of every array in a weight slab."""

HUGE_PAGE_BYTES = 2 << 20
"""The huge page size a slab is aligned to (x86-64 Linux)."""

SLAB_MIN_BYTES = 4 << 20
"""Bound weights smaller than this in all stay separate arrays: a slab's first touched
byte costs a whole huge page, too much for the small graphs of tests and examples."""

MADV_DONTNEED = 4
"""madvise's advice that drops a range's pages from the process (Linux)."""


def aligned_empty(nbytes: int) -> np.ndarray:
    """A byte buffer whose data pointer is ARENA_ALIGNMENT-aligned."""
    raw = np.empty(nbytes + ARENA_ALIGNMENT, dtype=np.uint8)
    offset = (-raw.ctypes.data) % ARENA_ALIGNMENT
    return raw[offset : offset + nbytes]


def _padded(nbytes: int) -> int:
    return -(-nbytes // ARENA_ALIGNMENT) * ARENA_ALIGNMENT


def huge_page_buffer(nbytes: int) -> np.ndarray:
    """`nbytes` zeroed bytes at a HUGE_PAGE_BYTES-aligned address of a fresh anonymous
    mapping advised `MADV_HUGEPAGE` (where the platform has it), not yet touched: the
    pages are allocated, huge where the kernel can, as they are first written."""
    mapping = mmap.mmap(-1, nbytes + HUGE_PAGE_BYTES)
    raw = np.frombuffer(mapping, dtype=np.uint8)
    offset = (-raw.ctypes.data) % HUGE_PAGE_BYTES
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if advice is not None and hasattr(mapping, "madvise"):
        with contextlib.suppress(OSError):  # a kernel without transparent huge pages
            start = offset - offset % mmap.PAGESIZE
            mapping.madvise(advice, start, len(mapping) - start)
    return raw[offset : offset + nbytes]


def weight_slab(arrays: Mapping[str, np.ndarray], fill: Any = None) -> dict[str, np.ndarray]:
    """Copies of `arrays` (same shapes and dtypes) side by side in one huge-page buffer,
    each ARENA_ALIGNMENT-aligned; the arrays themselves when they total less than
    SLAB_MIN_BYTES. `fill(name, destination)`, when given, writes each copy instead of a
    plain copy (so a weight can be packed straight into its place)."""
    total = sum(_padded(a.nbytes) for a in arrays.values())
    if total < SLAB_MIN_BYTES:
        return dict(arrays)
    buffer, at, placed = huge_page_buffer(total), 0, {}
    for name, array in arrays.items():
        destination = buffer[at : at + array.nbytes].view(array.dtype).reshape(array.shape)
        if fill is None:
            destination[...] = array
        else:
            fill(name, destination)
        placed[name] = destination
        at += _padded(array.nbytes)
    return placed


def drop_mapped_pages(array: np.ndarray) -> None:
    """Drop the resident pages of a view of a read-only file mapping (a GGUF weight) once
    it has been copied: binding a model then holds at most one weight's file pages next
    to the copies, not the whole file (Gemma 3 270M's peak while loading was 949 MB).
    Only file-backed views: the kernel reads a dropped page back from the file if the
    view is used again, where an anonymous page would come back as zeros."""
    if array.flags.writeable or not _maps_a_file(array) or array.nbytes == 0:
        return
    page = mmap.PAGESIZE
    start = -(-array.ctypes.data // page) * page  # whole pages inside the view only
    end = (array.ctypes.data + array.nbytes) // page * page
    if end > start:
        with contextlib.suppress(OSError, AttributeError, TypeError):  # no libc madvise
            ctypes.CDLL(None, use_errno=True).madvise(
                ctypes.c_void_p(start), ctypes.c_size_t(end - start), MADV_DONTNEED)


def _maps_a_file(array: np.ndarray) -> bool:
    """Whether `array` views a read-only `mmap.mmap` (through numpy bases and
    memoryviews): a copy-on-write mapping may hold changed private pages, which dropping
    would turn back into the file's bytes."""
    base: Any = array
    while isinstance(base, np.ndarray | memoryview):
        base = base.base if isinstance(base, np.ndarray) else base.obj
    return isinstance(base, mmap.mmap) and memoryview(base).readonly


def return_freed_memory() -> None:
    """Hand the heap pages compilation freed back to the OS (glibc keeps them otherwise)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
