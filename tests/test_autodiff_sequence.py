"""Gradients of the sequence ops (SPEC "Automatic differentiation", issue 23 item 2):
the reverse-pass ops `selective_scan_backward` / `gated_delta_net_backward` (compiled and
reference) against torch.autograd of a plain loop over the SPEC formulas, `rlx.grad`
through `selective_scan`, `gated_delta_net` and `g.scan` (xs, consts, trajectory,
checkpoint_every) against torch.autograd, against central differences in float64 on the
reference executor, and the arena of a checkpointed scan's backward, O(length/k + k).

Tolerances: rtol 1e-4 / atol 1e-5 against torch in float64 (the recurrences here run at
most 17 steps with decays below 1, so float32 rounding stays far below them)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import rlx_mlir as rlx
from rlx_mlir.core import reference_kernels as K

torch = pytest.importorskip("torch")

RTOL, ATOL = 1e-4, 1e-5


def close(got, want, rtol=RTOL, atol=ATOL):
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64),
                                   rtol=rtol, atol=atol, err_msg=f"gradient {i}")


def f32(**arrays):
    return {k: np.asarray(v, np.float32) for k, v in arrays.items()}


# ----------------------------------------------------------------------------- torch loops


def torch_selective_scan(x, delta, a, b, c, state=None):
    """SPEC: state = exp(Δ_t·A) ⊙ state + (Δ_t·x_t) ⊗ B_t, y_t = state · C_t."""
    batch, steps, h = x.shape
    state = torch.zeros(batch, h, a.shape[1], dtype=x.dtype) if state is None else state
    ys = []
    for t in range(steps):
        dt = delta[:, t, :, None]
        state = torch.exp(dt * a) * state + (dt * x[:, t, :, None]) * b[:, t, None, :]
        ys.append(torch.einsum("bhn,bn->bh", state, c[:, t]))
    return torch.stack(ys, 1), state


def torch_gated_delta_net(q, k, v, g, beta, state=None):
    """SPEC: S = exp(g_t)·S; kv = Sᵀk_t; δ = β_t(v_t − kv); S = S + k_t δᵀ; o_t = Sᵀq_t."""
    batch, steps, heads, n = q.shape
    m = v.shape[3]
    state = torch.zeros(batch, heads, n, m, dtype=q.dtype) if state is None else state
    outs = []
    for t in range(steps):
        state = torch.exp(g[:, t, :, None, None]) * state
        kv = torch.einsum("bhnm,bhn->bhm", state, k[:, t])
        d = beta[:, t, :, None] * (v[:, t] - kv)
        state = state + k[:, t, :, :, None] * d[:, :, None, :]
        outs.append(torch.einsum("bhnm,bhn->bhm", state, q[:, t]))
    return torch.stack(outs, 1), state


def torch_grads(fn, inputs, cotangents):
    """torch.autograd (float64) of sum(<fn(*inputs)[i], cotangents[i]>)."""
    ts = [torch.tensor(np.asarray(a, np.float64), requires_grad=True) for a in inputs]
    outs = fn(*ts)
    loss = sum((o * torch.tensor(np.asarray(ct, np.float64))).sum()
               for o, ct in zip(outs, cotangents, strict=True) if ct is not None)
    grads = torch.autograd.grad(loss, ts, allow_unused=True)
    return [np.zeros(t.shape) if g is None else g.numpy() for g, t in zip(grads, ts, strict=True)]


# ----------------------------------------------------------------------------- data

SS_SHAPES = [(1, 1, 3, 5), (2, 5, 3, 5), (2, 17, 9, 19), (1, 17, 4, 1)]
"""(b, s, h, n): h, n off the vector width, s = 1, 5, 17, n = 1."""
GDN_SHAPES = [(1, 1, 1, 3, 5), (2, 5, 2, 5, 3), (1, 17, 3, 9, 19), (2, 5, 1, 17, 1)]
"""(b, s, H, n, m)."""


def ss_data(b, s, h, n, seed=0):
    rng = np.random.default_rng(seed)
    return f32(x=rng.standard_normal((b, s, h)), delta=rng.uniform(0.1, 1.0, (b, s, h)),
               A=-rng.uniform(0.5, 2.0, (h, n)), B=rng.standard_normal((b, s, n)),
               C=rng.standard_normal((b, s, n)), init=rng.standard_normal((b, h, n)),
               dy=rng.standard_normal((b, s, h)), d_final=rng.standard_normal((b, h, n)))


def gdn_data(b, s, heads, n, m, seed=0):
    rng = np.random.default_rng(seed)
    return f32(q=rng.standard_normal((b, s, heads, n)) * 0.5,
               k=rng.standard_normal((b, s, heads, n)) * 0.5,
               v=rng.standard_normal((b, s, heads, m)), g=-rng.uniform(0.05, 1.0, (b, s, heads)),
               beta=rng.uniform(0.0, 1.0, (b, s, heads)), init=rng.standard_normal((b, heads, n, m)),
               do=rng.standard_normal((b, s, heads, m)), d_final=rng.standard_normal((b, heads, n, m)))


SS_IN = ("x", "delta", "A", "B", "C")
GDN_IN = ("q", "k", "v", "g", "beta")


# ----------------------------------------------------------------------------- backward ops


def ss_reference_grads(data, with_state):
    """The reference reverse pass's gradients: its dA rows summed, the states dropped."""
    dx, dd, da_rows, db, dc, _, *d_init = K.selective_scan_backward(
        *(data[k] for k in (*SS_IN, "dy", "d_final")), data["init"] if with_state else None)
    return [dx, dd, da_rows.sum(0), db, dc, *d_init]


