"""`depthwise_conv1d_causal(..., return_state=True)` (SPEC "More model families"): the
window [B, K-1, C] is the last K-1 rows of concat(left_pad, x) over time, for any S
(symbolic, and S < K-1, where it mixes rows of left_pad and x). Compiled vs the reference
executor vs a numpy formula written here; one compile over a symbolic S; the decode
pattern (window kept as a `g.state` and `g.assign`ed back) against one pass; threads."""

from __future__ import annotations

import numpy as np
import pytest

import rlx_mlir as rlx
from rlx_mlir.core import reference_kernels as R
from rlx_mlir.core.errors import ShapeError
from rlx_mlir.pipeline import lower

RTOL, ATOL = 1e-5, 1e-5


def conv_np(x: np.ndarray, w: np.ndarray, pad: np.ndarray | None
            ) -> tuple[np.ndarray, np.ndarray]:
    """The SPEC, in float64: y[b, t] = Σₖ w[k]·xp[b, t+k] and window = xp[:, -(K-1):] with
    xp = concat(pad or zeros, x) over time."""
    b, s, c = x.shape
    k = w.shape[0]
    if pad is None:
        pad = np.zeros((b, k - 1, c), np.float32)
    xp = np.concatenate([pad, x], axis=1).astype(np.float64)
    y = np.zeros((b, s, c))
    for t in range(s):
        for j in range(k):
            y[:, t] += w[j] * xp[:, t + j]
    return y, xp[:, xp.shape[1] - (k - 1):]


def conv_graph(batch: int, steps: int | str, channels: int, taps: int, with_pad: bool
               ) -> rlx.Graph:
    g = rlx.Graph("conv")
    x = g.input("x", (batch, steps, channels))
    w = g.input("w", (taps, channels))
    pad = g.input("pad", (batch, taps - 1, channels)) if with_pad else None
    y, window = g.depthwise_conv1d_causal(x, w, pad, return_state=True)
    g.output(y, window)
    return g


def conv_inputs(rng: np.random.Generator, batch: int, steps: int, channels: int, taps: int,
                with_pad: bool) -> dict[str, np.ndarray]:
    data = {"x": rng.standard_normal((batch, steps, channels)).astype(np.float32),
            "w": rng.standard_normal((taps, channels)).astype(np.float32)}
    if with_pad:
        data["pad"] = rng.standard_normal((batch, taps - 1, channels)).astype(np.float32)
    return data


def check(got: tuple[np.ndarray, np.ndarray], want: tuple[np.ndarray, np.ndarray]) -> None:
    np.testing.assert_allclose(got[0], want[0], rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(got[1], want[1].astype(np.float32))  # a copy: exact


@pytest.mark.parametrize("steps", [1, 2, 3, 17])
@pytest.mark.parametrize("batch, channels, taps", [(1, 5, 2), (2, 16, 3), (2, 33, 4)])
@pytest.mark.parametrize("with_pad", [False, True])
def test_window_at_static_s(steps, batch, channels, taps, with_pad):
    """Compiled and reference equal the formula, S below, at and above K-1."""
    data = conv_inputs(np.random.default_rng(steps * taps), batch, steps, channels, taps,
                       with_pad)
    want = conv_np(data["x"], data["w"], data.get("pad"))
    graph = conv_graph(batch, steps, channels, taps, with_pad)
    check(R.depthwise_conv1d_causal(data["x"], data["w"], data.get("pad"), return_state=True),
          want)
    check(rlx.reference(graph)(**data), want)
    check(rlx.jit(graph)(**data), want)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("batch, channels, taps", [(1, 5, 2), (2, 33, 4)])
@pytest.mark.parametrize("with_pad", [False, True])
def test_one_compile_over_a_symbolic_s(threads, batch, channels, taps, with_pad):
    """One compiled model (S symbolic) returns the window at every S up to the bound."""
    graph = conv_graph(batch, "S", channels, taps, with_pad)
    model = rlx.jit(graph, threads=threads, max_dims={"S": 17})
    assert 'rlx.role = "dim"' in model.mlir("llvm")
    run = rlx.reference(graph)
    rng = np.random.default_rng(threads + taps)
    for steps in (1, 2, 3, 17, 5):
        data = conv_inputs(rng, batch, steps, channels, taps, with_pad)
        want = conv_np(data["x"], data["w"], data.get("pad"))
        check(model(**data), want)
        check(run(**data), want)


def conv_decoder(channels: int, taps: int) -> rlx.Graph:
    """A conv layer that decodes: its window is a `g.state`, the conv's left_pad, and
    the window the conv returns is assigned back to it."""
    g = rlx.Graph("conv_decoder")
    x = g.input("x", (1, "S", channels))
    w = g.param("w", (taps, channels))
    state = g.state("window", (1, taps - 1, channels))
    y, window = g.depthwise_conv1d_causal(x, w, state, return_state=True)
    g.assign(state, window)
    g.output(y)
    return g


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("channels, taps", [(5, 2), (16, 3), (33, 4)])
def test_prefill_then_decode_equals_one_pass(threads, channels, taps):
    """Prefill 7 rows, then 5 single steps (S = 1 < K-1 for K = 4: the window mixes rows of
    the state and of x), each call reading the window the last one assigned: the outputs
    equal one pass over the 12 rows, and the final window its last K-1 rows. The window
    out is written back into the buffer left_pad was read from."""
    rng = np.random.default_rng(channels)
    xs = rng.standard_normal((1, 12, channels)).astype(np.float32)
    w = rng.standard_normal((taps, channels)).astype(np.float32)
    want_y, want_window = conv_np(xs, w, None)
    model = rlx.jit(conv_decoder(channels, taps), {"w": w}, threads=threads,
                    max_dims={"S": 8})
    planned = lower(conv_decoder(channels, taps).to_module(), "lir")
    assert "lir.depthwise_conv1d " in str(planned) and "return_state" in str(planned)
    runs = (model, rlx.reference(conv_decoder(channels, taps), {"w": w}),
            rlx.reference(planned, {"w": w}))
    for run in runs:
        outs = [run(x=xs[:, :7])] + [run(x=xs[:, t:t + 1]) for t in range(7, 12)]
        np.testing.assert_allclose(np.concatenate(outs, axis=1), want_y, rtol=RTOL, atol=ATOL)
        np.testing.assert_array_equal(run.state["window"], want_window.astype(np.float32))


def test_mir_and_lir_carry_the_window_as_a_second_result():
    """The hir op lowers to one mir.depthwise_conv1d with two results and one lir kernel
    with two outs."""
    module = conv_graph(2, "S", 5, 3, True).to_module()
    mir_text = str(lower(module.clone(), "mir"))
    assert "mir.depthwise_conv1d" in mir_text and "return_state" in mir_text
    lir_text = str(lower(module.clone(), "lir"))
    assert "outs(%" in lir_text and "return_state" in lir_text


def test_return_state_errors():
    g = rlx.Graph("errors")
    x = g.input("x", (1, 4, 3))
    with pytest.raises(ShapeError, match="depthwise_conv1d_causal: return_state: .*K=1"):
        g.depthwise_conv1d_causal(x, g.param("w1", (1, 3)), return_state=True)
    with pytest.raises(ShapeError, match="K=1"):
        R.depthwise_conv1d_causal(np.ones((1, 4, 3)), np.ones((1, 3)), return_state=True)
