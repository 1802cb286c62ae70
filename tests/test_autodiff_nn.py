"""Gradients of the neural-network ops (`rlx_mlir.autodiff.rules_nn`): gather and
embedding, scatter_add, rope, attention and the depthwise causal convolution, and the
builder's Llama decoder block (an hir block: rms_norm, rope, attention, SwiGLU).

Each case builds `loss = Σ op(...) · r` (r a fixed random cotangent), differentiates it
with `rlx.grad`, compiles the gradient graph with `rlx.jit` and compares the gradients
with `torch.autograd` (float64) at rtol 1e-4 / atol 1e-5; the same gradient graph on the
float64 reference executor is compared with central differences of the loss there.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import rlx_mlir as rlx
from rlx_mlir.core.reference_kernels import dequantize_q8_0, quantize_q8_0

torch = pytest.importorskip("torch")
F = torch.nn.functional

RTOL, ATOL = 1e-4, 1e-5
FD_EPS, FD_RTOL, FD_ATOL = 1e-6, 1e-6, 1e-8
FD_PROBES = 4
"""Central differences probe this many random elements of each wrt argument."""

DTYPES = {np.dtype(np.float32): "f32", np.dtype(np.int32): "i32", np.dtype(np.int64): "i64"}


def loss_graph(name, inputs, build):
    """(graph, its loss, names of the cotangent inputs): `build(g, values)` returns the
    op's result(s), each weighted by an input `r<i>` of its shape and summed."""
    g = rlx.Graph(name)
    values = {n: g.input(n, a.shape, DTYPES[a.dtype]) for n, a in inputs.items()}
    outs = build(g, values)
    outs = outs if isinstance(outs, tuple) else (outs,)
    loss = None
    for i, out in enumerate(outs):
        term = g.reduce_sum(g.mul(out, g.input(f"r{i}", out.shape)), tuple(range(out.rank)))
        loss = term if loss is None else g.add(loss, term)
    g.output(loss)
    return g, loss, [f"r{i}" for i in range(len(outs))], [o.shape for o in outs]


def torch_gradients(fn, inputs, cotangents, wrt):
    """d Σ fn(...)·r / d wrt by torch.autograd in float64."""
    t = {n: torch.tensor(a.astype(np.float64) if a.dtype == np.float32 else a,
                         requires_grad=n in wrt) for n, a in inputs.items()}
    outs = fn(**t)
    outs = outs if isinstance(outs, tuple) else (outs,)
    loss = sum((o * torch.tensor(r, dtype=torch.float64)).sum() for o, r in zip(outs, cotangents, strict=True))
    grads = torch.autograd.grad(loss, [t[n] for n in wrt], allow_unused=True)
    return [np.zeros(inputs[n].shape) if d is None else d.numpy() for n, d in zip(wrt, grads, strict=True)]


def central_differences(forward, inputs, name, probes):
    """(d loss / d inputs[name]) at the flat positions `probes`, by central differences of
    the float64 reference executor."""
    out = []
    for i in probes:
        plus, minus = dict(inputs), dict(inputs)
        for sign, d in ((1, plus), (-1, minus)):
            x = inputs[name].astype(np.float64).copy()
            x.flat[i] += sign * FD_EPS
            d[name] = x
        out.append((float(forward(**plus)) - float(forward(**minus))) / (2 * FD_EPS))
    return np.array(out)


@dataclass(frozen=True)
class Case:
    """One op on its own inputs: `build(g, values)` its result(s), `torch_fn(**tensors)`
    the same in torch, `wrt` the inputs differentiated."""

    name: str
    inputs: dict[str, np.ndarray]
    wrt: list[str]
    build: Callable[..., Any]
    torch_fn: Callable[..., Any]

    def feed(self, seed: int = 0):
        """(loss graph, its loss, its arguments: the inputs and the cotangents r<i>)."""
        g, loss, r_names, out_shapes = loss_graph(self.name, self.inputs, self.build)
        rng = np.random.default_rng(seed)
        cotangents = [rng.standard_normal(s).astype(np.float32) for s in out_shapes]
        return g, loss, {**self.inputs, **dict(zip(r_names, cotangents, strict=True))}