def gdn_reference_grads(data, with_state):
    """The reference reverse pass's gradients (the states dropped)."""
    dq, dk, dv, dg, d_beta, _, *d_init = K.gated_delta_net_backward(
        *(data[k] for k in (*GDN_IN, "do", "d_final")), data["init"] if with_state else None)
    return [dq, dk, dv, dg, d_beta, *d_init]



def ss_backward_graph(b, s, h, n, with_state):
    g = rlx.Graph("ss_backward")
    shapes = {"x": (b, s, h), "delta": (b, s, h), "A": (h, n), "B": (b, s, n), "C": (b, s, n),
              "dy": (b, s, h), "d_final": (b, h, n)}
    v = {name: g.input(name, shape) for name, shape in shapes.items()}
    init = g.input("init", (b, h, n)) if with_state else None
    g.output(*g.selective_scan_backward(*(v[k] for k in (*SS_IN, "dy", "d_final")), init))
    return g


@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("shape", SS_SHAPES, ids=str)
def test_selective_scan_backward_op_matches_torch(shape, with_state):
    data = ss_data(*shape)
    names = [*SS_IN, *(["init"] if with_state else [])]
    want = torch_grads(torch_selective_scan, [data[k] for k in names],
                       [data["dy"], data["d_final"]])
    feed = {k: data[k] for k in (*names, "dy", "d_final")}
    close(rlx.jit(ss_backward_graph(*shape, with_state))(**feed), want)
    close(ss_reference_grads(data, with_state), want)


def gdn_backward_graph(b, s, heads, n, m, with_state):
    g = rlx.Graph("gdn_backward")
    shapes = {"q": (b, s, heads, n), "k": (b, s, heads, n), "v": (b, s, heads, m),
              "g": (b, s, heads), "beta": (b, s, heads), "do": (b, s, heads, m),
              "d_final": (b, heads, n, m)}
    v = {name: g.input(name, shape) for name, shape in shapes.items()}
    init = g.input("init", (b, heads, n, m)) if with_state else None
    g.output(*g.gated_delta_net_backward(*(v[k] for k in (*GDN_IN, "do", "d_final")), init))
    return g


@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("shape", GDN_SHAPES, ids=str)
def test_gated_delta_net_backward_op_matches_torch(shape, with_state):
    data = gdn_data(*shape)
    names = [*GDN_IN, *(["init"] if with_state else [])]
    want = torch_grads(torch_gated_delta_net, [data[k] for k in names],
                       [data["do"], data["d_final"]])
    feed = {k: data[k] for k in (*names, "do", "d_final")}
    close(rlx.jit(gdn_backward_graph(*shape, with_state))(**feed), want)
    close(gdn_reference_grads(data, with_state), want)


