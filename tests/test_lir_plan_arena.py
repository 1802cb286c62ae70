"""lir-plan-arena: the pure interval planner (`passes/arena_planner.py`) on random interval
sets (with and without in-place pairs), liveness over the lir schedule, the pass and its
options, in-place reuse (which pairs, numerics on the reference executor's real arena),
and the Llama block (greedy-by-size must need at most half the bytes of the naive plan)."""

from __future__ import annotations

import numpy as np
import pytest
from examples_loader import load_example
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import PassPipeline
from xdsl.utils.exceptions import PassFailedException, VerifyException

from rlx_mlir.core.abi import ARG_NAME
from rlx_mlir.core.reference_kernels import selective_scan
from rlx_mlir.dialects import lir
from rlx_mlir.ir import make_context, parse_module
from rlx_mlir.passes import arena_planner as ap
from rlx_mlir.passes import get_all_passes
from rlx_mlir.passes.lir_plan_arena import LirPlanArenaPass, plan_function, planned_bytes
from rlx_mlir.passes.pipeline_stages import available_passes, make_pass
from rlx_mlir.reference import run_module

# ----------------------------------------------------------------------------- planner


def random_intervals(
    rng: np.random.Generator, aligned_to: int | None
) -> list[tuple[int, int, int]]:
    count = int(rng.integers(0, 40))
    steps = int(rng.integers(1, 60))
    intervals = []
    for _ in range(count):
        start = int(rng.integers(0, steps))
        end = start + int(rng.integers(0, max(1, steps - start)))
        size = int(rng.choice([1, 4, 12, 64, 100, 256, 1000, 4096, int(rng.integers(1, 20000))]))
        if aligned_to is not None:
            size = ap.align_up(size, aligned_to)
        intervals.append((size, start, end))
    return intervals


def assert_safe(
    intervals: list[tuple[int, int, int]],
    offsets: list[int],
    alignment: int,
    inplace: list[tuple[int, int]] = (),  # pyright: ignore[reportArgumentType]
) -> None:
    """Brute force: offsets aligned, and no two simultaneously live buffers share a byte,
    except an in-place pair (src, dst) at one offset, live together only at src's end."""
    assert len(offsets) == len(intervals)
    for offset in offsets:
        assert offset >= 0 and offset % alignment == 0
    for i, (si, ai, bi) in enumerate(intervals):
        for j in range(i):
            sj, aj, bj = intervals[j]
            live_together = ai <= bj and aj <= bi
            share = offsets[i] < offsets[j] + sj and offsets[j] < offsets[i] + si
            for src, dst in ((i, j), (j, i)):
                if (
                    (src, dst) in inplace
                    and offsets[i] == offsets[j]
                    and intervals[src][2] == intervals[dst][1]
                ):
                    share = False
            assert not (live_together and share), (
                intervals[i],
                intervals[j],
                offsets[i],
                offsets[j],
            )


def brute_max_live(intervals: list[tuple[int, int, int]]) -> int:
    steps = max((end for _, _, end in intervals), default=-1) + 1
    return max((sum(s for s, a, b in intervals if a <= t <= b) for t in range(steps)), default=0)


SEEDS = range(300)


@pytest.mark.parametrize("alignment", [1, 16, 64])
def test_random_plans_are_safe_and_bounded(alignment: int) -> None:
    rng = np.random.default_rng(1234 + alignment)
    for _ in SEEDS:
        intervals = random_intervals(rng, aligned_to=alignment)
        greedy = ap.plan_greedy_by_size(intervals, alignment)
        naive = ap.plan_naive(intervals, alignment)
        assert_safe(intervals, greedy, alignment)
        assert_safe(intervals, naive, alignment)
        ap.check_plan(intervals, greedy, alignment)
        lower = ap.max_live_bytes(intervals)
        assert lower == brute_max_live(intervals)
        greedy_bytes = ap.arena_bytes(intervals, greedy)
        naive_bytes = ap.arena_bytes(intervals, naive)
        assert lower <= greedy_bytes <= naive_bytes
        assert naive_bytes == sum(s for s, _, _ in intervals)