def check_against_torch(case: Case) -> float:
    """Compiled gradients vs torch.autograd; returns the largest error."""
    g, loss, feed = case.feed()
    compiled = rlx.jit(rlx.grad(g, loss, wrt=case.wrt))(**feed)[1:]
    cotangents = [feed[n] for n in feed if n not in case.inputs]
    want = torch_gradients(case.torch_fn, case.inputs, cotangents, case.wrt)
    worst = 0.0
    for n, got, w in zip(case.wrt, compiled, want, strict=True):
        got = np.asarray(got)
        assert got.shape == case.inputs[n].shape, n
        np.testing.assert_allclose(got, w, rtol=RTOL, atol=ATOL, err_msg=f"{case.name}: d/d{n}")
        worst = max(worst, float(np.max(np.abs(got - w))))
    return worst


def check_central_differences(case: Case) -> None:
    """The gradient graph on the float64 reference executor vs central differences of the
    loss there, at FD_PROBES random elements of each wrt input."""
    g, loss, feed = case.feed()
    grads_graph = rlx.grad(g, loss, wrt=case.wrt)
    feed64 = {n: a.astype(np.float64) if a.dtype == np.float32 else a for n, a in feed.items()}
    analytic = rlx.reference(grads_graph, dtype="f64")(**feed64)[1:]
    forward = rlx.reference(g, dtype="f64")
    rng = np.random.default_rng(1)
    for n, a in zip(case.wrt, analytic, strict=True):
        probes = rng.choice(feed[n].size, size=min(FD_PROBES, feed[n].size), replace=False)
        numeric = central_differences(forward, feed64, n, probes)
        np.testing.assert_allclose(np.asarray(a).flat[probes], numeric, rtol=FD_RTOL,
                                   atol=FD_ATOL, err_msg=f"{case.name}: d/d{n}")


def has_f64_reference() -> bool:
    return "dtype" in inspect.signature(rlx.reference).parameters


def normal(rng, shape):
    return rng.standard_normal(shape).astype(np.float32)


# ----------------------------------------------------------------------------- gather, embedding


def gather_case(shape, ids_shape, axis) -> Case:
    rng = np.random.default_rng(1)
    ids = rng.integers(0, shape[axis], ids_shape).astype(np.int32)
    ids.flat[0] = ids.flat[-1]  # a repeated id accumulates
    ax = axis % len(shape)

    def torch_fn(x, ids):
        picked = torch.index_select(x, ax, ids.reshape(-1).long())
        return picked.reshape(x.shape[:ax] + ids.shape + x.shape[ax + 1:])

    return Case(f"gather{list(shape)}{list(ids_shape)}axis{axis}",
                {"x": normal(rng, shape), "ids": ids}, ["x"],
                lambda g, v: g.gather(v["x"], v["ids"], axis), torch_fn)


def embedding_case(table, ids_shape) -> Case:
    rng = np.random.default_rng(2)
    ids = rng.integers(0, table[0], ids_shape).astype(np.int64)
    ids.flat[0] = ids.flat[-1]
    return Case(f"embedding{list(table)}{list(ids_shape)}",
                {"table": normal(rng, table), "ids": ids}, ["table"],
                lambda g, v: g.embedding(v["table"], v["ids"]),
                lambda table, ids: F.embedding(ids, table))


def scatter_add_case(shape, ids_shape, axis, dim) -> Case:
    rng = np.random.default_rng(3)

    def torch_fn(u, ids):
        out_shape = list(u.shape)
        out_shape[axis] = dim
        return torch.zeros(out_shape, dtype=u.dtype).index_add(axis, ids.long(), u)

    return Case(f"scatter_add{list(shape)}axis{axis}dim{dim}",
                {"u": normal(rng, shape), "ids": rng.integers(0, dim, ids_shape).astype(np.int32)},
                ["u"], lambda g, v: g.scatter_add(v["u"], v["ids"], axis, dim), torch_fn)


# ----------------------------------------------------------------------------- rope