def test_backward_ops_split_over_threads():
    """The reverse passes' work (batch rows of the selective scan, (b, head) items of
    the delta net) spreads over threads with the same result, bit for bit."""
    shape = (3, 5, 3, 17, 17)
    data = gdn_data(*shape)
    feed = {k: data[k] for k in (*GDN_IN, "init", "do", "d_final")}
    serial = rlx.jit(gdn_backward_graph(*shape, True))(**feed)
    close(rlx.jit(gdn_backward_graph(*shape, True), threads=2)(**feed), serial, rtol=0, atol=0)
    shape = (3, 5, 9, 19)
    data = ss_data(*shape)
    feed = {k: data[k] for k in (*SS_IN, "init", "dy", "d_final")}
    serial = rlx.jit(ss_backward_graph(*shape, True))(**feed)
    close(rlx.jit(ss_backward_graph(*shape, True), threads=2)(**feed), serial, rtol=0, atol=0)


def test_backward_ops_take_a_symbolic_sequence_length():
    """One compile for every s (the kernels read s at run time), on two threads."""
    b, h, n, heads, m = 2, 5, 3, 2, 5
    g = rlx.Graph("symbolic_s")
    ss = {k: g.input(k, shape) for k, shape in
          {"x": (b, "S", h), "delta": (b, "S", h), "A": (h, n), "B": (b, "S", n),
           "C": (b, "S", n), "dy": (b, "S", h), "d_final": (b, h, n)}.items()}
    init = g.input("init", (b, h, n))
    gdn = {k: g.input(f"gdn_{k}", shape) for k, shape in
           {"q": (b, "S", heads, n), "k": (b, "S", heads, n), "v": (b, "S", heads, m),
            "g": (b, "S", heads), "beta": (b, "S", heads), "do": (b, "S", heads, m),
            "d_final": (b, heads, n, m)}.items()}
    g.output(*g.selective_scan_backward(*(ss[k] for k in (*SS_IN, "dy", "d_final")), init),
             *g.gated_delta_net_backward(*(gdn[k] for k in (*GDN_IN, "do", "d_final"))))
    model = rlx.jit(g, threads=2)
    for s in (1, 4, 9):
        sd, gd = ss_data(b, s, h, n), gdn_data(b, s, heads, n, m)
        feed = {k: sd[k] for k in (*SS_IN, "dy", "d_final", "init")}
        feed |= {f"gdn_{k}": gd[k] for k in (*GDN_IN, "do", "d_final")}
        close(model(**feed), [*ss_reference_grads(sd, True), *gdn_reference_grads(gd, False)])


# ----------------------------------------------------------------------------- rlx.grad


def ss_loss_graph(b, s, h, n, with_state, return_state, use_output=True):
    """loss = <y, dy> (+ <final_state, d_final>): its gradient is the VJP at (dy, d_final);
    without `use_output`, only the final state's term."""
    g = rlx.Graph("ss_loss")
    v = {name: g.input(name, shape) for name, shape in
         {"x": (b, s, h), "delta": (b, s, h), "A": (h, n), "B": (b, s, n), "C": (b, s, n)}.items()}
    init = g.input("init", (b, h, n)) if with_state else None
    dy, d_final = g.input("dy", (b, s, h)), g.input("d_final", (b, h, n))
    result = g.selective_scan(*(v[k] for k in SS_IN), initial_state=init, return_state=return_state)
    y, final = result if return_state else (result, None)
    terms = [g.reduce_sum(y * dy, (0, 1, 2))] if use_output else []
    if final is not None:
        terms.append(g.reduce_sum(final * d_final, (0, 1, 2)))
    loss = terms[0] if len(terms) == 1 else terms[0] + terms[1]
    g.output(loss)
    return g, loss


STATE_CASES = [(False, False, True), (True, True, True), (False, True, True), (True, True, False)]
"""(initial_state, return_state, the output in the loss): the last, the final state only."""