def test_random_unaligned_sizes_are_safe() -> None:
    """Sizes need not be multiples of the alignment: offsets still are, no overlap."""
    rng = np.random.default_rng(99)
    for _ in SEEDS:
        intervals = random_intervals(rng, aligned_to=None)
        for plan in (ap.plan_greedy_by_size, ap.plan_naive):
            offsets = plan(intervals, 64)
            assert_safe(intervals, offsets, 64)
            assert ap.arena_bytes(intervals, offsets) >= ap.max_live_bytes(intervals)


def test_disjoint_lifetimes_share_everything() -> None:
    intervals = [(256, 0, 1), (128, 2, 3), (256, 4, 4), (64, 5, 9)]
    assert ap.plan_greedy_by_size(intervals, 64) == [0, 0, 0, 0]
    assert ap.plan_naive(intervals, 64) == [0, 256, 384, 640]


def test_best_fit_takes_the_smallest_gap() -> None:
    # G1 (256 B) and G2 die at step 1; P1, P2, P3 live all along. Placed first (larger or
    # earlier): G1 [0, 256), P1 [256, 320), G2 [320, 384), P2 [384, 448), P3 [448, 512).
    # X (64 B, live [5, 6]) sees gaps [0, 256) and [320, 384): best fit takes the
    # smaller one (first fit would take 0).
    intervals = [(256, 0, 1), (64, 0, 9), (64, 0, 1), (64, 0, 9), (64, 0, 9), (64, 5, 6)]
    offsets = ap.plan_greedy_by_size(intervals, 64)
    assert offsets == [0, 256, 320, 384, 448, 320]
    assert_safe(intervals, offsets, 64)
    assert ap.arena_bytes(intervals, offsets) == 512 == ap.max_live_bytes(intervals)


def test_sizes_sorted_largest_first_with_ties_by_start() -> None:
    # 128 first (at 0), then the 64 starting earlier (above it), then the last 64, which
    # is not live with the 128 one and takes its bytes.
    intervals = [(64, 2, 3), (64, 0, 3), (128, 1, 1)]
    assert ap.plan_greedy_by_size(intervals, 64) == [0, 128, 0]


def test_max_live_bytes_and_empty() -> None:
    assert ap.max_live_bytes([]) == 0
    assert ap.arena_bytes([], []) == 0
    assert ap.plan_greedy_by_size([], 64) == []
    assert ap.max_live_bytes([(10, 0, 2), (20, 2, 3), (40, 3, 3)]) == 60
    assert ap.align_up(0, 64) == 0 and ap.align_up(65, 64) == 128 and ap.align_up(64, 64) == 64


@pytest.mark.parametrize("alignment", [0, 3, 48, -64])
def test_bad_alignment(alignment: int) -> None:
    with pytest.raises(ValueError, match="alignment"):
        ap.plan_greedy_by_size([(4, 0, 0)], alignment)


def random_inplace(
    rng: np.random.Generator, alignment: int
) -> tuple[list[tuple[int, int, int]], list[tuple[int, int]]]:
    """Random intervals plus chains of equal-size buffers, each starting where the previous
    one ends (and live over two steps at least), linked by in-place pairs (listed in a
    shuffled order)."""
    intervals = random_intervals(rng, aligned_to=alignment)
    pairs: list[tuple[int, int]] = []
    for _ in range(int(rng.integers(0, 6))):
        size = ap.align_up(int(rng.integers(1, 5000)), alignment)
        step = int(rng.integers(0, 50))
        previous = None
        for _ in range(int(rng.integers(2, 5))):
            end = step + int(rng.integers(1, 6))
            intervals.append((size, step, end))
            if previous is not None:
                pairs.append((previous, len(intervals) - 1))
            previous, step = len(intervals) - 1, end
    order = rng.permutation(len(pairs))
    return intervals, [pairs[i] for i in order]


