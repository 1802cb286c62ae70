"""Bound weights in one huge-page slab (`rlx_mlir.host_memory`): same numbers, one
2 MB-aligned mapping advised for huge pages, read-only, small graphs left alone."""

from __future__ import annotations

import mmap
import sys
from pathlib import Path

import numpy as np
import pytest

import rlx_mlir as rlx
from rlx_mlir.host_memory import ARENA_ALIGNMENT, HUGE_PAGE_BYTES, SLAB_MIN_BYTES, weight_slab


def _vma_flags(address: int) -> list[str]:
    """VmFlags of the mapping holding `address` in /proc/self/smaps."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split(" ", 1)[0]
        if "-" in head and all(c in "0123456789abcdef-" for c in head):
            start, end = (int(x, 16) for x in head.split("-"))
            inside = start <= address < end
        elif inside and line.startswith("VmFlags:"):
            return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


def test_small_sets_stay_separate_arrays():
    arrays = {"a": np.ones((3, 5), np.float32), "b": np.arange(7, dtype=np.uint8)}
    placed = weight_slab(arrays)
    assert all(placed[name] is arrays[name] for name in arrays)


def test_a_slab_holds_copies_side_by_side_aligned():
    rng = np.random.default_rng(0)
    arrays = {"w1": rng.standard_normal((1100, 1001)).astype(np.float32),
              "odd": rng.integers(0, 255, 4099, dtype=np.uint8),
              "w2": rng.standard_normal((3, 777)).astype(np.float32)}
    assert sum(a.nbytes for a in arrays.values()) >= SLAB_MIN_BYTES
    placed = weight_slab(arrays)
    first = placed["w1"].ctypes.data
    assert first % HUGE_PAGE_BYTES == 0
    for name, array in arrays.items():
        copy = placed[name]
        assert copy is not array and copy.shape == array.shape and copy.dtype == array.dtype
        np.testing.assert_array_equal(copy, array)
        assert copy.ctypes.data % ARENA_ALIGNMENT == 0
        assert first <= copy.ctypes.data < first + (5 << 20)  # one buffer, in order
    assert placed["w1"].ctypes.data < placed["odd"].ctypes.data < placed["w2"].ctypes.data


def test_fill_writes_each_place():
    arrays = {"x": np.zeros(SLAB_MIN_BYTES, np.uint8)}
    placed = weight_slab(arrays, lambda name, dst: dst.fill(7))
    assert placed["x"].min() == placed["x"].max() == 7


@pytest.mark.skipif(not sys.platform.startswith("linux") or not hasattr(mmap, "MADV_HUGEPAGE"),
                    reason="transparent huge pages are a Linux feature")
def test_a_slab_is_advised_for_huge_pages():
    placed = weight_slab({"w": np.ones(SLAB_MIN_BYTES, np.uint8)})
    assert "hg" in _vma_flags(placed["w"].ctypes.data)


def test_a_compiled_graph_reads_its_weights_from_one_read_only_slab():
    rng = np.random.default_rng(1)
    k, n = 1024, 1031  # 4.2 MB of f32 weights over two params, n not a vector multiple
    w1 = rng.standard_normal((k, n)).astype(np.float32)
    w2 = rng.standard_normal((n, 5)).astype(np.float32)
    g = rlx.Graph("slab")
    x = g.input("x", (3, k))
    h = g.matmul(x, g.param("w1", w1.shape))
    g.output(g.matmul(h, g.param("w2", w2.shape)))
    fn = rlx.jit(g, params={"w1": w1, "w2": w2}, threads=2)
    xs = rng.standard_normal((3, k)).astype(np.float32)
    np.testing.assert_allclose(fn(xs), xs @ w1 @ w2, rtol=2e-4, atol=2e-2)
    bound = fn._bound
    assert not bound["w1"].flags.writeable and not bound["w2"].flags.writeable
    assert bound["w1"].ctypes.data % HUGE_PAGE_BYTES == 0
    assert 0 < bound["w2"].ctypes.data - bound["w1"].ctypes.data < w1.nbytes + ARENA_ALIGNMENT
    expected = xs @ w1 @ w2
    w1[:] = 0  # the caller's arrays were copied: changing them changes nothing
    np.testing.assert_allclose(fn(xs), expected, rtol=2e-4, atol=2e-2)