def torch_rope(x, cos, sin, head_dim, n_rot, style):
    """SPEC's rotary embedding: in each head the first n_rot dims rotate in pairs (half:
    (i, i + n_rot/2); interleaved: (2i, 2i+1)), (x1, x2) -> (x1·c − x2·s, x2·c + x1·s)."""
    s = x.shape[-2]
    xh = x.reshape(*x.shape[:-1], x.shape[-1] // head_dim, head_dim)
    c, sn = cos.reshape(s, 1, n_rot // 2), sin.reshape(s, 1, n_rot // 2)
    if style == "half":
        x1, x2 = xh[..., : n_rot // 2], xh[..., n_rot // 2 : n_rot]
        rotated = torch.cat([x1 * c - x2 * sn, x2 * c + x1 * sn], -1)
    else:
        x1, x2 = xh[..., 0:n_rot:2], xh[..., 1:n_rot:2]
        rotated = torch.stack([x1 * c - x2 * sn, x2 * c + x1 * sn], -1).reshape(
            *x1.shape[:-1], n_rot)
    return torch.cat([rotated, xh[..., n_rot:]], -1).reshape(x.shape)


def rope_case(shape, head_dim, n_rot, style) -> Case:
    rng = np.random.default_rng(5)
    steps = shape[-2]
    inputs = {"x": normal(rng, shape), "cos": normal(rng, (steps, n_rot // 2)),
              "sin": normal(rng, (steps, n_rot // 2))}
    return Case(
        f"rope{list(shape)}hd{head_dim}rot{n_rot}{style}", inputs, ["x", "cos", "sin"],
        lambda g, v: g.rope(v["x"], v["cos"], v["sin"], head_dim=head_dim, n_rot=n_rot,
                            style=style),
        lambda x, cos, sin: torch_rope(x, cos, sin, head_dim, n_rot, style))


# ----------------------------------------------------------------------------- attention


def torch_attention(q, k, v, mask=None, *, heads, head_dim, kv_heads, kind, scale, window=None):
    """Grouped-query attention as docs/semantics.md: query head h reads kv head
    h // (H/Hkv); causal keys j ≤ i + (T−S) (and j > i + (T−S) − W with a window); custom:
    a 0 drops; bias: added to the scaled scores; a row dropping every key gives zeros."""
    unbatched = q.dim() == 2
    if unbatched:
        q, k, v = q[None], k[None], v[None]
    b, s, t = q.shape[0], q.shape[1], k.shape[1]
    group = heads // kv_heads
    qh = q.reshape(b, s, heads, head_dim).transpose(1, 2)
    kh = k.reshape(b, t, kv_heads, head_dim).transpose(1, 2).repeat_interleave(group, 1)
    vh = v.reshape(b, t, kv_heads, head_dim).transpose(1, 2).repeat_interleave(group, 1)
    scores = scale * qh @ kh.transpose(-1, -2)
    if kind == "causal":
        i, j = torch.arange(s)[:, None], torch.arange(t)[None, :]
        keep = j <= i + (t - s)
        if window is not None:
            keep &= j > i + (t - s) - window
        scores = scores.masked_fill(~keep, float("-inf"))
    elif kind == "custom":
        scores = scores.masked_fill(mask == 0, float("-inf"))
    elif kind == "bias":
        scores = scores + mask
    out = (torch.softmax(scores, -1).nan_to_num(0.0) @ vh).transpose(1, 2).reshape(b, s, -1)
    return out[0] if unbatched else out


def attention_case(lead, s, t, heads, kv_heads, head_dim, kind, mask_shape=None, window=None,
                   scale=None) -> Case:
    rng = np.random.default_rng(6)
    inputs = {"q": normal(rng, (*lead, s, heads * head_dim)),
              "k": normal(rng, (*lead, t, kv_heads * head_dim)),
              "v": normal(rng, (*lead, t, kv_heads * head_dim))}
    wrt = ["q", "k", "v"]
    if kind == "bias":
        inputs["m"] = normal(rng, mask_shape)
        wrt.append("m")  # a float bias mask is differentiable
    elif kind == "custom":
        keep = rng.random(mask_shape) > 0.3
        keep[..., 0] = True  # every row keeps a key (torch's gradient of a dropped row is nan)
        inputs["m"] = keep.astype(np.float32)
    props = dict(num_heads=heads, head_dim=head_dim, num_kv_heads=kv_heads, mask_kind=kind,
                 scale=scale, window=window)
    used_scale = float(np.float32(1 / math.sqrt(head_dim) if scale is None else scale))
    return Case(
        f"attention{list(lead)}S{s}T{t}H{heads}kv{kv_heads}D{head_dim}{kind}"
        f"{list(mask_shape or [])}w{window}",
        inputs, wrt,
        lambda g, v: g.attention(v["q"], v["k"], v["v"], v.get("m"), **props),
        lambda q, k, v, m=None: torch_attention(q, k, v, m, heads=heads, head_dim=head_dim,
                                                kv_heads=kv_heads, kind=kind,
                                                scale=used_scale, window=window))


# ----------------------------------------------------------------------------- depthwise conv


def torch_causal_conv(x, w, left_pad=None, return_state=False):
    """torch conv1d with groups = C over concat(left_pad or zeros, x) along time."""
    b, _, c = x.shape
    taps = w.shape[0]
    pad = torch.zeros(b, taps - 1, c, dtype=x.dtype) if left_pad is None else left_pad
    padded = torch.cat([pad, x], 1)
    y = F.conv1d(padded.transpose(1, 2), w.t().unsqueeze(1), groups=c).transpose(1, 2)
    return (y, padded[:, padded.shape[1] - (taps - 1):]) if return_state else y


def conv_case(b, s, c, taps, with_pad, return_state) -> Case:
    rng = np.random.default_rng(7)
    inputs = {"x": normal(rng, (b, s, c)), "w": normal(rng, (taps, c))}
    wrt = ["x", "w"]
    if with_pad:
        inputs["pad"] = normal(rng, (b, taps - 1, c))
        wrt.append("pad")
    return Case(
        f"conv_B{b}S{s}C{c}K{taps}{'_pad' if with_pad else ''}{'_state' if return_state else ''}",
        inputs, wrt,
        lambda g, v: g.depthwise_conv1d_causal(v["x"], v["w"], v.get("pad"),
                                               return_state=return_state),
        lambda x, w, pad=None: torch_causal_conv(x, w, pad, return_state))


# ----------------------------------------------------------------------------- a whole block


def torch_llama_block(x, ln1, wq, wk, wv, wo, ln2, wg, wu, wd, cos, sin, *, heads, kv_heads,
                      head_dim, eps=1e-5):
    """reference_kernels.llama_decoder_block in torch: pre-norm attention (rope over the
    whole head, causal, scale 1/√D) and SwiGLU FFN, residuals, weights [in, out]."""
    def rms(v, gamma):
        return v / torch.sqrt((v * v).mean(-1, keepdim=True) + eps) * gamma

    a = rms(x, ln1)
    q = torch_rope(a @ wq, cos, sin, head_dim, head_dim, "half")
    k = torch_rope(a @ wk, cos, sin, head_dim, head_dim, "half")
    att = torch_attention(q, k, a @ wv, heads=heads, head_dim=head_dim, kv_heads=kv_heads,
                          kind="causal", scale=float(np.float32(1 / math.sqrt(head_dim))))
    h = x + att @ wo
    n = rms(h, ln2)
    return h + (F.silu(n @ wg) * (n @ wu)) @ wd


def llama_block_case(lead, steps, heads, kv_heads, head_dim, hidden) -> Case:
    rng = np.random.default_rng(8)
    d = heads * head_dim
    shapes = {"x": (*lead, steps, d), "ln1": (d,), "wq": (d, d), "wk": (d, kv_heads * head_dim),
              "wv": (d, kv_heads * head_dim), "wo": (d, d), "ln2": (d,), "wg": (d, hidden),
              "wu": (d, hidden), "wd": (hidden, d)}
    inputs = {n: (normal(rng, s) * (1.0 if len(s) != 2 or n == "x" else 0.3)).astype(np.float32)
              for n, s in shapes.items()}
    angles = np.arange(steps)[:, None] / 10000 ** (np.arange(head_dim // 2) / (head_dim // 2))
    inputs["cos"], inputs["sin"] = (np.cos(angles).astype(np.float32),
                                    np.sin(angles).astype(np.float32))
    props = dict(heads=heads, kv_heads=kv_heads, head_dim=head_dim)

    def build(g, v):
        return g.llama_decoder_block(
            v["x"], v["ln1"], None, v["wq"], v["wk"], v["wv"], v["wo"], v["ln2"], None, v["wg"],
            v["wu"], v["wd"], v["cos"], v["sin"], num_heads=heads, head_dim=head_dim,
            num_kv_heads=kv_heads)

    return Case(f"llama_block{list(lead)}S{steps}H{heads}kv{kv_heads}D{head_dim}F{hidden}",
                inputs, list(shapes), build, lambda **t: torch_llama_block(**t, **props))


CASES = [
    gather_case((7, 5), (4,), 0),
    gather_case((3, 9, 17), (2, 3), 1),
    gather_case((1, 33), (3,), 0),          # a size-1 table: every id repeats
    gather_case((2, 4, 3), (5,), -1),
    embedding_case((10, 17), (2, 3)),
    embedding_case((5, 1), (4,)),
    embedding_case((3, 33), (1, 1)),
    scatter_add_case((2, 5, 3), (5,), 1, 4),
    scatter_add_case((6, 17), (6,), 0, 2),
    rope_case((5, 16), 8, 8, "half"),
    rope_case((2, 3, 12), 6, 4, "interleaved"),
    rope_case((1, 1, 4), 4, 2, "half"),
    rope_case((2, 4, 34), 17, 6, "interleaved"),   # n_rot < head_dim: the rest passes
    rope_case((1, 5, 33), 33, 32, "half"),
    attention_case((2,), 5, 5, 4, 2, 8, "causal"),
    attention_case((1,), 7, 7, 3, 1, 5, "causal", window=3),  # sliding window, one kv head
    attention_case((2,), 3, 6, 2, 2, 4, "causal", scale=0.3),  # T > S: the causal offset
    attention_case((1,), 4, 6, 2, 2, 4, "causal", window=2),
    attention_case((), 4, 6, 4, 2, 4, "none"),                 # unbatched
    attention_case((2,), 4, 5, 4, 2, 3, "bias", (2, 4, 4, 5)),
    attention_case((2,), 4, 5, 4, 1, 3, "bias", (1, 1, 4, 5)),
    attention_case((), 3, 3, 2, 1, 17, "bias", (3, 3)),
    attention_case((2,), 4, 5, 2, 1, 4, "custom", (2, 1, 4, 5)),
    attention_case((1,), 1, 33, 2, 2, 4, "custom", (1, 2, 1, 33)),
    conv_case(2, 5, 3, 3, False, False),
    conv_case(1, 7, 17, 4, True, False),
    conv_case(2, 4, 33, 2, True, True),
    conv_case(1, 1, 5, 1, False, False),    # K = 1: no padding
    conv_case(3, 2, 5, 4, False, True),     # S < K-1: the window holds rows of the padding
    conv_case(1, 6, 1, 3, True, True),
    llama_block_case((2,), 5, 4, 2, 4, 24),   # hir blocks through their mir expansion
    llama_block_case((), 3, 2, 1, 8, 17),
]


# ----------------------------------------------------------------------------- tests


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_gradient_matches_torch(case):
    check_against_torch(case)


@pytest.mark.skipif(not has_f64_reference(), reason="rlx.reference(g, dtype='f64') not merged")
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_gradient_matches_central_differences(case):
    check_central_differences(case)


def test_ids_and_quantized_tables_have_no_gradient():
    """The ids and the ui8 table of a quantized embedding are refused as wrt; a weight
    after the lookup gets the dequantized rows."""
    g = rlx.Graph("quantized")
    table = g.param("table", (10, 34), "ui8")
    ids = g.input("ids", (3,), "i32")
    w = g.param("w", (3, 32))
    loss = g.reduce_sum(g.mul(g.embedding(table, ids, scheme="q8_0"), w), (0, 1))
    g.output(loss)
    for name in ("table", "ids"):
        with pytest.raises(rlx.RlxError, match="not differentiable"):
            rlx.grad(g, loss, wrt=[name])
    packed = quantize_q8_0(np.random.default_rng(4).standard_normal((10, 32)).astype(np.float32))
    picked = np.array([4, 0, 4], np.int32)
    _, dw = rlx.jit(rlx.grad(g, loss, wrt=["w"]))(table=packed, ids=picked,
                                                   w=np.ones((3, 32), np.float32))
    np.testing.assert_allclose(dw, dequantize_q8_0(packed)[picked], rtol=RTOL, atol=ATOL)


def symbolic_embedding(steps: int) -> tuple[Case, dict[str, tuple]]:
    rng = np.random.default_rng(9)
    case = Case("embedding", {"t": normal(rng, (10, 17)),
                              "ids": rng.integers(0, 10, (2, steps)).astype(np.int32)},
                ["t"], lambda g, v: g.embedding(v["t"], v["ids"]),
                lambda t, ids: F.embedding(ids.long(), t))
    return case, {"ids": (2, "S")}


def symbolic_rope(steps: int) -> tuple[Case, dict[str, tuple]]:
    return (rope_case((2, steps, 12), 6, 4, "interleaved"),
            {"x": (2, "S", 12), "cos": ("S", 2), "sin": ("S", 2)})


@pytest.mark.parametrize("make", [symbolic_embedding, symbolic_rope], ids=lambda m: m.__name__)
def test_symbolic_lengths(make):
    """One compile over a symbolic sequence length S: the embedding's table gradient (a
    scatter_add of [2, S, D] rows) and rope's gradients match torch at S = 1, 5, 17."""
    case, symbolic = make(1)
    g = rlx.Graph("symbolic")
    values = {n: g.input(n, symbolic.get(n, a.shape), DTYPES[a.dtype])
              for n, a in case.inputs.items()}
    out = case.build(g, values)
    loss = g.reduce_sum(g.mul(out, g.input("r0", out.shape)), tuple(range(out.rank)))
    g.output(loss)
    step = rlx.jit(rlx.grad(g, loss, wrt=case.wrt))
    for steps in (1, 5, 17):
        case, _ = make(steps)
        shape = [steps if d == "S" else d for d in out.shape]
        r = np.random.default_rng(steps).standard_normal(shape).astype(np.float32)
        got = step(**case.inputs, r0=r)[1:]
        want = torch_gradients(case.torch_fn, case.inputs, [r], case.wrt)
        for n, a, w in zip(case.wrt, got, want, strict=True):
            np.testing.assert_allclose(a, w, rtol=RTOL, atol=ATOL, err_msg=f"S={steps}: d/d{n}")


@pytest.mark.parametrize("method,match", [("attention", "mir.attention: the gradient needs a static"),
                                          ("conv", "mir.depthwise_conv1d: the gradient needs a static")])
def test_symbolic_lengths_refused_by_name(method, match):
    """attention's and the convolution's backward need a static length (a matmul of two
    symbolic operands, shifted slices): an RlxError names the op."""
    g = rlx.Graph("symbolic")
    x = g.input("x", (2, "S", 8))
    if method == "attention":
        y = g.attention(x, x, x, num_heads=2, head_dim=4, mask_kind="causal")
    else:
        y = g.depthwise_conv1d_causal(x, g.param("w", (3, 8)))
    loss = g.reduce_sum(y, (0, 1, 2))
    g.output(loss)
    with pytest.raises(rlx.RlxError, match=match):
        rlx.grad(g, loss, wrt=["x"])


def test_a_01_mask_in_wrt_is_an_error():
    """A 0/1 mask has no gradient (SPEC): naming it in wrt is an RlxError, not zeros."""
    g = rlx.Graph("masked")
    x = g.input("x", (1, 3, 8))
    mask = g.input("m", (3, 3))
    y = g.attention(x, x, x, mask, num_heads=2, head_dim=4, mask_kind="custom")
    loss = g.reduce_sum(y, (0, 1, 2))
    g.output(loss)
    with pytest.raises(rlx.RlxError, match="'m' only through operands that have no gradient"):
        rlx.grad(g, loss, wrt=["x", "m"])
    assert rlx.grad(g, loss, wrt=["x"]) is not None
