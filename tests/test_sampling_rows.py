"""Per-row sampling (batched decoding): `g.sample` with parameters of one value per row of
2-D logits [R, V] and `positions` (row r counted as row 0 at positions[r]), compiled
against the numpy reference, and row r of a batched call against a one-row call at that
position."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects import test
from xdsl.dialects.builtin import IndexType, MemRefType, TensorType, f32, i32, i64
from xdsl.utils.exceptions import VerifyException

import rlx_mlir as rlx
from rlx_mlir.core import reference_kernels as K
from rlx_mlir.dialects import lir, mir

VOCABS = [7, 33, 64]
ROWS = [1, 3, 5]
CAPACITY = 64
"""The cache of the one-row graph: the positions a batched call is checked at lie below."""


def _batched(v: int, per_row: tuple[str, ...], positions: bool) -> rlx.Graph:
    """sample(x ["R", v]) with the parameters in `per_row` as ["R"] inputs, the others
    rank-0 inputs, and `positions` ["R"] i64 when asked; the argmax beside it."""
    g = rlx.Graph("batched")
    x = g.input("x", ("R", v))
    params = {name: g.input(name, ("R",) if name in per_row else (), dtype)
              for name, dtype in (("temperature", "f32"), ("top_k", "i32"), ("top_p", "f32"),
                                  ("seed", "i64"))}
    pos = g.input("positions", ("R",), "i64") if positions else None
    g.output(g.sample(x, **params, positions=pos), g.argmax(x))
    return g


KINDS = {  # which parameters are per row, and whether rows have their own positions
    "all_rows": (("temperature", "top_k", "top_p", "seed"), True),
    "mixed": (("top_k", "seed"), False),
    "mixed_positions": (("temperature", "top_p"), True),
}


@pytest.fixture(scope="module")
def batched():
    """(compiled, reference) per (kind, V): one compile each, R bound per call."""
    models = {}
    for kind, (per_row, positions) in KINDS.items():
        for v in VOCABS:
            g = _batched(v, per_row, positions)
            models[kind, v] = rlx.jit(g, threads=1), rlx.reference(g)
    return models


def _settings(r: int, v: int, seed: int, kind: str) -> dict[str, np.ndarray]:
    """Random arguments for R = r rows: greedy rows among sampled ones, top-k from none to
    beyond V, top-p from a single token to all; rank-0 where `kind` shares a parameter."""
    rng = np.random.default_rng(seed)
    per_row, positions = KINDS[kind]
    logits = rng.standard_normal((r, v)).astype(np.float32)
    logits[:, ::5] = logits[:, :1]  # ties
    values = {
        "temperature": rng.choice([0.0, 0.5, 1.0, 1.7], r).astype(np.float32),
        "top_k": rng.choice([0, 1, 3, v - 1, v, v + 5], r).astype(np.int32),
        "top_p": rng.choice([1.0, 0.9, 0.5, 1e-6], r).astype(np.float32),
        "seed": rng.integers(-2**62, 2**62, r, dtype=np.int64),
    }
    args = {name: a if name in per_row else a[0] for name, a in values.items()}
    if positions:
        args["positions"] = rng.integers(0, CAPACITY, r, dtype=np.int64)
    return {"x": logits, **args}


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("v", VOCABS)
@pytest.mark.parametrize("r", ROWS)
def test_per_row_sampling_matches_the_reference(batched, kind, v, r):
    model, ref = batched[kind, v]
    for trial in range(4):
        args = _settings(r, v, 100 * r + trial, kind)
        ids, argmax = model(**args)
        np.testing.assert_array_equal(ids, ref(**args)[0], err_msg=str(args))
        assert ids.shape == (r,) and ids.dtype == np.int32
        greedy = np.broadcast_to(args["temperature"], (r,)) == 0
        np.testing.assert_array_equal(ids[greedy], argmax[greedy])


def test_greedy_rows_beside_sampled_rows(batched):
    """Rows at temperature 0 give their argmax whatever the other rows sample with."""
    model, _ = batched["all_rows", 33]
    rng = np.random.default_rng(4)
    x = rng.standard_normal((5, 33)).astype(np.float32)
    t = np.array([0, 2, 0, 2, 0], np.float32)
    ids = [model(x=x, temperature=t, top_k=np.zeros(5, np.int32), top_p=np.ones(5, np.float32),
                 seed=np.full(5, s, np.int64), positions=np.arange(5))[0] for s in range(8)]
    np.testing.assert_array_equal(np.stack(ids)[:, ::2], np.tile(x.argmax(-1)[::2], (8, 1)))
    assert len({tuple(row[1::2]) for row in ids}) > 1  # the sampled rows do vary


@pytest.fixture(scope="module")
def one_row():
    """Per V, a compiled one-row graph that samples at the model's position (a cache
    append gives the graph its position; `reset(p)` puts it at p)."""
    models = {}
    for v in VOCABS:
        g = rlx.Graph("one_row")
        x = g.input("x", (1, v))
        g.cache_append(g.state("cache", (CAPACITY, v)), x)
        params = {name: g.input(name, (), dtype) for name, dtype in (
            ("temperature", "f32"), ("top_k", "i32"), ("top_p", "f32"), ("seed", "i64"))}
        g.output(g.sample(x, **params))
        models[v] = rlx.jit(g, threads=1)
    return models


@pytest.mark.parametrize("v", VOCABS)
def test_a_row_draws_what_a_one_row_call_at_its_position_draws(batched, one_row, v):
    """The batching property: row r of a call with positions is the one-row call at
    position positions[r] with row r's parameters (compiled both ways)."""
    model, _ = batched["all_rows", v]
    single = one_row[v]
    for trial in range(3):
        args = _settings(5, v, 7 + trial, "all_rows")
        args["temperature"] = np.maximum(args["temperature"], np.float32(0.5))  # all sampled
        ids = model(**args)[0]
        for r in range(5):
            single.reset(int(args["positions"][r]))
            row = single(x=args["x"][r:r + 1], temperature=args["temperature"][r],
                         top_k=args["top_k"][r], top_p=args["top_p"][r], seed=args["seed"][r])
            assert int(row[0]) == int(ids[r]), (trial, r)