def brute_max_live_merged(
    intervals: list[tuple[int, int, int]], pairs: list[tuple[int, int]]
) -> int:
    """Most bytes live at one step, an in-place pair live together at step k counted once."""
    steps = max((end for _, _, end in intervals), default=-1) + 1
    peak = 0
    for t in range(steps):
        live = {i for i, (_, a, b) in enumerate(intervals) if a <= t <= b}
        # The src of a pair meeting at t shares its bytes with the dst (equal sizes here).
        live -= {src for src, dst in pairs if src in live and dst in live}
        peak = max(peak, sum(intervals[i][0] for i in live))
    return peak


@pytest.mark.parametrize("alignment", [1, 64])
def test_random_inplace_plans_are_safe_and_bounded(alignment: int) -> None:
    rng = np.random.default_rng(77 + alignment)
    for _ in SEEDS:
        intervals, pairs = random_inplace(rng, alignment)
        offsets = ap.plan_greedy_by_size(intervals, alignment, pairs)
        assert_safe(intervals, offsets, alignment, pairs)
        ap.check_plan(intervals, offsets, alignment, pairs)
        for src, dst in pairs:
            assert offsets[src] == offsets[dst]
        lower = ap.max_live_bytes(intervals, pairs)
        assert lower == brute_max_live_merged(intervals, pairs)
        assert lower <= ap.max_live_bytes(intervals)
        assert lower <= ap.arena_bytes(intervals, offsets)
        if pairs:
            # Without the pairs the plan is (generally) not safe: check_plan says so.
            with pytest.raises(ValueError, match="share bytes"):
                ap.check_plan(intervals, offsets, alignment)


def test_merge_inplace() -> None:
    intervals = [(64, 0, 2), (64, 2, 3), (128, 2, 2), (64, 3, 5)]
    group_of, merged = ap.merge_inplace(intervals, [(1, 3), (0, 1)])
    assert group_of == [0, 0, 1, 0]
    assert merged == [ap.Interval(64, 0, 5), ap.Interval(128, 2, 2)]
    assert ap.plan_greedy_by_size(intervals, 64, [(0, 1), (1, 3)]) == [128, 128, 0, 128]
    assert ap.max_live_bytes(intervals, [(0, 1), (1, 3)]) == 192
    assert ap.max_live_bytes(intervals) == 256
    with pytest.raises(ValueError, match="must end where"):
        ap.merge_inplace(intervals, [(0, 3)])
    with pytest.raises(ValueError, match="two pairs"):
        ap.merge_inplace([(4, 0, 1), (4, 1, 2), (4, 1, 3)], [(0, 1), (0, 2)])
    with pytest.raises(ValueError, match="distinct"):
        ap.merge_inplace(intervals, [(1, 1)])
    # A chain through a buffer live at one step: its neighbours meet there unpaired.
    with pytest.raises(ValueError, match="one step only"):
        ap.merge_inplace([(4, 0, 1), (4, 1, 1), (4, 1, 2)], [(0, 1), (1, 2)])
    # check_plan accepts the pair only at one offset and only where src ends.
    ap.check_plan([(64, 0, 1), (64, 1, 2)], [0, 0], 64, [(0, 1)])
    with pytest.raises(ValueError, match="share bytes"):
        ap.check_plan([(64, 0, 1), (64, 1, 2)], [0, 0], 64, [(1, 0)])
    with pytest.raises(ValueError, match="share bytes"):
        ap.check_plan([(128, 0, 1), (128, 1, 2)], [0, 64], 64, [(0, 1)])


def test_bad_interval() -> None:
    with pytest.raises(ValueError, match="interval 0"):
        ap.plan_naive([(4, 3, 1)])
    with pytest.raises(ValueError, match="share bytes"):
        ap.check_plan([(64, 0, 1), (64, 1, 2)], [0, 0], 64)


# ----------------------------------------------------------------------------- the pass