@pytest.mark.parametrize("with_state,return_state,use_output", STATE_CASES)
@pytest.mark.parametrize("shape", [(2, 5, 3, 5), (1, 17, 9, 3)], ids=str)
def test_grad_through_selective_scan_matches_torch(shape, with_state, return_state, use_output):
    data = ss_data(*shape, seed=1)
    names = [*SS_IN, *(["init"] if with_state else [])]
    g, loss = ss_loss_graph(*shape, with_state, return_state, use_output)
    feed = {k: data[k] for k in (*names, "dy", "d_final")}
    got = rlx.jit(rlx.grad(g, loss, names))(**feed)[1:]
    want = torch_grads(torch_selective_scan, [data[k] for k in names],
                       [data["dy"] if use_output else None,
                        data["d_final"] if return_state else None])
    close(got, want)


def gdn_loss_graph(b, s, heads, n, m, with_state, return_state, use_output=True):
    g = rlx.Graph("gdn_loss")
    v = {name: g.input(name, shape) for name, shape in
         {"q": (b, s, heads, n), "k": (b, s, heads, n), "v": (b, s, heads, m),
          "g": (b, s, heads), "beta": (b, s, heads)}.items()}
    init = g.input("init", (b, heads, n, m)) if with_state else None
    do, d_final = g.input("do", (b, s, heads, m)), g.input("d_final", (b, heads, n, m))
    result = g.gated_delta_net(*(v[k] for k in GDN_IN), initial_state=init,
                               return_state=return_state)
    o, final = result if return_state else (result, None)
    terms = [g.reduce_sum(o * do, (0, 1, 2, 3))] if use_output else []
    if final is not None:
        terms.append(g.reduce_sum(final * d_final, (0, 1, 2, 3)))
    loss = terms[0] if len(terms) == 1 else terms[0] + terms[1]
    g.output(loss)
    return g, loss


@pytest.mark.parametrize("with_state,return_state,use_output", STATE_CASES)
@pytest.mark.parametrize("shape", [(2, 5, 2, 5, 3), (1, 17, 1, 9, 9)], ids=str)
def test_grad_through_gated_delta_net_matches_torch(shape, with_state, return_state, use_output):
    data = gdn_data(*shape, seed=1)
    names = [*GDN_IN, *(["init"] if with_state else [])]
    g, loss = gdn_loss_graph(*shape, with_state, return_state, use_output)
    feed = {k: data[k] for k in (*names, "do", "d_final")}
    got = rlx.jit(rlx.grad(g, loss, names))(**feed)[1:]
    want = torch_grads(torch_gated_delta_net, [data[k] for k in names],
                       [data["do"] if use_output else None,
                        data["d_final"] if return_state else None])
    close(got, want)


# ----------------------------------------------------------------------------- scan

LENGTH, WIDTH = 6, 5


def rnn_step() -> rlx.Graph:
    """c' = tanh(c @ W + x_t) * gate (gate a const, W a const, x_t a slice of xs)."""
    b = rlx.Graph("rnn_step")
    c, x = b.input("c", (WIDTH,)), b.input("x", (WIDTH,))
    w, gate = b.input("w", (WIDTH, WIDTH)), b.input("gate", (WIDTH,))
    b.output(b.tanh(b.reshape(b.matmul(b.reshape(c, (1, WIDTH)), w), (WIDTH,)) + x) * gate)
    return b


def scan_loss_graph(trajectory=False, checkpoint_every=None):
    """loss = Σ final·r (+ Σ trajectory² with `trajectory`)."""
    g = rlx.Graph("scan_loss")
    c0, xs = g.input("c0", (WIDTH,)), g.input("xs", (LENGTH, WIDTH))
    w, gate, r = g.input("w", (WIDTH, WIDTH)), g.input("gate", (WIDTH,)), g.input("r", (WIDTH,))
    result = g.scan(c0, rnn_step(), LENGTH, xs=[xs], consts=[w, gate], trajectory=trajectory,
                    checkpoint_every=checkpoint_every)
    final, every = result if trajectory else (result, None)
    loss = g.reduce_sum(final * r, (0,))
    if every is not None:
        loss = loss + g.reduce_sum(every * every, (0, 1))
    g.output(loss)
    return g, loss


