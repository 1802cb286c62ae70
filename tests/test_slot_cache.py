"""Batched decoding's two ops (SPEC "Serving and batched decoding"):
`g.cache_append(cache, rows, slots=, positions=)` (`mir.cache_scatter`) writes row r into
slot cache[slots[r], positions[r]] in place, and `g.slot_attention` lets row r attend its
slot's keys up to positions[r] (a sliding window optionally).

One compiled model per configuration runs several calls in a row (the caches persist):
prefill chunks (several rows of one slot at consecutive positions) mixed with decode rows
of other slots, R in {8, 3, 1, 8}, slots restarted at position 0 over stale rows. Each
call's output and the caches are checked against a numpy oracle written here and the
reference executor; the attention also against `g.attention(mask_kind="causal")` over one
slot's rows. Run-time errors (a slot or position out of range) and build-time errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

import rlx_mlir as rlx
from rlx_mlir.core.errors import ArgumentError, DTypeError, RlxError, ShapeError
from rlx_mlir.dialects import lir
from rlx_mlir.passes.lir_parallelize import PARALLEL_MIN_WORK, splits

RTOL, ATOL = 2e-5, 2e-5
N_SLOTS = 3

CONFIGS = {
    # name: (num_heads, num_kv_heads, head_dim, capacity, window)
    "d8-kv24-cap5": (3, 3, 8, 5, None),
    "d16-gqa2-cap17-w4": (4, 2, 16, 17, 4),
    "d64-gqa3-cap40": (3, 1, 64, 40, None),
    "d5-gqa2-cap17-w1": (4, 2, 5, 17, 1),
}

CALLS = [8, 3, 1, 8]
"""Rows per call; each call is filled by `schedule`."""


def schedule(rows: int, next_position: list[int], capacity: int,
             rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(slots, positions) of one call of `rows` rows: a prefill chunk of a random slot
    (about half the rows, consecutive positions) and single decode rows of the others; a
    slot that would run past the capacity restarts at 0 (a new sequence over stale rows)."""
    chunk = max(1, rows // 2) if rows > 1 else 1
    plan = [(int(rng.integers(N_SLOTS)), chunk)]
    plan += [(int(rng.integers(N_SLOTS)), 1) for _ in range(rows - chunk)]
    slots, positions = [], []
    for slot, count in plan:
        count = min(count, capacity)
        if next_position[slot] + count > capacity:
            next_position[slot] = 0
        for _ in range(count):
            slots.append(slot)
            positions.append(next_position[slot])
            next_position[slot] += 1
    while len(slots) < rows:  # a chunk cut by a small capacity: decode rows of slot 0
        if next_position[0] >= capacity:
            next_position[0] = 0
        slots.append(0)
        positions.append(next_position[0])
        next_position[0] += 1
    return np.array(slots, np.int32), np.array(positions, np.int32)


def oracle_attention(q, k_cache, v_cache, slots, positions, heads, kv_heads, dim, window):
    """Row r, head h: softmax over the keys j in [lo, positions[r]] of slot slots[r]."""
    out = np.zeros((len(slots), heads * dim))
    group = heads // kv_heads
    for r, (slot, position) in enumerate(zip(slots, positions, strict=True)):
        lo = 0 if window is None else max(0, position - window + 1)
        for h in range(heads):
            kv = slice((h // group) * dim, (h // group + 1) * dim)
            keys = k_cache[slot, lo:position + 1, kv].astype(np.float64)
            values = v_cache[slot, lo:position + 1, kv].astype(np.float64)
            scores = keys @ q[r, h * dim:(h + 1) * dim].astype(np.float64) / math.sqrt(dim)
            p = np.exp(scores - scores.max())
            out[r, h * dim:(h + 1) * dim] = p @ values / p.sum()
    return out


def slot_graph(heads: int, kv_heads: int, dim: int, capacity: int,
               window: int | None) -> rlx.Graph:
    """q, k, v rows [R, ·] of a symbolic R with their slots and positions: k and v go into
    the slot caches, the attention reads them back."""
    g = rlx.Graph("slots")
    width = kv_heads * dim
    q = g.input("q", ("R", heads * dim))
    slots = g.input("slots", ("R",), dtype="i32")
    positions = g.input("positions", ("R",), dtype="i32")
    keys = g.cache_append(g.state("k_cache", (N_SLOTS, capacity, width)),
                          g.input("k", ("R", width)), slots=slots, positions=positions)
    values = g.cache_append(g.state("v_cache", (N_SLOTS, capacity, width)),
                            g.input("v", ("R", width)), slots=slots, positions=positions)
    g.output(g.slot_attention(q, keys, values, slots, positions, num_heads=heads,
                              head_dim=dim, num_kv_heads=kv_heads, window=window))
    return g


def call_data(rng: np.random.Generator, slots: np.ndarray, positions: np.ndarray,
              heads: int, kv_heads: int, dim: int) -> dict[str, np.ndarray]:
    rows = len(slots)

    def normal(width: int) -> np.ndarray:
        return rng.standard_normal((rows, width)).astype(np.float32)

    return dict(q=normal(heads * dim), k=normal(kv_heads * dim), v=normal(kv_heads * dim),
                slots=slots, positions=positions)


@pytest.fixture(scope="module", params=[(c, t) for c in CONFIGS for t in (1, 2)],
                ids=[f"{c}-threads{t}" for c in CONFIGS for t in (1, 2)])
def run(request):
    """The calls of one configuration through a compiled model and the reference
    executor: [(data, compiled output, reference output, oracle output)], the final
    caches of each, and the configuration."""
    name, threads = request.param
    heads, kv_heads, dim, capacity, window = CONFIGS[name]
    model = rlx.jit(slot_graph(heads, kv_heads, dim, capacity, window), threads=threads)
    reference = rlx.reference(slot_graph(heads, kv_heads, dim, capacity, window))
    rng = np.random.default_rng(capacity * 10 + dim)
    caches = {n: np.zeros((N_SLOTS, capacity, kv_heads * dim), np.float32)
              for n in ("k_cache", "v_cache")}
    next_position = [0] * N_SLOTS
    results = []
    for rows in CALLS:
        slots, positions = schedule(rows, next_position, capacity, rng)
        data = call_data(rng, slots, positions, heads, kv_heads, dim)
        caches["k_cache"][slots, positions] = data["k"]
        caches["v_cache"][slots, positions] = data["v"]
        want = oracle_attention(data["q"], caches["k_cache"], caches["v_cache"], slots,
                                positions, heads, kv_heads, dim, window)
        results.append((data, model(**data), reference(**data), want))
    return dict(results=results, model=model, reference=reference, oracle=caches,
                config=CONFIGS[name], threads=threads)


def test_outputs_match_the_oracle_and_the_reference(run):
    for i, (_, got, ref, want) in enumerate(run["results"]):
        assert got.shape == want.shape == ref.shape
        np.testing.assert_allclose(ref, want, rtol=RTOL, atol=ATOL, err_msg=f"reference, call {i}")
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=f"compiled, call {i}")


def test_the_caches_hold_the_scattered_rows(run):
    for name, want in run["oracle"].items():
        np.testing.assert_array_equal(run["model"].state[name], want, err_msg=name)
        np.testing.assert_array_equal(run["reference"].state[name], want, err_msg=name)


def test_a_schedule_mixes_prefill_chunks_and_decode_rows(run):
    """The calls do what the tests claim: a slot with consecutive positions in one call,
    rows of several slots in one call, and a slot restarted below rows it held."""
    restarted = chunked = mixed = False
    last: dict[int, int] = {}
    for data, *_ in run["results"]:
        slots, positions = data["slots"], data["positions"]
        mixed |= len(set(slots.tolist())) > 1
        for slot in set(slots.tolist()):
            mine = positions[slots == slot]
            chunked |= len(mine) > 1 and bool(np.all(np.diff(mine) == 1))
            restarted |= slot in last and int(mine.min()) < last[slot]
            last[slot] = int(mine.max())
    capacity = run["config"][3]
    assert mixed and chunked and (restarted or capacity > 8)


def test_out_of_range_slots_and_positions_fail_the_call(run):
    """A bad slot or position (negative too) is an RlxError naming the argument; the model
    keeps working (a valid call afterwards matches the reference)."""
    heads, kv_heads, dim, capacity, _ = run["config"]
    model, reference = run["model"], run["reference"]
    rng = np.random.default_rng(7)
    for slots, positions, name in (([0, N_SLOTS], [0, 1], "slots"), ([1, -1], [0, 1], "slots"),
                                   ([0, 1], [capacity, 0], "positions"),
                                   ([0, 1], [0, -3], "positions")):
        data = call_data(rng, np.array(slots, np.int32), np.array(positions, np.int32),
                         heads, kv_heads, dim)
        for runner in (model, reference):
            with pytest.raises(RlxError, match=name):
                runner(**data)
    data = call_data(rng, np.array([2, 0], np.int32), np.array([0, 0], np.int32),
                     heads, kv_heads, dim)
    np.testing.assert_allclose(model(**data), reference(**data), rtol=RTOL, atol=ATOL)


def test_matches_causal_attention_over_one_slot():
    """A prefill of S rows into one slot (positions 0..S-1) attends as `g.attention` with
    mask_kind causal over those rows (the window too)."""
    heads, kv_heads, dim, capacity, window = 4, 2, 16, 17, 5
    seq = 7
    g = rlx.Graph("causal")
    q, k, v = (g.input(n, (seq, w * dim)) for n, w in (("q", heads), ("k", kv_heads),
                                                      ("v", kv_heads)))
    g.output(g.attention(q, k, v, num_heads=heads, head_dim=dim, num_kv_heads=kv_heads,
                         mask_kind="causal", window=window))
    causal = rlx.jit(g)
    slotted = rlx.jit(slot_graph(heads, kv_heads, dim, capacity, window))
    data = call_data(np.random.default_rng(3), np.full(seq, 1, np.int32),
                     np.arange(seq, dtype=np.int32), heads, kv_heads, dim)
    want = causal(q=data["q"], k=data["k"], v=data["v"])
    np.testing.assert_allclose(slotted(**data), want, rtol=RTOL, atol=ATOL)


def rectangle_graph(heads: int, kv_heads: int, dim: int, capacity: int) -> rlx.Graph:
    """`slot_graph` on a rectangle: rows [B, S, ·] with slots and positions [B, S] (the
    batched graph of a recurrent model whose scans run along S)."""
    g = rlx.Graph("rectangle")
    width = kv_heads * dim
    q = g.input("q", ("B", "S", heads * dim))
    slots = g.input("slots", ("B", "S"), dtype="i32")
    positions = g.input("positions", ("B", "S"), dtype="i32")
    keys = g.cache_append(g.state("k_cache", (N_SLOTS, capacity, width)),
                          g.input("k", ("B", "S", width)), slots=slots, positions=positions)
    values = g.cache_append(g.state("v_cache", (N_SLOTS, capacity, width)),
                            g.input("v", ("B", "S", width)), slots=slots, positions=positions)
    g.output(g.slot_attention(q, keys, values, slots, positions, num_heads=heads,
                              head_dim=dim, num_kv_heads=kv_heads))
    return g


@pytest.mark.parametrize("threads", [1, 2])
def test_a_rectangle_of_rows_is_its_rows_in_order(threads):
    """Rows [B, S, ·] with slots and positions [B, S] give what the B·S rows give as a
    ragged batch, call after call (the caches persist): sequences of one length at
    different positions, S = 1 decode steps, B = 1, and sizes off the vector width."""
    heads, kv_heads, dim, capacity = 3, 1, 5, 12
    rectangle = rlx.jit(rectangle_graph(heads, kv_heads, dim, capacity), threads=threads)
    ragged = rlx.jit(slot_graph(heads, kv_heads, dim, capacity, None), threads=threads)
    reference = rlx.reference(rectangle_graph(heads, kv_heads, dim, capacity))
    rng = np.random.default_rng(21)
    calls = [([2, 0], [0, 0], 3), ([1], [0], 4), ([2, 0, 1], [3, 3, 4], 1), ([0, 2], [4, 4], 5)]
    for slots, starts, length in calls:
        slot_rows = np.repeat(np.array(slots, np.int32), length)
        position_rows = np.concatenate([np.arange(p, p + length, dtype=np.int32)
                                        for p in starts])
        flat = call_data(rng, slot_rows, position_rows, heads, kv_heads, dim)
        shaped = {name: value.reshape(len(slots), length, *value.shape[1:])
                  for name, value in flat.items()}
        want = ragged(**flat).reshape(len(slots), length, -1)
        np.testing.assert_allclose(rectangle(**shaped), want, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(reference(**shaped), want, rtol=RTOL, atol=ATOL)
    for name in ("k_cache", "v_cache"):
        np.testing.assert_array_equal(rectangle.state[name], ragged.state[name])
    bad = {name: value.reshape(1, 2, *value.shape[1:]) for name, value in call_data(
        rng, np.array([0, 0], np.int32), np.array([11, 12], np.int32), heads, kv_heads,
        dim).items()}
    with pytest.raises(RlxError, match="positions"):
        rectangle(**bad)


def test_rectangle_slots_must_have_the_rows_leading_shape():
    g = rlx.Graph("bad_rectangle")
    cache = g.state("cache", (N_SLOTS, 5, 8))
    rows = g.input("rows", ("B", "S", 8))
    slots = g.input("slots", ("B", "S"), dtype="i32")
    with pytest.raises(ShapeError, match=r"slots.*one slot per row"):
        g.cache_append(cache, rows, slots=g.input("s1", ("B",), dtype="i32"), positions=slots)
    with pytest.raises(ShapeError, match=r"rows \[B, S, 4, 8\]"):
        g.cache_append(cache, g.input("r4", ("B", "S", 4, 8)), slots=slots, positions=slots)
    keys = g.cache_append(cache, rows, slots=slots, positions=slots)
    with pytest.raises(ShapeError, match="positions"):
        g.slot_attention(g.input("q", ("B", "S", 16)), keys, keys, slots,
                         g.input("p", ("S", "B"), dtype="i32"), num_heads=4, head_dim=4,
                         num_kv_heads=2)


def test_the_slot_cache_is_neither_snapshot_nor_reset():
    """The slot caches count as appended caches: a call copies none of their rows and
    reset() keeps them (the caller owns the positions)."""
    model = rlx.jit(slot_graph(2, 1, 8, 5, None))
    data = call_data(np.random.default_rng(1), np.array([1], np.int32), np.array([3], np.int32),
                     2, 1, 8)
    model(**data)
    assert model._state.caches == {"k_cache", "v_cache"} and not model._state.cache_dims
    assert not model._state.snapshot({"R": 1}).rows["k_cache"][1].size
    model.reset()
    np.testing.assert_array_equal(model.state["k_cache"][1, 3], data["k"][0])


def test_a_large_slot_attention_is_split_across_threads_and_still_checked():
    """A slot attention with work enough is split (lir-parallelize); each part checks every
    row, so a bad position still fails the call (keys and values are inputs here)."""
    heads, kv_heads, dim, capacity = 8, 2, 64, 512
    g = rlx.Graph("split")
    q = g.input("q", ("R", heads * dim))
    keys = g.input("keys", (2, capacity, kv_heads * dim))
    values = g.input("values", (2, capacity, kv_heads * dim))
    slots = g.input("slots", ("R",), dtype="i32")
    positions = g.input("positions", ("R",), dtype="i32")
    g.output(g.slot_attention(q, keys, values, slots, positions, num_heads=heads,
                              head_dim=dim, num_kv_heads=kv_heads))
    model = rlx.jit(g, threads=2)
    (kernel,) = [op for op in model.stage_module("lir").walk()
                 if isinstance(op, lir.SlotAttentionOp)]
    assert splits(kernel, PARALLEL_MIN_WORK)  # threads=2 splits it
    rng = np.random.default_rng(5)
    cache = rng.standard_normal((2, 2, capacity, kv_heads * dim)).astype(np.float32)
    data = dict(q=rng.standard_normal((3, heads * dim)).astype(np.float32), keys=cache[0],
                values=cache[1], slots=np.array([1, 0, 1], np.int32),
                positions=np.array([511, 0, 100], np.int32))
    want = oracle_attention(data["q"], cache[0], cache[1], data["slots"], data["positions"],
                            heads, kv_heads, dim, None)
    np.testing.assert_allclose(model(**data), want, rtol=RTOL, atol=ATOL)
    data["positions"] = np.array([511, 0, 512], np.int32)
    with pytest.raises(RlxError, match=r"positions\[2\] = 512 is outside \[0, 512\)"):
        model(**data)


# ----------------------------------------------------------------------------- build time


def _graph_with_caches(capacity: int = 5, width: int = 8):
    g = rlx.Graph("bad")
    cache = g.state("cache", (N_SLOTS, capacity, width))
    rows = g.input("rows", ("R", width))
    slots = g.input("slots", ("R",), dtype="i32")
    positions = g.input("positions", ("R",), dtype="i32")
    return g, cache, rows, slots, positions


def test_cache_append_with_slots_refuses_bad_arguments():
    g, cache, rows, slots, positions = _graph_with_caches()
    with pytest.raises(ArgumentError, match="positions: slots and positions go together"):
        g.cache_append(cache, rows, slots=slots)
    with pytest.raises(ArgumentError, match="slots: slots and positions go together"):
        g.cache_append(cache, rows, positions=positions)
    with pytest.raises(DTypeError, match="slots"):
        g.cache_append(cache, rows, slots=g.input("s64", ("R",), dtype="i64"),
                       positions=positions)
    with pytest.raises(DTypeError, match="positions"):
        g.cache_append(cache, rows, slots=slots, positions=g.input("pf", ("R",)))
    with pytest.raises(ShapeError, match=r"rows \[R, 7\]"):
        g.cache_append(cache, g.input("r7", ("R", 7)), slots=slots, positions=positions)
    with pytest.raises(ShapeError, match="positions"):
        g.cache_append(cache, rows, slots=slots, positions=g.input("p2", ("P",), dtype="i32"))
    with pytest.raises(ShapeError, match="cache"):
        g.cache_append(g.state("flat", (5,)), g.input("r0", ("R",)), slots=slots,
                       positions=positions)
    with pytest.raises(RlxError, match="expected a state"):
        g.cache_append(g.input("notstate", (N_SLOTS, 5, 8)), rows, slots=slots,
                       positions=positions)
    g.cache_append(cache, rows, slots=slots, positions=positions)
    with pytest.raises(RlxError, match="was appended to"):
        g.cache_append(cache, rows, slots=slots, positions=positions)


def test_slot_attention_refuses_bad_arguments():
    g = rlx.Graph("bad_attention")
    q = g.input("q", ("R", 32))
    kv = g.input("kv", (N_SLOTS, 5, 16))
    slots = g.input("slots", ("R",), dtype="i32")
    positions = g.input("positions", ("R",), dtype="i32")
    heads = dict(num_heads=4, head_dim=8, num_kv_heads=2)
    assert g.slot_attention(q, kv, kv, slots, positions, **heads).shape == ("R", 32)
    with pytest.raises(ShapeError, match="keys"):
        g.slot_attention(q, g.input("k2", (5, 16)), kv, slots, positions, **heads)
    with pytest.raises(ShapeError, match="values"):
        g.slot_attention(q, kv, g.input("v2", (N_SLOTS, 6, 16)), slots, positions, **heads)
    with pytest.raises(ShapeError, match="q: last dim"):
        g.slot_attention(g.input("q2", ("R", 24)), kv, kv, slots, positions, **heads)
    with pytest.raises(ShapeError, match="num_kv_heads"):
        g.slot_attention(q, kv, kv, slots, positions, num_heads=4, head_dim=8, num_kv_heads=3)
    with pytest.raises(ShapeError, match="slots"):
        g.slot_attention(q, kv, kv, g.input("s3", (3,), dtype="i32"), positions, **heads)
    with pytest.raises(ShapeError, match="window"):
        g.slot_attention(q, kv, kv, slots, positions, window=0, **heads)
    with pytest.raises(DTypeError, match="positions"):
        g.slot_attention(q, kv, kv, slots, g.input("pf", ("R",)), **heads)
    with pytest.raises(DTypeError, match="keys"):
        g.slot_attention(q, g.input("ki", (N_SLOTS, 5, 16), dtype="i32"), kv, slots,
                         positions, **heads)


def test_the_lir_stage_reference_agrees():
    """The reference executor runs the bufferized ops too (the rows written in place)."""
    heads, kv_heads, dim, capacity, window = 4, 2, 8, 6, 3
    model = rlx.jit(slot_graph(heads, kv_heads, dim, capacity, window))
    lir_reference = rlx.reference(model.mlir("lir"))
    rng = np.random.default_rng(11)
    for slots, positions in (([0, 0, 0, 1], [0, 1, 2, 0]), ([2, 1], [0, 1]), ([0], [3])):
        data = call_data(rng, np.array(slots, np.int32), np.array(positions, np.int32),
                         heads, kv_heads, dim)
        np.testing.assert_allclose(model(**data), lir_reference(**data), rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(model.state["v_cache"], lir_reference.state["v_cache"])
    bad = call_data(rng, np.array([N_SLOTS], np.int32), np.array([0], np.int32), heads,
                    kv_heads, dim)
    with pytest.raises(ArgumentError, match="lir.cache_scatter: slots: 3 is out of range"):
        lir_reference(**bad)


def test_gradients_through_the_slot_ops_are_refused():
    g = rlx.Graph("grad_slots")
    rows, kv = g.param("rows", (2, 8)), g.param("kv", (2, 4, 8))
    slots, positions = g.constant(np.array([0, 1], np.int32)), g.constant(np.array([1, 3], np.int32))
    cache = g.cache_append(g.state("cache", (2, 4, 8)), rows, slots=slots, positions=positions)
    attended = g.slot_attention(g.input("q", (2, 16)), kv, kv, slots, positions,
                                num_heads=2, head_dim=8, num_kv_heads=1)
    loss = g.reduce_sum(attended, (0, 1)) + g.reduce_sum(cache, (0, 1, 2))
    for name, op in (("kv", "mir.slot_attention"), ("rows", "mir.cache_scatter")):
        with pytest.raises(RlxError, match=f"no VJP rule for {op}"):
            rlx.grad(g, loss, wrt=[name])