CHAIN = """
func.func @chain(%x: memref<16xf32>, %out: memref<4x4xf32>) {
  %a = lir.alloc : memref<16xf32>
  lir.elementwise exp ins(%x : memref<16xf32>) outs(%a : memref<16xf32>)
  %v = lir.view %a[0] : memref<16xf32> -> memref<4x4xf32>
  %w = lir.view %v[4] : memref<4x4xf32> -> memref<2x4xf32>
  %b = lir.alloc : memref<16xf32>
  lir.elementwise neg ins(%a : memref<16xf32>) outs(%b : memref<16xf32>)
  %c = lir.alloc : memref<100xf32>
  lir.elementwise abs ins(%x : memref<16xf32>) outs(%b : memref<16xf32>)
  %d = lir.alloc : memref<4x4xf32>
  lir.elementwise sqrt ins(%v : memref<4x4xf32>) outs(%d : memref<4x4xf32>)
  lir.copy ins(%d : memref<4x4xf32>) outs(%out : memref<4x4xf32>)
  func.return
}
"""


def the_function(module: ModuleOp) -> func.FuncOp:
    (fn,) = [op for op in module.ops if isinstance(op, func.FuncOp)]
    return fn


def test_plan_function_liveness_through_views() -> None:
    plan = plan_function(the_function(parse_module(CHAIN)), 64, "greedy-by-size")
    # Positions after the pass (arena = 0): %a 1, exp 2, %v 3, %w 4, %b 5, neg 6, %c 7,
    # abs 8, %d 9, sqrt 10, copy 11. %a is read through %v at 10; %w is never used.
    assert [tuple(iv) for iv in plan.intervals] == [
        (64, 2, 10),
        (64, 6, 8),
        (448, 7, 7),
        (64, 10, 11),
    ]
    assert plan.sizes == (64, 64, 448, 64)
    # %c (largest) at 0, %a above it, %b above both, %d (live with %a only) at 0.
    assert plan.offsets == (448, 512, 0, 0)
    assert plan.max_live_bytes == 576 == plan.arena_bytes
    assert plan.naive_bytes == 640


TWO_OUTS = """
func.func @two_outs(%x: memref<1x4x8xf32> {rlx.name = "x", rlx.role = "input"},
                    %a: memref<8x3xf32> {rlx.name = "a", rlx.role = "input"},
                    %b: memref<1x4x3xf32> {rlx.name = "b", rlx.role = "input"},
                    %o: memref<1x4x8xf32> {rlx.name = "out0", rlx.role = "output"},
                    %s: memref<1x8x3xf32> {rlx.name = "out1", rlx.role = "output"}) {
  %y = lir.alloc : memref<1x4x8xf32>
  %f = lir.alloc : memref<1x8x3xf32>
  lir.selective_scan ins(%x, %x, %a, %b, %b : memref<1x4x8xf32>, memref<1x4x8xf32>, memref<8x3xf32>, memref<1x4x3xf32>, memref<1x4x3xf32>) outs(%y, %f : memref<1x4x8xf32>, memref<1x8x3xf32>) return_state
  %e = lir.alloc : memref<1x4x8xf32>
  lir.elementwise exp ins(%y : memref<1x4x8xf32>) outs(%e : memref<1x4x8xf32>)
  lir.elementwise neg ins(%e : memref<1x4x8xf32>) outs(%o : memref<1x4x8xf32>)
  lir.copy ins(%f : memref<1x8x3xf32>) outs(%s : memref<1x8x3xf32>)
  func.return
}
"""