def torch_scan_loss(c0, xs, w, gate, r, trajectory):
    c, every = c0, []
    for t in range(xs.shape[0]):
        c = torch.tanh(c @ w + xs[t]) * gate
        every.append(c)
    loss = (c * r).sum()
    return loss + (torch.stack(every) ** 2).sum() if trajectory else loss


SCAN_WRT = ["c0", "xs", "w", "gate"]


def scan_data(seed=0):
    rng = np.random.default_rng(seed)
    return f32(c0=rng.standard_normal(WIDTH), xs=rng.standard_normal((LENGTH, WIDTH)),
               w=rng.standard_normal((WIDTH, WIDTH)) * 0.5, gate=rng.uniform(0.5, 1.5, WIDTH),
               r=rng.standard_normal(WIDTH))


@pytest.mark.parametrize("trajectory,checkpoint_every",
                         [(False, None), (True, None), (False, 1), (False, 2), (False, 3),
                          (False, 4), (False, LENGTH), (True, 2)])
def test_grad_through_scan_matches_torch(trajectory, checkpoint_every):
    """init (carry), xs and consts (summed over the steps), with the trajectory's
    cotangent too; checkpointed (4: segments and a tail of 2) or not, the same."""
    data = scan_data()
    g, loss = scan_loss_graph(trajectory, checkpoint_every)
    got = rlx.jit(rlx.grad(g, loss, SCAN_WRT))(**data)
    ts = {k: torch.tensor(v.astype(np.float64), requires_grad=True) for k, v in data.items()}
    want_loss = torch_scan_loss(*(ts[k] for k in ("c0", "xs", "w", "gate", "r")), trajectory)
    want = torch.autograd.grad(want_loss, [ts[k] for k in SCAN_WRT])
    close(got, [want_loss.detach().numpy(), *(w.numpy() for w in want)])


def test_grad_through_scan_of_integer_xs():
    """An integer xs (here steps the body does not read) gets no gradient; the float carry
    and consts do."""
    g = rlx.Graph("int_xs")
    c0, ids, w = g.input("c0", (WIDTH,)), g.input("ids", (LENGTH, 2), "i32"), g.input("w", (WIDTH,))
    b = rlx.Graph("step")
    c, _, bw = b.input("c", (WIDTH,)), b.input("i", (2,), "i32"), b.input("w", (WIDTH,))
    b.output(b.tanh(c * bw))
    loss = g.reduce_sum(g.scan(c0, b, LENGTH, xs=[ids], consts=[w]), (0,))
    g.output(loss)
    data = scan_data()
    feed = {"c0": data["c0"], "w": data["gate"], "ids": np.zeros((LENGTH, 2), np.int32)}
    got = rlx.jit(rlx.grad(g, loss, ["c0", "w"]))(**feed)
    ts = {k: torch.tensor(feed[k].astype(np.float64), requires_grad=True) for k in ("c0", "w")}
    c = ts["c0"]
    for _ in range(LENGTH):
        c = torch.tanh(c * ts["w"])
    want = torch.autograd.grad(c.sum(), [ts["c0"], ts["w"]])
    close(got[1:], [w.numpy() for w in want])


# ----------------------------------------------------------------------------- layers

BATCH, STEPS, D_MODEL = 2, 5, 6


def layer_grads_close(g, loss, params, torch_loss, rtol=RTOL, atol=ATOL):
    """rlx.grad of `loss` over every input of `params` (compiled) against torch.autograd
    of `torch_loss(**tensors)` in float64."""
    names = list(params)
    got = rlx.jit(rlx.grad(g, loss, names))(**params)
    ts = {k: torch.tensor(v.astype(np.float64), requires_grad=True) for k, v in params.items()}
    want_loss = torch_loss(**ts)
    want = torch.autograd.grad(want_loss, [ts[k] for k in names])
    close(got, [want_loss.detach().numpy(), *(w.numpy() for w in want)], rtol, atol)


