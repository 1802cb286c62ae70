"""The sampling ops (argmax, top_k, sample): compiled kernels against the numpy reference,
Philox4x32-10 against Random123's known answers, and the draws' distribution."""

from __future__ import annotations

import numpy as np
import pytest

import rlx_mlir as rlx
from rlx_mlir.core import reference_kernels as K
from rlx_mlir.core.philox import philox4x32, sample_uniform

KAT = [  # Random123 kat_vectors: philox4x32 10, counter[4] key[2] -> out[4]
    ([0, 0, 0, 0], [0, 0], [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
    ([0xFFFFFFFF] * 4, [0xFFFFFFFF] * 2, [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
    ([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0],
     [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]),
]
SHAPES = [(37,), (3, 50), (2, 3, 17), (4, 1), (2, 129)]


@pytest.mark.parametrize(("counter", "key", "expected"), KAT)
def test_philox_known_answers(counter, key, expected):
    assert philox4x32(np.array(counter), np.array(key)).tolist() == expected


def _logits(shape, seed=0):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    flat[::7] = flat[0]  # ties
    if flat.size > 3:
        flat[2] = -np.inf
    return x


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_argmax_and_top_k_match_the_reference(shape):
    g = rlx.Graph("pick")
    x = g.input("x", shape)
    k = min(4, shape[-1])
    values, indices = g.top_k(x, k)
    g.output(g.argmax(x), values, indices)
    X = _logits(shape)
    X.reshape(-1)[1] = np.nan  # a NaN ranks first (numpy's argmax: the first NaN)
    got = rlx.jit(g, threads=1)(x=X)
    want = (K.argmax(X), *K.top_k(X, k))
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
    assert got[2].dtype == np.int32 and got[0].shape == shape[:-1]


def test_top_k_sorted_descending_ties_to_lower_index():
    values, indices = K.top_k(np.array([1, 3, 3, 2, 3], np.float32), 4)
    assert values.tolist() == [3, 3, 3, 2] and indices.tolist() == [1, 2, 4, 3]


def _sampler(shape):
    g = rlx.Graph("sampler")
    x = g.input("x", shape)
    params = [g.input("t", (), "f32"), g.input("k", (), "i32"), g.input("p", (), "f32"),
              g.input("seed", (), "i64")]
    g.output(g.sample(x, temperature=params[0], top_k=params[1], top_p=params[2],
                      seed=params[3]), g.argmax(x))
    return g


SETTINGS = [(0.0, 0, 1.0, 1), (0.8, 0, 1.0, 2), (1.0, 5, 1.0, 3), (1.0, 0, 0.9, 4),
            (0.7, 10, 0.8, 5), (1.5, 3, 0.5, 6), (2.0, 1, 1.0, 7), (1.0, 0, 1e-6, 8)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_sample_matches_the_reference_and_threads(shape):
    g = _sampler(shape)
    one, two, ref = rlx.jit(g, threads=1), rlx.jit(g, threads=2), rlx.reference(g)
    X = _logits(shape, 1)
    for t, k, p, seed in SETTINGS:
        args = dict(x=X, t=np.float32(t), k=np.int32(k), p=np.float32(p), seed=np.int64(seed))
        ids, argmax = one(**args)
        np.testing.assert_array_equal(ids, ref(**args)[0], err_msg=str((t, k, p, seed)))
        np.testing.assert_array_equal(ids, two(**args)[0])
        if t == 0 or k == 1 or p <= 1e-6:  # greedy, top-1, a single most likely token
            np.testing.assert_array_equal(ids, argmax)


def test_sample_paths_on_long_rows():
    """Rows longer than the kernel's top-k buffer (256): top-k above and below it, top-p
    sets inside the 256 most likely tokens and beyond them, ties at the thresholds."""
    rng = np.random.default_rng(3)
    rows = np.stack([rng.standard_normal(700),  # flat: a top-p set beyond 256 tokens
                     8 * rng.standard_normal(700),  # peaked: inside the buffer
                     np.round(2 * rng.standard_normal(700)) / 2]).astype(np.float32)  # ties
    g = _sampler(rows.shape)
    model, ref = rlx.jit(g, threads=1), rlx.reference(g)
    for t, k, p, seed in [(1.0, 0, 0.9, 1), (1.0, 300, 0.9, 2), (0.7, 300, 1.0, 3),
                          (1.0, 256, 0.95, 4), (1.0, 257, 0.8, 5), (1.2, 0, 0.5, 6),
                          (0.9, 255, 0.3, 7), (1.0, 699, 0.99, 8)]:
        args = dict(x=rows, t=np.float32(t), k=np.int32(k), p=np.float32(p), seed=np.int64(seed))
        np.testing.assert_array_equal(model(**args)[0], ref(**args)[0], err_msg=str((t, k, p)))



@pytest.mark.parametrize("n", [5, 16, 700, 1027])
def test_sample_without_filters_on_long_rows(n):
    """No top-k (0, or k >= V) and no top-p: the kernel's vector sweeps (`_draw_every`, a
    server's default request) draw what the reference draws, at several temperatures and
    seeds, over rows of whole vectors and a scalar rest, with ties and a -inf."""
    rng = np.random.default_rng(n)
    rows = np.stack([rng.standard_normal(n), 4 * rng.standard_normal(n),
                     np.round(2 * rng.standard_normal(n)) / 2]).astype(np.float32)
    rows[0, 1] = -np.inf
    g = _sampler(rows.shape)
    model, ref = rlx.jit(g, threads=1), rlx.reference(g)
    sampled = 0
    for t, k, seed in [(1.0, 0, 1), (0.5, 0, 2), (1.7, 0, 3), (1.0, n, 4), (1.0, 0, 5),
                       (0.8, 0, 6), (1.3, n + 3, 7)]:
        args = dict(x=rows, t=np.float32(t), k=np.int32(k), p=np.float32(1.0), seed=np.int64(seed))
        ids, argmax = model(**args)
        np.testing.assert_array_equal(ids, ref(**args)[0], err_msg=str((n, t, k, seed)))
        sampled += int((ids != argmax).sum())
    assert sampled > 0  # draws, not the greedy token every time

@pytest.mark.parametrize("width", [16, 8, 4])
def test_argmax_at_every_vector_width(width):
    g = rlx.Graph("argmax")
    x = g.input("x", (4, 203))
    g.output(g.argmax(x))
    X = _logits((4, 203), 5)
    X[1, 150] = X[1, 7] = np.nan
    X[2] = 0.0
    X[2, 101:] = -0.0
    X[3, 40] = X[3, 200] = X[3].max() + 1  # a tie in two lanes: the lower index
    np.testing.assert_array_equal(rlx.jit(g, vector_width=width)(x=X), K.argmax(X))


@pytest.mark.parametrize("width", [16, 8, 4])
@pytest.mark.parametrize("n", [1000, 4 * 16 * 3 + 16 * 2 + 5, 2 * 16, 3 * 8])
def test_argmax_chains_keep_the_first_best(width, n):
    """The argmax row runs interleaved chains of vectors (ARGMAX_CHAINS): a tie between
    chains, or between a chain and the scalar tail, goes to the lower index; the first
    NaN beats every number; -0.0 and 0.0 tie. Rows of several chain strides, of a
    remainder of whole vectors, of exactly two vectors and of three of width 8."""
    g = rlx.Graph("argmax_chains")
    x = g.input("x", (6, n))
    g.output(g.argmax(x))
    X = _logits((6, n), 9)
    top = float(np.nanmax(X)) + 1.0
    X[0, [n - 1, (width + 3) % n, (3 * width + 1) % n]] = top  # three chains and the tail: the lowest
    X[1, [n // 2, 2 * width % n]] = np.nan  # the first NaN, whatever its chain
    X[2] = 0.0
    X[2, n // 3:] = -0.0
    X[3, [n - 2, n - 1]] = top  # in the scalar tail only
    X[4, [(width + 1) % n, 1]] = top  # in one chain's lane and the first vector's
    X[5] = -np.inf
    np.testing.assert_array_equal(rlx.jit(g, vector_width=width)(x=X), K.argmax(X))


def test_sample_distribution_follows_the_softmax():
    """10000 rows of the same logits: the counts of each token against the softmax at T
    (a fixed seed: deterministic), and top-k/top-p never pick outside their sets."""
    logits = np.array([2.0, 1.0, 0.5, 0.0, -1.0, -3.0], np.float32)
    rows = np.tile(logits, (10000, 1))
    g = _sampler(rows.shape)
    model = rlx.jit(g)
    for t in (1.0, 0.5):
        ids = model(x=rows, t=np.float32(t), k=np.int32(0), p=np.float32(1), seed=np.int64(9))[0]
        expected = np.exp(logits / t) / np.exp(logits / t).sum() * rows.shape[0]
        counts = np.bincount(ids, minlength=logits.size)
        chi2 = (((counts - expected) ** 2) / expected).sum()
        assert chi2 < 25, (t, counts, expected)  # 5 degrees of freedom: p ~ 1e-4
    ids = model(x=rows, t=np.float32(1), k=np.int32(3), p=np.float32(1), seed=np.int64(9))[0]
    assert set(np.unique(ids)) == {0, 1, 2}
    probs = np.exp(logits) / np.exp(logits).sum()  # 0.561, 0.206: p=0.75 keeps two
    assert probs[0] < 0.75 <= probs[:2].sum()
    ids = model(x=rows, t=np.float32(1), k=np.int32(0), p=np.float32(0.75), seed=np.int64(9))[0]
    assert set(np.unique(ids)) == {0, 1}


def test_sample_uniform_depends_on_row_seed_and_position():
    a = sample_uniform(4, 1, 0)
    assert len(set(a.tolist())) == 4 and np.all((a >= 0) & (a < 1))
    assert not np.array_equal(a, sample_uniform(4, 2, 0))
    assert not np.array_equal(a, sample_uniform(4, 1, 1))


def test_sample_uses_the_graph_position():
    """In a graph with a cache the draw is counted by the position: the same logits at
    successive positions give the reference's ids for those positions."""
    g = rlx.Graph("stateful")
    x = g.input("x", (1, 16))
    cache = g.state("cache", (8, 16))
    g.cache_append(cache, x)  # gives the graph its position
    g.output(g.sample(x, temperature=1.0, seed=5))
    model = rlx.jit(g, threads=1)
    ref = rlx.reference(g)
    X = np.zeros((1, 16), np.float32)
    got = [int(model(x=X)[0]) for _ in range(6)]
    want = [int(ref(x=X)[0]) for _ in range(6)]
    assert got == want and len(set(got)) > 1


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"temperature": -1.0}, "temperature"), ({"temperature": float("nan")}, "temperature"),
    ({"top_k": -3}, "top_k"), ({"top_k": 1.5}, "top_k"), ({"top_p": 0.0}, "top_p"),
    ({"top_p": 1.5}, "top_p"), ({"seed": -1}, "seed"), ({"seed": 0.5}, "seed"),
])
def test_sample_checks_its_parameters(kwargs, message):
    g = rlx.Graph("bad")
    with pytest.raises(rlx.RlxError, match=message):
        g.sample(g.input("x", (2, 8)), **kwargs)


@pytest.mark.parametrize("k", [0, 9])
def test_top_k_checks_k(k):
    g = rlx.Graph("bad")
    with pytest.raises(rlx.RlxError, match="k: expected an int in"):
        g.top_k(g.input("x", (2, 8)), k)