def test_every_out_of_a_kernel_is_written_by_it() -> None:
    """A kernel with two outs (a sequence op's output and final state) starts the life of
    both buffers: they are live together from it, so they share no byte; the state lives
    on to its copy while the output dies into the exp (which may take its bytes)."""
    module = parse_module(TWO_OUTS)
    plan = plan_function(the_function(module), 64, "greedy-by-size")
    # Positions after the pass: %y 1, %f 2, scan 3, %e 4, exp 5, neg 6, copy 7.
    assert [tuple(iv) for iv in plan.intervals] == [(128, 3, 5), (128, 3, 7), (128, 5, 6)]
    (y, f), e = plan.offsets[:2], plan.offsets[2]
    assert y != f and e != f
    LirPlanArenaPass().apply(make_context(), module)
    module.verify()  # the lir.arena verifier re-proves the plan
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 4, 8)).astype(np.float32)
    a = -rng.uniform(0.5, 2.0, (8, 3)).astype(np.float32)
    b = rng.standard_normal((1, 4, 3)).astype(np.float32)
    want_y, want_state = selective_scan(x, x, a, b, b, return_state=True)
    got = run_module(module, {"x": x, "a": a, "b": b})
    np.testing.assert_allclose(got[0], -np.exp(want_y), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], want_state, rtol=1e-5, atol=1e-6)


def test_pass_replaces_allocs_by_slots() -> None:
    module = parse_module(CHAIN)
    LirPlanArenaPass().apply(make_context(), module)
    module.verify()
    ops = list(the_function(module).body.block.ops)
    arena = ops[0]
    assert isinstance(arena, lir.ArenaOp)
    assert (arena.size.value.data, arena.alignment.value.data) == (576, 64)
    assert arena.strategy.data == "greedy-by-size"
    assert arena.max_live_bytes is not None and arena.max_live_bytes.value.data == 576
    slots = [op for op in ops if isinstance(op, lir.SlotOp)]
    assert [
        (s.offset.value.data, s.live_start.value.data, s.live_end.value.data) for s in slots
    ] == [
        (448, 2, 10),
        (512, 6, 8),
        (0, 7, 7),
        (0, 10, 11),
    ]
    for s in slots:
        assert s.arena is arena.result
    # Live ranges count positions in the final body: the first writer of each slot.
    used = [slots[0], slots[1], slots[3]]  # %c is never used: live at its own position 7
    assert [min(ops.index(u.operation) for u in s.result.uses) for s in used] == [2, 6, 10]
    assert ops.index(slots[2]) == 7
    assert not [op for op in ops if isinstance(op, lir.AllocOp)]


def test_pass_options() -> None:
    module = parse_module(CHAIN)
    LirPlanArenaPass(alignment=256, strategy="naive").apply(make_context(), module)
    module.verify()
    arena = next(iter(the_function(module).body.block.ops))
    assert isinstance(arena, lir.ArenaOp)
    assert (arena.size.value.data, arena.alignment.value.data) == (1280, 256)
    assert arena.strategy.data == "naive"
    slots = [op for op in the_function(module).walk() if isinstance(op, lir.SlotOp)]
    assert [s.offset.value.data for s in slots] == [0, 256, 512, 1024]


@pytest.mark.parametrize(
    "options, message",
    [
        ({"alignment": 48}, "alignment"),
        ({"alignment": 0}, "alignment"),
        ({"strategy": "best"}, "strategy"),
    ],
)
def test_bad_options(options: dict[str, object], message: str) -> None:
    with pytest.raises(PassFailedException, match=message):
        LirPlanArenaPass(**options).apply(make_context(), parse_module(CHAIN))  # pyright: ignore[reportArgumentType]