def test_grad_of_a_mamba_mixer_matches_torch():
    """A Mamba mixer: in_proj, the causal depthwise conv (K = 4), silu, x_proj to (Δ, B, C),
    softplus(dt_proj), A = −exp(A_log), selective_scan + D·x, gated by silu(z), out_proj."""
    h, n, r = 7, 3, 2
    rng = np.random.default_rng(4)
    params = f32(x=rng.standard_normal((BATCH, STEPS, D_MODEL)),
                 w_in=rng.standard_normal((D_MODEL, 2 * h)) * 0.4,
                 w_conv=rng.standard_normal((4, h)) * 0.5,
                 w_x=rng.standard_normal((h, r + 2 * n)) * 0.4,
                 w_dt=rng.standard_normal((r, h)) * 0.4, b_dt=rng.standard_normal(h) * 0.1,
                 a_log=rng.standard_normal((h, n)) * 0.3, d=rng.standard_normal(h),
                 w_out=rng.standard_normal((h, D_MODEL)) * 0.4, probe=rng.standard_normal(D_MODEL))
    g = rlx.Graph("mamba_mixer")
    v = {k: g.input(k, a.shape) for k, a in params.items()}
    xz = g.matmul(v["x"], v["w_in"])
    xi = g.silu(g.depthwise_conv1d_causal(g.narrow(xz, 2, 0, h), v["w_conv"]))
    z = g.narrow(xz, 2, h, h)
    dbc = g.matmul(xi, v["w_x"])
    delta = g.softplus(g.matmul(g.narrow(dbc, 2, 0, r), v["w_dt"]) + v["b_dt"])
    y = g.selective_scan(xi, delta, -g.exp(v["a_log"]), g.narrow(dbc, 2, r, n),
                         g.narrow(dbc, 2, r + n, n)) + xi * v["d"]
    out = g.matmul(y * g.silu(z), v["w_out"])
    loss = g.reduce_sum(out * v["probe"], (0, 1, 2))
    g.output(loss)

    def torch_loss(x, w_in, w_conv, w_x, w_dt, b_dt, a_log, d, w_out, probe):
        xz = x @ w_in
        padded = torch.nn.functional.pad(xz[..., :h].transpose(1, 2), (3, 0))
        conv = torch.nn.functional.conv1d(padded, w_conv.T.unsqueeze(1), groups=h)
        xi, z = torch.nn.functional.silu(conv.transpose(1, 2)), xz[..., h:]
        dbc = xi @ w_x
        delta = torch.nn.functional.softplus(dbc[..., :r] @ w_dt + b_dt)
        y = torch_selective_scan(xi, delta, -torch.exp(a_log), dbc[..., r:r + n],
                                 dbc[..., r + n:])[0] + xi * d
        return (((y * torch.nn.functional.silu(z)) @ w_out) * probe).sum()

    layer_grads_close(g, loss, params, torch_loss)


