"""Sliding-window attention, `g.attention(..., mask_kind="causal", window=W)` (SPEC "More
model families"): query i sees the keys j with i + (T − S) − W < j ≤ i + (T − S). The
reference executor against a loop written here from that inequality; the compiled kernel
against the reference at several W, S and T (static, and T = P + S from cache_append over
a symbolic S), grouped-query heads, a head_dim that is no multiple of the vector width,
threads 1 and 2; keys outside the window are never read; argument errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

import rlx_mlir as rlx
from rlx_mlir.core import reference_kernels as R
from rlx_mlir.core.errors import ShapeError
from rlx_mlir.pipeline import lower

HEADS, KV_HEADS = 4, 2
RTOL, ATOL = 2e-5, 2e-5


def window_attention_np(q: np.ndarray, k: np.ndarray, v: np.ndarray, window: int,
                        dim: int) -> np.ndarray:
    """The SPEC, one query row and head at a time in float64: softmax over the keys j with
    i + (T − S) − W < j ≤ i + (T − S) of q·k_j/√d, then Σ p_j v_j; query head h reads kv
    head h // (H / Hkv). q [B, S, H·d], k, v [B, T, Hkv·d]."""
    batch, steps, _ = q.shape
    keys = k.shape[1]
    group = HEADS // KV_HEADS
    out = np.zeros(q.shape)
    for b in range(batch):
        for h in range(HEADS):
            qh = q[b, :, h * dim:(h + 1) * dim].astype(np.float64)
            kv = slice(h // group * dim, (h // group + 1) * dim)
            kh, vh = k[b, :, kv].astype(np.float64), v[b, :, kv].astype(np.float64)
            for i in range(steps):
                seen = [j for j in range(keys)
                        if i + (keys - steps) - window < j <= i + (keys - steps)]
                scores = np.array([qh[i] @ kh[j] / math.sqrt(dim) for j in seen])
                p = np.exp(scores - scores.max())
                out[b, i, h * dim:(h + 1) * dim] = (p / p.sum()) @ vh[seen]
    return out


def inputs(rng: np.random.Generator, batch: int, steps: int, keys: int, dim: int
           ) -> dict[str, np.ndarray]:
    return {"q": rng.standard_normal((batch, steps, HEADS * dim)).astype(np.float32),
            "k": rng.standard_normal((batch, keys, KV_HEADS * dim)).astype(np.float32),
            "v": rng.standard_normal((batch, keys, KV_HEADS * dim)).astype(np.float32)}


def window_graph(batch: int, steps: int, keys: int, dim: int, window: int | None
                 ) -> rlx.Graph:
    g = rlx.Graph("swa")
    q = g.input("q", (batch, steps, HEADS * dim))
    k = g.input("k", (batch, keys, KV_HEADS * dim))
    v = g.input("v", (batch, keys, KV_HEADS * dim))
    g.output(g.attention(q, k, v, num_heads=HEADS, head_dim=dim, num_kv_heads=KV_HEADS,
                         mask_kind="causal", window=window))
    return g


@pytest.mark.parametrize("steps, keys", [(1, 1), (1, 9), (5, 5), (5, 12), (17, 17), (17, 30)])
@pytest.mark.parametrize("window", [1, 3, 8, 40])
def test_reference_is_the_spec_inequality(steps, keys, window):
    """The reference kernel equals the loop over the SPEC's inequality (W = 40 >= T: full
    causal attention, which it then also equals)."""
    data = inputs(np.random.default_rng(steps + keys + window), 2, steps, keys, 5)
    got = R.attention(**data, num_heads=HEADS, head_dim=5, num_kv_heads=KV_HEADS,
                      mask_kind="causal", window=window)
    np.testing.assert_allclose(got, window_attention_np(**data, window=window, dim=5),
                               rtol=1e-5, atol=1e-6)
    if window >= keys:
        causal = R.attention(**data, num_heads=HEADS, head_dim=5, num_kv_heads=KV_HEADS,
                             mask_kind="causal")
        np.testing.assert_array_equal(got, causal)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("steps, extra", [(1, 0), (1, 20), (5, 0), (5, 7), (17, 0), (17, 13)])
@pytest.mark.parametrize("window", [1, 3, 8, 64])
@pytest.mark.parametrize("dim", [5, 16])
def test_compiled_matches_reference_static(threads, steps, extra, window, dim):
    """Static S and T = S + extra (batch 2, 4 query heads over 2 kv heads): the compiled
    kernel equals the reference; W = 64 exceeds every T (full causal)."""
    keys = steps + extra
    graph = window_graph(2, steps, keys, dim, window)
    data = inputs(np.random.default_rng(window * 100 + keys), 2, steps, keys, dim)
    want = rlx.reference(graph)(**data)
    np.testing.assert_allclose(rlx.jit(graph, threads=threads)(**data), want,
                               rtol=RTOL, atol=ATOL)


def cache_graph(dim: int, window: int, capacity: int) -> rlx.Graph:
    """q, k, v rows [S, ·] of a symbolic S; k and v appended to caches: T = P + S."""
    g = rlx.Graph("swa_cache")
    q = g.input("q", ("S", HEADS * dim))
    k = g.cache_append(g.state("k_cache", (capacity, KV_HEADS * dim)),
                       g.input("k", ("S", KV_HEADS * dim)))
    v = g.cache_append(g.state("v_cache", (capacity, KV_HEADS * dim)),
                       g.input("v", ("S", KV_HEADS * dim)))
    g.output(g.attention(q, k, v, num_heads=HEADS, head_dim=dim, num_kv_heads=KV_HEADS,
                         mask_kind="causal", window=window))
    return g


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("window", [1, 3, 8, 64])
@pytest.mark.parametrize("dim", [5, 16])
def test_over_a_kv_cache_with_a_symbolic_s(threads, window, dim):
    """One compiled model (S symbolic, T = P + S from the caches) prefills 17 rows, then
    steps 1, 5 and 1: its outputs equal the reference executor's calls and one pass over
    all 24 rows of the SPEC loop."""
    steps = (17, 1, 5, 1)
    data = inputs(np.random.default_rng(window + dim), 1, sum(steps), sum(steps), dim)
    want = window_attention_np(**data, window=window, dim=dim)[0]
    model = rlx.jit(cache_graph(dim, window, 32), threads=threads, max_dims={"S": 17})
    assert 'rlx.role = "dim"' in model.mlir("llvm")
    for run in (model, rlx.reference(cache_graph(dim, window, 32))):
        outs, start = [], 0
        for s in steps:
            outs.append(run(**{name: rows[0, start:start + s] for name, rows in data.items()}))
            start += s
        np.testing.assert_allclose(np.concatenate(outs), want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("symbolic", [False, True])
def test_keys_outside_the_window_are_never_read(symbolic):
    """The kernel skips the keys before the window instead of masking them: NaN keys and
    values there (rows [0, 40) of 64, a vector width and more before any row's window)
    do not reach the output, which equals attention over the finite rows."""
    steps, keys, dim, window = 5, 64, 5, 3
    data = inputs(np.random.default_rng(3), 1, steps, keys, dim)
    poisoned = {n: a.copy() for n, a in data.items()}
    poisoned["k"][:, :40] = np.nan
    poisoned["v"][:, :40] = np.nan
    want = window_attention_np(**data, window=window, dim=dim)

    def model(window: int | None) -> rlx.CompiledGraph:
        if not symbolic:
            return rlx.jit(window_graph(1, steps, keys, dim, window))
        g = rlx.Graph("swa_dyn")
        q = g.input("q", (1, "S", HEADS * dim))
        k, v = (g.input(n, (1, "T", KV_HEADS * dim)) for n in ("k", "v"))
        g.output(g.attention(q, k, v, num_heads=HEADS, head_dim=dim, num_kv_heads=KV_HEADS,
                             mask_kind="causal", window=window))
        return rlx.jit(g, max_dims={"S": 8, "T": 64})

    got = model(window)(**poisoned)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    # the NaN rows do poison a kernel that reads them (full causal attention)
    assert np.isnan(model(None)(**poisoned)).all()


def test_window_is_a_property_at_every_level():
    text = {stage: str(lower(window_graph(1, 3, 5, 8, 2).to_module(), stage))
            for stage in ("mir", "lir")}
    assert "hir.attention" in window_graph(1, 3, 5, 8, 2).to_mlir()
    for stage, body in text.items():
        assert f"{stage}.attention" in body and "window 2" in body, stage


def test_window_errors():
    g = rlx.Graph("errors")
    q, k = g.input("q", (3, 16)), g.input("k", (5, 8))
    with pytest.raises(ShapeError, match="attention: window: .*mask_kind 'causal'.*'none'"):
        g.attention(q, k, k, num_heads=2, head_dim=8, num_kv_heads=1, window=2)
    with pytest.raises(ShapeError, match=r"attention: window: expected an integer >= 1 .*got 0"):
        g.attention(q, k, k, num_heads=2, head_dim=8, num_kv_heads=1, mask_kind="causal",
                    window=0)
    with pytest.raises(ShapeError, match="window"):
        R.attention(np.ones((3, 16)), np.ones((5, 8)), np.ones((5, 8)), np.ones((3, 5)),
                    num_heads=2, head_dim=8, num_kv_heads=1, mask_kind="bias", window=2)