INPLACE = """
func.func @f(%g: memref<4x8xf32> {rlx.name = "g", rlx.role = "input"},
             %u: memref<4x8xf32> {rlx.name = "u", rlx.role = "input"},
             %r: memref<8xf32> {rlx.name = "r", rlx.role = "input"},
             %out: memref<4x8xf32> {rlx.name = "out0", rlx.role = "output"}) {
  %gate = lir.alloc : memref<4x8xf32>
  lir.elementwise silu ins(%g : memref<4x8xf32>) outs(%gate : memref<4x8xf32>)
  %up = lir.alloc : memref<4x8xf32>
  lir.elementwise exp ins(%u : memref<4x8xf32>) outs(%up : memref<4x8xf32>)
  %prod = lir.alloc : memref<4x8xf32>
  lir.elementwise mul ins(%gate, %up : memref<4x8xf32>, memref<4x8xf32>) outs(%prod : memref<4x8xf32>)
  %sum = lir.alloc : memref<4x8xf32>
  lir.fused_elementwise ins(%r, %prod : memref<8xf32>, memref<4x8xf32>) outs(%sum : memref<4x8xf32>) {
  ^bb0(%x: f32, %y: f32):
    %s = arith.addf %x, %y : f32
    %t = arith.mulf %s, %y : f32
    lir.yield %t : f32
  }
  %row = lir.view %sum[8] : memref<4x8xf32> -> memref<8xf32>
  %bad = lir.alloc : memref<4x8xf32>
  lir.elementwise add ins(%sum, %row : memref<4x8xf32>, memref<8xf32>) outs(%bad : memref<4x8xf32>)
  %neg = lir.alloc : memref<4x8xf32>
  lir.elementwise neg ins(%bad : memref<4x8xf32>) outs(%neg : memref<4x8xf32>)
  lir.elementwise sub ins(%neg, %up : memref<4x8xf32>, memref<4x8xf32>) outs(%out : memref<4x8xf32>)
  func.return
}
"""
"""In place: mul over %gate (not %up, still read at the end), the fused body over %prod,
%neg over %bad. Refused: %bad over %sum (another input is a view of %sum)."""


def test_inplace_pairs_and_option() -> None:
    fn = the_function(parse_module(INPLACE))
    plan = plan_function(fn)
    assert plan.inplace == ((0, 2), (2, 3), (4, 5))
    assert plan.offsets[0] == plan.offsets[2] == plan.offsets[3]
    assert plan.offsets[4] == plan.offsets[5] != plan.offsets[3]
    assert len({plan.offsets[0], plan.offsets[1], plan.offsets[4]}) == 3
    assert (plan.arena_bytes, plan.max_live_bytes, plan.naive_bytes) == (384, 384, 768)
    off = plan_function(fn, inplace=False)
    assert off.inplace == () and off.arena_bytes == off.max_live_bytes == 384
    assert off.offsets[0] != off.offsets[2] != off.offsets[3]
    naive = plan_function(fn, strategy="naive")
    assert naive.inplace == () and naive.arena_bytes == naive.naive_bytes == 768


@pytest.mark.parametrize("options", [{}, {"inplace": False}, {"strategy": "naive"}])
def test_inplace_numerics_on_a_real_arena(options: dict[str, object]) -> None:
    """The reference executor runs the planned kernels on numpy views of one arena: the
    planned function computes exactly (bit for bit) what the unplanned one does."""
    rng = np.random.default_rng(5)
    inputs = {
        "g": rng.standard_normal((4, 8)).astype(np.float32),
        "u": rng.standard_normal((4, 8)).astype(np.float32),
        "r": rng.standard_normal(8).astype(np.float32),
    }
    module = parse_module(INPLACE)
    (expected,) = run_module(module, inputs)
    LirPlanArenaPass(**options).apply(make_context(), module)  # pyright: ignore[reportArgumentType]
    module.verify()
    (got,) = run_module(module, inputs)
    np.testing.assert_array_equal(got, expected)
    assert np.isfinite(got).all()


def test_verifier_rejects_inplace_with_a_view_operand() -> None:
    """A hand-made plan putting %bad over %sum (the refused pair) does not verify."""
    module = parse_module(INPLACE)
    LirPlanArenaPass().apply(make_context(), module)
    slots = [op for op in the_function(module).walk() if isinstance(op, lir.SlotOp)]
    sum_slot, bad_slot = slots[3], slots[4]
    assert sum_slot.live_end.value.data == bad_slot.live_start.value.data
    bad_slot.offset = sum_slot.offset
    with pytest.raises(VerifyException, match="slots overlap"):
        module.verify()