def test_grad_of_a_gated_delta_net_layer_matches_torch():
    """A Qwen3.5-style linear-attention layer: q, k, v projections through the causal
    depthwise conv (K = 4) and silu, l2-normalized q and k (q scaled by 1/sqrt(n)), g =
    −exp(A_log)·softplus(a + dt_bias), beta = sigmoid(b), the gated delta rule, the gated
    output norm rms_norm(o)·silu(z), out_proj."""
    heads, n = 2, 3
    rng = np.random.default_rng(5)
    params = f32(x=rng.standard_normal((BATCH, STEPS, D_MODEL)),
                 wq=rng.standard_normal((D_MODEL, heads * n)) * 0.4,
                 wk=rng.standard_normal((D_MODEL, heads * n)) * 0.4,
                 wv=rng.standard_normal((D_MODEL, heads * n)) * 0.4,
                 wc=rng.standard_normal((4, 3 * heads * n)) * 0.5,
                 wz=rng.standard_normal((D_MODEL, heads * n)) * 0.4,
                 norm=1 + rng.standard_normal(n) * 0.1,
                 wa=rng.standard_normal((D_MODEL, heads)) * 0.4,
                 wb=rng.standard_normal((D_MODEL, heads)) * 0.4,
                 a_log=rng.standard_normal(heads) * 0.3, dt_bias=rng.standard_normal(heads) * 0.1,
                 wo=rng.standard_normal((heads * n, D_MODEL)) * 0.4,
                 probe=rng.standard_normal(D_MODEL))
    g = rlx.Graph("gdn_layer")
    v = {k: g.input(k, a.shape) for k, a in params.items()}
    shape = (BATCH, STEPS, heads, n)

    def unit(t):
        return t * g.rsqrt(g.reduce_sum(t * t, (3,), keepdim=True) + 1e-6)

    qkv = g.concat([g.matmul(v["x"], v[w]) for w in ("wq", "wk", "wv")], 2)
    qkv = g.silu(g.depthwise_conv1d_causal(qkv, v["wc"]))
    part = [g.reshape(g.narrow(qkv, 2, i * heads * n, heads * n), shape) for i in range(3)]
    q = unit(part[0]) * float(1 / np.sqrt(n))
    k = unit(part[1])
    vv = part[2]
    decay = -g.exp(v["a_log"]) * g.softplus(g.matmul(v["x"], v["wa"]) + v["dt_bias"])
    beta = g.sigmoid(g.matmul(v["x"], v["wb"]))
    o = g.gated_delta_net(q, k, vv, decay, beta)
    gate = g.silu(g.reshape(g.matmul(v["x"], v["wz"]), shape))
    o = g.rms_norm(o, v["norm"], eps=1e-6) * gate
    out = g.matmul(g.reshape(o, (BATCH, STEPS, heads * n)), v["wo"])
    loss = g.reduce_sum(out * v["probe"], (0, 1, 2))
    g.output(loss)

    def torch_loss(x, wq, wk, wv, wc, wz, norm, wa, wb, a_log, dt_bias, wo, probe):
        def unit(t):
            return t * torch.rsqrt((t * t).sum(3, keepdim=True) + 1e-6)

        qkv = torch.cat([x @ wq, x @ wk, x @ wv], 2).transpose(1, 2)
        qkv = torch.nn.functional.conv1d(torch.nn.functional.pad(qkv, (3, 0)),
                                         wc.T.unsqueeze(1), groups=3 * heads * n)
        part = torch.nn.functional.silu(qkv.transpose(1, 2)).split(heads * n, 2)
        q = unit(part[0].reshape(shape)) / np.sqrt(n)
        k = unit(part[1].reshape(shape))
        decay = -torch.exp(a_log) * torch.nn.functional.softplus(x @ wa + dt_bias)
        o = torch_gated_delta_net(q, k, part[2].reshape(shape), decay, torch.sigmoid(x @ wb))[0]
        o = o * torch.rsqrt((o * o).mean(3, keepdim=True) + 1e-6) * norm
        o = o * torch.nn.functional.silu((x @ wz).reshape(shape))
        return ((o.reshape(BATCH, STEPS, heads * n) @ wo) * probe).sum()

    layer_grads_close(g, loss, params, torch_loss)


# ----------------------------------------------------------------------------- central differences


def reference_f64(graph):
    """The float64 reference executor (`rlx.reference(g, dtype="f64")`)."""
    if "dtype" not in inspect.signature(rlx.reference).parameters:
        pytest.skip("rlx.reference(g, dtype='f64') is not on this branch yet (adcore's)")
    return rlx.reference(graph, dtype="f64")


def _scalar(out) -> float:
    return float(np.asarray(out[0] if isinstance(out, list | tuple) else out).reshape(-1)[0])


def central_difference_case(case):
    """(graph, loss, wrt names, float64 inputs) of each sequence op's gradient check."""
    if case == "selective_scan":
        shape = (2, 5, 3, 5)
        g, loss = ss_loss_graph(*shape, True, True)
        data, names = ss_data(*shape, seed=2), [*SS_IN, "init"]
        feed = {k: data[k] for k in (*names, "dy", "d_final")}
    elif case == "gated_delta_net":
        shape = (1, 5, 2, 3, 4)
        g, loss = gdn_loss_graph(*shape, True, True)
        data, names = gdn_data(*shape, seed=2), [*GDN_IN, "init"]
        feed = {k: data[k] for k in (*names, "do", "d_final")}
    else:
        g, loss = scan_loss_graph(trajectory=case == "scan_trajectory",
                                  checkpoint_every=2 if case == "scan_checkpointed" else None)
        feed, names = scan_data(seed=2), SCAN_WRT
    return g, loss, names, {k: v.astype(np.float64) for k, v in feed.items()}


