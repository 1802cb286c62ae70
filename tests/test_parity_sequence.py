"""[parity] Hugging Face models rebuilt with the rlx API from their state dicts (issue 12,
item 5): a tiny random-weight `MambaForCausalLM` (selective_scan, the causal depthwise
conv, softplus), prefill and token by token with the conv inputs and the SSM state carried
between calls, against HF's logits at ≤ 1e-4 relative error.

Needs torch and transformers (the `[parity]` extra); skipped only when transformers lacks
the model class.
"""

from __future__ import annotations

import numpy as np
import pytest

import rlx_mlir as rlx

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

REL_TOL = 1e-4


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


def _t(tensor) -> np.ndarray:
    return tensor.detach().to(torch.float32).numpy().copy()


# ----------------------------------------------------------------------------- Mamba


def tiny_mamba():
    if not hasattr(transformers, "MambaForCausalLM"):
        pytest.skip("transformers has no MambaForCausalLM")
    config = transformers.MambaConfig(
        vocab_size=96, hidden_size=32, state_size=8, num_hidden_layers=2, conv_kernel=4,
        expand=2, time_step_rank=4, use_mambapy=False, tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = transformers.MambaForCausalLM(config).eval()
    with torch.no_grad():  # HF's init leaves A, D and the norms regular: randomize them too
        for layer in model.backbone.layers:
            layer.mixer.A_log.add_(0.3 * torch.randn_like(layer.mixer.A_log))
            layer.mixer.D.add_(0.5 * torch.randn_like(layer.mixer.D))
            layer.norm.weight.add_(0.2 * torch.randn_like(layer.norm.weight))
    return model


class MambaWeights:
    """The state dict as [in, out] matrices and rlx layouts."""

    def __init__(self, model):
        sd = {k: _t(v) for k, v in model.state_dict().items()}
        cfg = model.config
        self.cfg = cfg
        self.embed = sd["backbone.embeddings.weight"]
        self.norm_f = sd["backbone.norm_f.weight"]
        self.lm_head = _t(model.get_output_embeddings().weight).T.copy()
        self.layers = []
        for i in range(cfg.num_hidden_layers):
            p = f"backbone.layers.{i}."
            self.layers.append({
                "norm": sd[p + "norm.weight"],
                "in_proj": sd[p + "mixer.in_proj.weight"].T.copy(),
                "conv_w": sd[p + "mixer.conv1d.weight"][:, 0, :].T.copy(),  # [K, I]
                "conv_b": sd[p + "mixer.conv1d.bias"],
                "x_proj": sd[p + "mixer.x_proj.weight"].T.copy(),
                "dt_proj": sd[p + "mixer.dt_proj.weight"].T.copy(),
                "dt_bias": sd[p + "mixer.dt_proj.bias"],
                "A": -np.exp(sd[p + "mixer.A_log"].astype(np.float64)).astype(np.float32),
                "D": sd[p + "mixer.D"],
                "out_proj": sd[p + "mixer.out_proj.weight"].T.copy(),
            })


def mamba_graph(w: MambaWeights, batch: int, steps: int, *, with_state: bool):
    """Logits of `steps` tokens; with_state, the conv's last K-1 inputs and the SSM state
    of every layer come in as inputs and go out as outputs (token-by-token decoding)."""
    cfg = w.cfg
    inner, n, rank, taps = cfg.intermediate_size, cfg.state_size, cfg.time_step_rank, cfg.conv_kernel
    g = rlx.Graph("mamba")
    ids = g.input("ids", (batch, steps), dtype="i64")
    states = []
    if with_state:
        for i in range(cfg.num_hidden_layers):
            states.append((g.input(f"conv{i}", (batch, taps - 1, inner)),
                           g.input(f"ssm{i}", (batch, inner, n))))
    params = {}

    def param(name, array):
        params[name] = array
        return g.param(name, array.shape)

    h = g.embedding(param("embed", w.embed), ids)
    new_states = []
    for i, lw in enumerate(w.layers):
        p = {k: param(f"l{i}_{k}", v) for k, v in lw.items()}
        x = g.rms_norm(h, p["norm"], eps=cfg.layer_norm_epsilon)
        proj = g.matmul(x, p["in_proj"])
        xs, z = g.narrow(proj, 2, 0, inner), g.narrow(proj, 2, inner, inner)
        left = states[i][0] if with_state else None
        xc = g.silu(g.depthwise_conv1d_causal(xs, p["conv_w"], left) + p["conv_b"])
        dbl = g.matmul(xc, p["x_proj"])
        dt = g.narrow(dbl, 2, 0, rank)
        B, C = g.narrow(dbl, 2, rank, n), g.narrow(dbl, 2, rank + n, n)
        delta = g.softplus(g.linear(dt, p["dt_proj"], p["dt_bias"]))
        if with_state:
            y, ssm = g.selective_scan(xc, delta, p["A"], B, C, initial_state=states[i][1],
                                      return_state=True)
            window = g.concat([states[i][0], xs], axis=1)
            conv = g.narrow(window, 1, steps, taps - 1)
            new_states += [conv, ssm]
        else:
            y = g.selective_scan(xc, delta, p["A"], B, C)
        y = (y + xc * p["D"]) * g.silu(z)
        h = h + g.matmul(y, p["out_proj"])
    h = g.rms_norm(h, param("norm_f", w.norm_f), eps=cfg.layer_norm_epsilon)
    g.output(g.matmul(h, param("lm_head", w.lm_head)), *new_states)
    return g, params


def test_mamba_prefill_and_decode_match_hf():
    model = tiny_mamba()
    w = MambaWeights(model)
    cfg = model.config
    rng = np.random.default_rng(0)
    batch, steps = 2, 7
    ids = rng.integers(0, cfg.vocab_size, (batch, steps))
    with torch.no_grad():
        want = _t(model(torch.tensor(ids)).logits)

    g, params = mamba_graph(w, batch, steps, with_state=False)
    prefill = rlx.jit(g, params=params)(ids=ids)
    prefill_error = relative_error(prefill, want)
    assert prefill_error <= REL_TOL, prefill_error

    g1, params1 = mamba_graph(w, batch, 1, with_state=True)
    step = rlx.jit(g1, params=params1)
    state = {}
    for i in range(cfg.num_hidden_layers):
        state[f"conv{i}"] = np.zeros((batch, cfg.conv_kernel - 1, cfg.intermediate_size), np.float32)
        state[f"ssm{i}"] = np.zeros((batch, cfg.intermediate_size, cfg.state_size), np.float32)
    decoded = []
    for t in range(steps):
        logits, *carried = step(ids=ids[:, t:t + 1], **state)
        decoded.append(logits)
        state = dict(zip(list(state), carried, strict=True))
    decode_error = relative_error(np.concatenate(decoded, axis=1), want)
    assert decode_error <= REL_TOL, decode_error
    print(f"mamba parity: prefill {prefill_error:.2e}, decode {decode_error:.2e}")