def test_function_without_allocs_gets_no_arena() -> None:
    text = """
    func.func @f(%x: memref<3xf32>, %o: memref<3xf32>) {
      lir.copy ins(%x : memref<3xf32>) outs(%o : memref<3xf32>)
      func.return
    }
    """
    module = parse_module(text)
    before = str(module)
    LirPlanArenaPass().apply(make_context(), module)
    assert str(module) == before
    plan = plan_function(the_function(module))
    assert (plan.arena_bytes, plan.naive_bytes, plan.max_live_bytes) == (0, 0, 0)
    assert planned_bytes(the_function(module)) == (0, 0, 0)


def test_pass_is_registered() -> None:
    assert get_all_passes()["lir-plan-arena"]() is LirPlanArenaPass
    assert LirPlanArenaPass.name == "lir-plan-arena"


# ----------------------------------------------------------------------------- llama block


FULL_PIPELINE = "convert-hir-to-mir,canonicalize,cse,mir-fuse,convert-mir-to-lir"
"""The issue's pipeline up to lir-plan-arena."""


def run_pipeline(module: ModuleOp, spec: str) -> None:
    PassPipeline.parse_spec(available_passes(), spec).apply(make_context(), module)


def llama_mlir() -> ModuleOp:
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "examples" / "llama_block.mlir"
    return parse_module(path.read_text(), str(path))


def test_llama_block_full_pipeline_inplace() -> None:
    """examples/llama_block.mlir through convert-hir-to-mir, canonicalize, cse, mir-fuse,
    convert-mir-to-lir: greedy-by-size with in-place reuse needs at most half the naive
    bytes (the SwiGLU mul writes over the gate, the residual adds over their inputs)."""
    module = llama_mlir()
    run_pipeline(module, FULL_PIPELINE)
    module.verify()
    fn = the_function(module)
    greedy = plan_function(fn)
    no_inplace = plan_function(fn, inplace=False)
    naive = plan_function(fn, strategy="naive")
    print(
        f"llama block ({FULL_PIPELINE}): naive {naive.arena_bytes} B, greedy-by-size "
        f"{greedy.arena_bytes} B ({greedy.arena_bytes / naive.arena_bytes:.3f} of naive), "
        f"lower bound {greedy.max_live_bytes} B; without in-place {no_inplace.arena_bytes} B "
        f"(lower bound {no_inplace.max_live_bytes} B)"
    )
    assert naive.arena_bytes == naive.naive_bytes == greedy.naive_bytes
    assert greedy.arena_bytes <= 0.5 * naive.arena_bytes
    assert greedy.max_live_bytes <= greedy.arena_bytes < no_inplace.arena_bytes
    # the writer of a fresh alloc is the first kernel using it (a kernel with several outs,
    # lir.shared_input_matmul, does not have them all last)
    kernels = {
        alloc.result: next(op for op in fn.walk()
                           if isinstance(op, lir.KernelOp) and alloc.result in op.operands)
        for alloc in greedy.allocs
    }
    writers = [kernels[greedy.allocs[dst].result] for _, dst in greedy.inplace]
    assert any(isinstance(k, lir.ElementwiseOp) and k.fn.data == "mul" for k in writers)
    for kernel in writers:
        assert isinstance(kernel, lir.ElementwiseOp | lir.FusedElementwiseOp)

    LirPlanArenaPass().apply(make_context(), module)
    module.verify()  # the lir.arena verifier accepts exactly these in-place pairs
    assert planned_bytes(fn) == (greedy.arena_bytes, naive.naive_bytes, greedy.max_live_bytes)