@pytest.mark.parametrize("case", ["selective_scan", "gated_delta_net", "scan", "scan_trajectory",
                                  "scan_checkpointed"])
def test_gradients_match_central_differences_in_f64(case):
    """<grad, v> against (loss(p + εv) − loss(p − εv)) / 2ε for a random direction v per
    differentiated input, on the float64 reference executor."""
    g, loss, names, feed = central_difference_case(case)
    grads = reference_f64(rlx.grad(g, loss, names))(**feed)[1:]
    forward = reference_f64(g)
    rng, eps = np.random.default_rng(3), 1e-6
    for name, grad in zip(names, grads, strict=True):
        v = rng.standard_normal(feed[name].shape)
        plus = _scalar(forward(**{**feed, name: feed[name] + eps * v}))
        minus = _scalar(forward(**{**feed, name: feed[name] - eps * v}))
        np.testing.assert_allclose(float(np.sum(np.asarray(grad) * v)), (plus - minus) / (2 * eps),
                                   rtol=1e-6, atol=1e-8, err_msg=name)


# ----------------------------------------------------------------------------- arena


def checkpoint_arena(every: int | None, length: int = 64, width: int = 256) -> int:
    """The arena bytes of the compiled gradient of a scan with a wide carry and a small
    const (the saved carries dominate)."""
    g = rlx.Graph("decay")
    c0, w = g.input("c0", (width,)), g.input("w", (width,))
    b = rlx.Graph("step")
    b.output(b.tanh(b.input("c", (width,)) * b.input("w", (width,))))
    loss = g.reduce_sum(g.scan(c0, b, length, consts=[w], checkpoint_every=every), (0,))
    g.output(loss)
    return rlx.jit(rlx.grad(g, loss, ["c0", "w"])).arena_bytes


def test_checkpointed_scan_arena_falls_as_length_over_k_plus_k():
    """Arena bytes of the backward: a + b·length/k + c·k (least squares over k = 2..32
    fits within 5%), far below the unchekpointed O(length) at k = 8 = sqrt(length)."""
    length = 64
    ks = [2, 4, 8, 16, 32]
    arena = np.array([checkpoint_arena(k, length) for k in ks], np.float64)
    design = np.array([[1.0, length / k, k] for k in ks])
    coef, *_ = np.linalg.lstsq(design, arena, rcond=None)
    assert coef[1] > 0 and coef[2] > 0, coef
    np.testing.assert_allclose(design @ coef, arena, rtol=0.05)
    plain = checkpoint_arena(None, length)
    assert arena[ks.index(8)] < plain / 2, (arena, plain)
    assert arena[ks.index(8)] < min(arena[0], arena[-1])


def test_scan_backward_keeps_no_per_step_const_gradients():
    """An RNN over xs with a weight const: the backward's arena holds O(length) carries and
    xs cotangents, not a [length, *W] history of W's summed cotangent."""
    length, width = 64, 32
    g = rlx.Graph("rnn")
    c0, xs, w = g.input("c0", (width,)), g.input("xs", (length, width)), g.input("w", (width, width))
    b = rlx.Graph("step")
    c, x, bw = b.input("c", (width,)), b.input("x", (width,)), b.input("w", (width, width))
    b.output(b.tanh(b.reshape(b.matmul(b.reshape(c, (1, width)), bw), (width,)) + x))
    loss = g.reduce_sum(g.scan(c0, b, length, xs=[xs], consts=[w]), (0,))
    g.output(loss)
    arena = rlx.jit(rlx.grad(g, loss, ["c0", "xs", "w"])).arena_bytes
    history = length * width * width * 4            # bytes of [length, *W] in f32
    assert arena < history / 2, (arena, history)