def test_positions_are_64_bit_counters(batched):
    """Negative and > 2^32 positions are counters as they are (two's complement): the
    kernel agrees with the reference, and each row with the reference's one-row call."""
    model, ref = batched["all_rows", 33]
    args = _settings(4, 33, 11, "all_rows")
    args["temperature"] = np.ones(4, np.float32)
    args["positions"] = np.array([-1, -2**40, 2**32 + 3, 2**63 - 1], np.int64)
    ids = model(**args)[0]
    np.testing.assert_array_equal(ids, ref(**args)[0])
    for r in range(4):
        one = K.sample(args["x"][r:r + 1], args["temperature"][r], args["top_k"][r],
                       args["top_p"][r], args["seed"][r], position=int(args["positions"][r]))
        assert int(one[0]) == int(ids[r])


def test_without_positions_rows_count_by_their_index():
    """Per-row parameters without positions draw as the rank-0 call does: by (row,
    position) — equal per-row values give the rank-0 reference's ids."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((5, 17)).astype(np.float32)
    want = K.sample(x, np.float32(1.2), np.int32(4), np.float32(0.9), np.int64(3))
    got = K.sample(x, np.full(5, 1.2, np.float32), np.full(5, 4, np.int32),
                   np.full(5, 0.9, np.float32), np.full(5, 3, np.int64))
    np.testing.assert_array_equal(got, want)


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize(("logits", "name", "shape", "dtype", "message"), [
    ((3, 8), "temperature", (4,), "f32", r"temperature: expected a rank-0 tensor or \[3\]"),
    (("R", 8), "seed", ("S",), "i64", r"seed: expected a rank-0 tensor or \[R\]"),
    ((3, 8), "top_p", (3, 1), "f32", r"top_p: expected a rank-0 tensor or \[3\]"),
    ((2, 3, 8), "top_k", (2,), "i32", "top_k: expected a rank-0 tensor or one value per row, "
     r"which needs 2-D logits \[R, V\] \(got logits \[2, 3, 8\]\), got \[2\]"),
    ((3, 8), "temperature", (3,), "i32", "temperature"),
    ((3, 8), "seed", (3,), "i32", "seed"),
])
def test_per_row_parameters_are_checked(logits, name, shape, dtype, message):
    g = rlx.Graph("bad")
    with pytest.raises(rlx.RlxError, match=message):
        g.sample(g.input("x", logits), **{name: g.input(name, shape, dtype)})


@pytest.mark.parametrize(("logits", "shape", "dtype", "message"), [
    ((3, 8), (4,), "i64", r"positions: expected \[3\] \(one per row of 2-D logits"),
    ((8,), (1,), "i64", r"positions: expected \[R\] .*got logits \[8\]"),
    ((2, 3, 8), (2,), "i64", "positions: expected"),
    ((3, 8), (3,), "i32", "positions"),
    ((3, 8), (3,), "f32", "positions"),
])
def test_positions_are_checked(logits, shape, dtype, message):
    g = rlx.Graph("bad")
    with pytest.raises(rlx.RlxError, match=message):
        g.sample(g.input("x", logits), positions=g.input("p", shape, dtype))


def test_the_reference_checks_per_row_shapes():
    with pytest.raises(rlx.RlxError, match="row_positions: expected"):
        K.sample(np.zeros((3, 8), np.float32), 1.0, 0, 1.0, 0, row_positions=np.zeros(2, np.int64))


def _values(*types):
    return test.TestOp(result_types=list(types)).results


def test_position_and_row_positions_are_exclusive():
    x, t, k, p, s, rp = _values(TensorType(f32, [3, 8]), TensorType(f32, []), TensorType(i32, []),
                                TensorType(f32, []), TensorType(i64, []), TensorType(i64, [3]))
    (pos,) = _values(IndexType())
    message = "position and row_positions: expected at most one"
    with pytest.raises(VerifyException, match=f"'mir.sample': {message}"):
        mir.SampleOp(x, t, k, p, s, position=pos, row_positions=rp).verify()
    mir.SampleOp(x, t, k, p, s, row_positions=rp).verify()
    buffers = _values(*(MemRefType(v.type.get_element_type(), v.type.get_shape())
                        for v in (x, t, k, p, s, rp)), MemRefType(i32, [3]))
    kernel = dict(zip(("logits", "temperature", "top_k", "top_p", "seed", "row_positions",
                       "out"), buffers, strict=True))
    with pytest.raises(VerifyException, match=f"'lir.sample': {message}"):
        lir.SampleOp(**kernel, position=pos).verify()
    lir.SampleOp(**kernel).verify()