def test_llama_block_full_pipeline_numerics() -> None:
    """The llama block before (hir) and after planning in place (lir on the reference
    executor's real arena) agree; in-place and separate buffers agree bit for bit."""
    hir_module = llama_mlir()
    fn = the_function(hir_module)
    rng = np.random.default_rng(1)
    inputs = {}
    for arg, attrs in zip(fn.args, fn.arg_attrs.data if fn.arg_attrs else (), strict=True):
        name = attrs.data[ARG_NAME].data  # pyright: ignore[reportAttributeAccessIssue]
        shape = tuple(arg.type.get_shape())  # pyright: ignore[reportAttributeAccessIssue]
        inputs[name] = (rng.standard_normal(shape) * 0.1).astype(np.float32)
    (expected,) = run_module(hir_module, inputs)
    results = {}
    for spec in (
        FULL_PIPELINE,
        FULL_PIPELINE + ",lir-plan-arena",
        FULL_PIPELINE + ",lir-plan-arena{inplace=false}",
    ):
        module = llama_mlir()
        run_pipeline(module, spec)
        module.verify()
        (results[spec],) = run_module(module, inputs)
        np.testing.assert_allclose(results[spec], expected, rtol=1e-4, atol=1e-5)
    for got in results.values():
        np.testing.assert_array_equal(got, results[FULL_PIPELINE])


def lower_llama(fuse: bool) -> ModuleOp:
    module = load_example("llama_block").build_llama_block().to_module()
    ctx = make_context()
    for name in ("convert-hir-to-mir", *(["mir-fuse"] if fuse else []), "convert-mir-to-lir"):
        make_pass(name).apply(ctx, module)
    module.verify()
    return module


@pytest.mark.parametrize("fuse", [False, True], ids=["unfused", "fused"])
def test_llama_block_arena(fuse: bool) -> None:
    """Unfused (hir -> mir -> lir): greedy-by-size needs at most half the naive bytes.
    Fused, there are fewer (and relatively larger) intermediates; greedy stays at the
    lower bound there too."""
    module = lower_llama(fuse)
    fn = the_function(module)
    greedy = plan_function(fn, 64, "greedy-by-size")
    naive = plan_function(fn, 64, "naive")
    print(
        f"llama block ({'fused' if fuse else 'unfused'}): naive {naive.arena_bytes} B, "
        f"greedy-by-size {greedy.arena_bytes} B, lower bound {greedy.max_live_bytes} B"
    )
    assert naive.arena_bytes == naive.naive_bytes == greedy.naive_bytes
    assert greedy.max_live_bytes <= greedy.arena_bytes <= naive.arena_bytes
    assert greedy.arena_bytes <= 1.1 * greedy.max_live_bytes
    if not fuse:
        assert greedy.arena_bytes <= naive.arena_bytes // 2

    LirPlanArenaPass().apply(make_context(), module)
    module.verify()  # the lir.arena verifier re-proves the plan
    (arena,) = [op for op in fn.walk() if isinstance(op, lir.ArenaOp)]
    assert arena.size.value.data == greedy.arena_bytes
    assert planned_bytes(fn) == (greedy.arena_bytes, naive.naive_bytes, greedy.max_live_bytes)
    assert not [op for op in fn.walk() if isinstance(op, lir.AllocOp)]


def test_llama_block_numerics_with_arena() -> None:
    """The planned lir block computes what the hir block does (the reference executor
    poisons the arena, so a wrong plan would show)."""
    example = load_example("llama_block")
    graph = example.build_llama_block(
        seq=8, d_model=64, num_heads=4, num_kv_heads=2, head_dim=16, d_ff=96
    )
    module = graph.to_module()
    rng = np.random.default_rng(0)
    fn = the_function(module)
    inputs = {}
    for arg, attrs in zip(fn.args, fn.arg_attrs.data if fn.arg_attrs else (), strict=True):
        name = attrs.data[ARG_NAME].data  # pyright: ignore[reportAttributeAccessIssue]
        shape = tuple(arg.type.get_shape())  # pyright: ignore[reportAttributeAccessIssue]
        inputs[name] = (rng.standard_normal(shape) * 0.3).astype(np.float32)
    expected = run_module(module, inputs)
    ctx = make_context()
    lowered = graph.to_module()
    for name in ("convert-hir-to-mir", "convert-mir-to-lir", "lir-plan-arena"):
        make_pass(name).apply(ctx, lowered)
    lowered.verify()
    got = run_module(lowered, inputs)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-4, atol=1e-5)
