"""[parity] Hugging Face models rebuilt with the rlx API from their state dicts (issue 12,
items 4 and 5), against HF's logits at <= 1e-4 relative error:

- a tiny random-weight `MambaForCausalLM` (selective_scan, the causal depthwise conv,
  softplus), prefill, and token by token with the conv's last K-1 inputs and the SSM
  state of every layer as model states (g.state / g.assign);
- a tiny random-weight `Qwen3_5ForCausalLM` (three gated-delta-net layers and one gated
  full-attention layer, partial rotary 0.25, eager attention), prefill, and token by token
  with KV caches (cache_append) and the delta-rule states and conv windows as states;
- the gated_delta_net and selective_scan kernels over a symbolic s (one compile, s read at
  run time) against HF's torch functions at several s.

Needs torch and transformers (the `[parity]` extra); skipped only when transformers lacks
the model class.
"""

from __future__ import annotations

import numpy as np
import pytest
from mamba_models import tiny_mamba

import rlx_mlir as rlx
from rlx_mlir.models.arch_mamba import mamba_mixer
from rlx_mlir.models.arch_qwen35 import l2_normalize

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

REL_TOL = 1e-4


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


def _t(tensor) -> np.ndarray:
    return tensor.detach().to(torch.float32).numpy().copy()


# ----------------------------------------------------------------------------- Mamba


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
    of every layer are states of the model (g.state, updated by g.assign) for
    token-by-token decoding."""
    cfg = w.cfg
    inner, n, rank, taps = cfg.intermediate_size, cfg.state_size, cfg.time_step_rank, cfg.conv_kernel
    g = rlx.Graph("mamba")
    ids = g.input("ids", (batch, steps), dtype="i64")
    states = []
    if with_state:
        for i in range(cfg.num_hidden_layers):
            states.append((g.state(f"conv{i}", (batch, taps - 1, inner)),
                           g.state(f"ssm{i}", (batch, inner, n))))
    params = {}

    def param(name, array):
        params[name] = array
        return g.param(name, array.shape)

    h = g.embedding(param("embed", w.embed), ids)
    for i, lw in enumerate(w.layers):
        p = {k: param(f"l{i}_{k}", v) for k, v in lw.items()}
        x = g.rms_norm(h, p["norm"], eps=cfg.layer_norm_epsilon)
        conv, ssm = states[i] if with_state else (None, None)
        h = h + mamba_mixer(g, x, p, lambda v, name, p=p: g.matmul(v, p[name]), d_inner=inner,
                            d_state=n, dt_rank=rank, conv_state=conv, ssm_state=ssm)
    h = g.rms_norm(h, param("norm_f", w.norm_f), eps=cfg.layer_norm_epsilon)
    g.output(g.matmul(h, param("lm_head", w.lm_head)))
    return g, params


def test_mamba_prefill_and_decode_match_hf():
    model = tiny_mamba(vocab_size=96, hidden_size=32, state_size=8, time_step_rank=4)
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
    decoded = [step(ids=ids[:, t:t + 1]) for t in range(steps)]
    decode_error = relative_error(np.concatenate(decoded, axis=1), want)
    assert decode_error <= REL_TOL, decode_error
    print(f"mamba parity: prefill {prefill_error:.2e}, decode {decode_error:.2e}")


# ----------------------------------------------------------------------------- Qwen3.5


def tiny_qwen35():
    if not hasattr(transformers, "Qwen3_5ForCausalLM"):
        pytest.skip("transformers has no Qwen3_5ForCausalLM")
    config = transformers.Qwen3_5TextConfig(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
        layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=16,
        linear_value_head_dim=16, linear_conv_kernel_dim=4, partial_rotary_factor=0.25,
        tie_word_embeddings=False,
    )
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.Qwen3_5ForCausalLM(config).eval()
    with torch.no_grad():  # zero-initialized (1 + weight) norms: randomize every weight
        for name, p in model.named_parameters():
            if "norm" in name or "A_log" in name or "dt_bias" in name:
                p.add_(0.2 * torch.randn_like(p))
    return model


def rope_tables(cfg, positions):
    """cos, sin [len(positions), rot/2] of Qwen3.5's partial rope, and rot."""
    rot = int(cfg.head_dim * cfg.rope_parameters.get("partial_rotary_factor", 1.0))
    theta = cfg.rope_parameters["rope_theta"]
    inv_freq = 1.0 / theta ** (np.arange(0, rot, 2, dtype=np.float64) / rot)
    angles = np.asarray(positions)[:, None] * inv_freq[None, :]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32), rot


def qwen35_graph(model, steps: int, *, decode: bool = False, capacity: int = 16):
    """Qwen3.5's text model over `steps` tokens (batch 1) from the rlx primitives: gated
    delta net layers (causal conv, l2-normalized q/k, gated RMS norm) and gated full
    attention (per-head q/k RMS norm, partial rope, sigmoid gate).

    With `decode`, the model keeps its state between calls: KV caches of `capacity` rows
    for the full-attention layers (cache_append), and for each gated-delta-net layer its
    recurrent state and the conv's last K-1 inputs (g.state, updated by g.assign); cos and
    sin are inputs then (the rows of the positions P ... P+steps-1)."""
    cfg = model.config
    sd = {k: _t(v) for k, v in model.state_dict().items()}
    eps = cfg.rms_norm_eps
    g = rlx.Graph("qwen35")
    ids = g.input("ids", (1, steps), dtype="i64")
    params = {}

    def _param(name, array):
        key = name.replace(".", "_")
        params[key] = np.ascontiguousarray(array, dtype=np.float32)
        return g.param(key, params[key].shape)

    def weight(name):  # an nn.Linear weight as [in, out]
        return _param(name, sd[name].T)

    def norm(x, name):  # Qwen3.5 RMSNorm multiplies by (1 + weight)
        return g.rms_norm(x, _param(name, 1.0 + sd[name]), eps=eps)

    cos_np, sin_np, rot = rope_tables(cfg, range(steps if isinstance(steps, int) else 1))
    if decode or isinstance(steps, str):  # the rows of the call's positions
        cos, sin = g.input("cos", (steps, rot // 2)), g.input("sin", (steps, rot // 2))
    else:
        cos, sin = _param("cos", cos_np), _param("sin", sin_np)

    h = g.embedding(_param("embed", sd["model.embed_tokens.weight"]), ids)
    for i, kind in enumerate(cfg.layer_types):
        p = f"model.layers.{i}."
        x = norm(h, p + "input_layernorm.weight")
        if kind == "linear_attention":
            h = h + linear_attention(g, cfg, sd, x, p + "linear_attn.", weight, _param, steps,
                                     f"l{i}" if decode else None)
        else:
            caches = None
            if decode:
                kv = (capacity, cfg.num_key_value_heads * cfg.head_dim)
                caches = (g.state(f"l{i}_k", kv), g.state(f"l{i}_v", kv))
            h = h + gated_attention(g, cfg, x, p + "self_attn.", weight, norm, cos, sin, rot,
                                    steps, caches)
        x = norm(h, p + "post_attention_layernorm.weight")
        h = h + g.swiglu_ffn(x, weight(p + "mlp.up_proj.weight"), weight(p + "mlp.gate_proj.weight"),
                             weight(p + "mlp.down_proj.weight"))
    h = norm(h, "model.norm.weight")
    g.output(g.matmul(h, weight("lm_head.weight")))
    return g, params


def linear_attention(g, cfg, sd, x, p, weight, param, steps, state_name=None):
    hk, hv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
    dk, dv = cfg.linear_key_head_dim, cfg.linear_value_head_dim
    key_dim, value_dim = hk * dk, hv * dv
    taps = cfg.linear_conv_kernel_dim
    qkv = g.matmul(x, weight(p + "in_proj_qkv.weight"))
    conv_w = param(p + "conv1d.weight", sd[p + "conv1d.weight"][:, 0, :].T)
    window = recurrent = None
    if state_name is not None:  # the conv's last K-1 inputs and the delta rule's state
        window = g.state(f"{state_name}_conv", (1, taps - 1, 2 * key_dim + value_dim))
        recurrent = g.state(f"{state_name}_ssm", (1, hv, dk, dv))
        g.assign(window, g.narrow(g.concat([window, qkv], axis=1), 1, steps, taps - 1))
    qkv = g.silu(g.depthwise_conv1d_causal(qkv, conv_w, window))
    q = g.reshape(g.narrow(qkv, 2, 0, key_dim), (1, steps, hk, dk))
    k = g.reshape(g.narrow(qkv, 2, key_dim, key_dim), (1, steps, hk, dk))
    v = g.reshape(g.narrow(qkv, 2, 2 * key_dim, value_dim), (1, steps, hv, dv))
    q = l2_normalize(g, q) * float(dk ** -0.5)
    k = l2_normalize(g, k)
    beta = g.sigmoid(g.matmul(x, weight(p + "in_proj_b.weight")))
    a = g.matmul(x, weight(p + "in_proj_a.weight")) + param(p + "dt_bias", sd[p + "dt_bias"])
    decay = -np.exp(sd[p + "A_log"].astype(np.float64))
    gate = g.softplus(a) * param(p + "neg_A", decay)
    if recurrent is None:
        o = g.gated_delta_net(q, k, v, gate, beta)
    else:
        o, final = g.gated_delta_net(q, k, v, gate, beta, initial_state=recurrent,
                                     return_state=True)
        g.assign(recurrent, final)
    z = g.reshape(g.matmul(x, weight(p + "in_proj_z.weight")), (1, steps, hv, dv))
    o = g.rms_norm(o, param(p + "norm.weight", sd[p + "norm.weight"]), eps=cfg.rms_norm_eps) * g.silu(z)
    return g.matmul(g.reshape(o, (1, steps, value_dim)), weight(p + "out_proj.weight"))


def gated_attention(g, cfg, x, p, weight, norm, cos, sin, rot, steps, caches=None):
    heads, kv_heads, d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    qg = g.reshape(g.matmul(x, weight(p + "q_proj.weight")), (1, steps, heads, 2 * d))
    q = norm(g.narrow(qg, 3, 0, d), p + "q_norm.weight")
    gate = g.reshape(g.narrow(qg, 3, d, d), (1, steps, heads * d))
    k = norm(g.reshape(g.matmul(x, weight(p + "k_proj.weight")), (1, steps, kv_heads, d)),
             p + "k_norm.weight")
    v = g.matmul(x, weight(p + "v_proj.weight"))
    q = g.rope(g.reshape(q, (1, steps, heads * d)), cos, sin, head_dim=d, n_rot=rot)
    k = g.rope(g.reshape(k, (1, steps, kv_heads * d)), cos, sin, head_dim=d, n_rot=rot)
    if caches is not None:  # decode: attend over the cache rows [0, P + steps) ("T")
        k_cache, v_cache = caches
        k = g.cache_append(k_cache, g.reshape(k, (steps, kv_heads * d)))
        v = g.cache_append(v_cache, g.reshape(v, (steps, kv_heads * d)))
        q = g.reshape(q, (steps, heads * d))  # attention without the batch dim
    a = g.attention(q, k, v, num_heads=heads, head_dim=d, num_kv_heads=kv_heads,
                    mask_kind="causal")
    a = g.reshape(a, (1, steps, heads * d))
    return g.matmul(a * g.sigmoid(gate), weight(p + "o_proj.weight"))


def test_qwen35_prefill_matches_hf():
    model = tiny_qwen35()
    steps = 9
    ids = np.random.default_rng(1).integers(0, model.config.vocab_size, (1, steps))
    with torch.no_grad():
        want = _t(model(torch.tensor(ids)).logits)
    g, params = qwen35_graph(model, steps)
    got = rlx.jit(g, params=params)(ids=ids)
    error = relative_error(got, want)
    assert error <= REL_TOL, error
    print(f"qwen3.5 parity: prefill {error:.2e}")


def test_qwen35_decodes_token_by_token_with_state():
    """One compiled step (S = 1) with its states (KV caches, delta-rule states, conv
    windows) run over the sequence equals HF's full forward, and the full-sequence rlx
    forward (the states carry everything between calls)."""
    model = tiny_qwen35()
    steps = 9
    ids = np.random.default_rng(1).integers(0, model.config.vocab_size, (1, steps))
    with torch.no_grad():
        want = _t(model(torch.tensor(ids)).logits)
    g, params = qwen35_graph(model, 1, decode=True)
    step = rlx.jit(g, params=params)
    decoded = []
    for t in range(steps):
        cos, sin, _ = rope_tables(model.config, [t])
        decoded.append(step(ids=ids[:, t:t + 1], cos=cos, sin=sin))
    assert step.position == steps
    error = relative_error(np.concatenate(decoded, axis=1), want)
    assert error <= REL_TOL, error
    print(f"qwen3.5 parity: decode {error:.2e}")


# ----------------------------------------------------------------------------- symbolic s


def test_one_compiled_prefill_over_a_symbolic_s_matches_hf():
    """The Mamba and Qwen3.5 prefill graphs over a symbolic S (causal conv, selective scan /
    gated delta net, attention, rope read S at run time): one compile each, every prompt
    length up to the bound matches HF."""
    mamba = tiny_mamba()
    w = MambaWeights(mamba)
    g, params = mamba_graph(w, 1, "S", with_state=False)  # batch 1: S leads the rows
    mamba_model = rlx.jit(g, params=params, max_dims={"S": 12})
    qwen = tiny_qwen35()
    g, params = qwen35_graph(qwen, "S")
    qwen_model = rlx.jit(g, params=params, max_dims={"S": 12})
    rng = np.random.default_rng(2)
    worst = {"mamba": 0.0, "qwen3.5": 0.0}
    for steps in (1, 7, 12, 4):
        ids = rng.integers(0, mamba.config.vocab_size, (1, steps))
        with torch.no_grad():
            want = _t(mamba(torch.tensor(ids)).logits)
        worst["mamba"] = max(worst["mamba"], relative_error(mamba_model(ids=ids), want))
        ids = rng.integers(0, qwen.config.vocab_size, (1, steps))
        with torch.no_grad():
            want = _t(qwen(torch.tensor(ids)).logits)
        cos, sin, _ = rope_tables(qwen.config, range(steps))
        worst["qwen3.5"] = max(worst["qwen3.5"],
                               relative_error(qwen_model(ids=ids, cos=cos, sin=sin), want))
    assert max(worst.values()) <= REL_TOL, worst
    print("symbolic-S prefill parity: " + ", ".join(f"{k} {v:.2e}" for k, v in worst.items()))



def test_symbolic_s_kernels_match_hf_functions():
    """One compiled gated_delta_net and one selective_scan over a symbolic s (read at run
    time), both with return_state, match HF's torch_recurrent_gated_delta_rule /
    torch_chunk_gated_delta_rule (Qwen3.5, carried state in) and mamba_selective_scan (zero
    state) at every s: the output and the final state."""
    try:
        from transformers.models.mamba.modeling_mamba import mamba_selective_scan
        from transformers.models.qwen3_5.modeling_qwen3_5 import (
            torch_chunk_gated_delta_rule,
            torch_recurrent_gated_delta_rule,
        )
    except ImportError:
        pytest.skip("transformers lacks the qwen3_5 or mamba functions")
    heads, n, channels, state_n = 2, 16, 24, 8
    g = rlx.Graph("gdn")
    q, k, v = (g.input(name, (1, "S", heads, n)) for name in "qkv")
    gate, beta = g.input("g", (1, "S", heads)), g.input("beta", (1, "S", heads))
    g.output(*g.gated_delta_net(q, k, v, gate, beta,
                                initial_state=g.input("state", (1, heads, n, n)),
                                return_state=True))
    gdn = rlx.jit(g, max_dims={"S": 70})
    m = rlx.Graph("ssm")
    x, dt = m.input("x", (1, "S", channels)), m.input("dt", (1, "S", channels))
    b, c = m.input("B", (1, "S", state_n)), m.input("C", (1, "S", state_n))
    m.output(*m.selective_scan(x, dt, m.input("A", (channels, state_n)), b, c,
                               return_state=True))
    ssm = rlx.jit(m, max_dims={"S": 70})
    rng = np.random.default_rng(4)
    worst = {"recurrent": 0.0, "chunk": 0.0, "mamba": 0.0}
    for s in (1, 9, 70):
        unit = rng.standard_normal((2, 1, s, heads, n)).astype(np.float32)
        unit /= np.linalg.norm(unit, axis=-1, keepdims=True)
        data = {"q": unit[0], "k": unit[1],
                "v": rng.standard_normal((1, s, heads, n)).astype(np.float32),
                "g": -rng.uniform(0.01, 1.0, (1, s, heads)).astype(np.float32),
                "beta": rng.uniform(0.0, 1.0, (1, s, heads)).astype(np.float32),
                "state": rng.standard_normal((1, heads, n, n)).astype(np.float32)}
        got, got_state = gdn(**{**data, "q": data["q"] / np.float32(np.sqrt(n))})  # HF scales q
        t = {key: torch.from_numpy(value) for key, value in data.items()}
        for name, rule in (("recurrent", torch_recurrent_gated_delta_rule),
                           ("chunk", torch_chunk_gated_delta_rule)):
            want, want_state = rule(t["q"], t["k"], t["v"], t["g"], t["beta"],
                                    initial_state=t["state"], output_final_state=True)
            worst[name] = max(worst[name], relative_error(got, _t(want)),
                              relative_error(got_state, _t(want_state)))
        sdata = {"x": rng.standard_normal((1, s, channels)).astype(np.float32),
                 "dt": rng.uniform(0.01, 0.5, (1, s, channels)).astype(np.float32),
                 "A": -rng.uniform(0.5, 2.0, (channels, state_n)).astype(np.float32),
                 "B": rng.standard_normal((1, s, state_n)).astype(np.float32),
                 "C": rng.standard_normal((1, s, state_n)).astype(np.float32)}
        st = {key: torch.from_numpy(value) for key, value in sdata.items()}
        want, want_state = mamba_selective_scan(
            st["x"].transpose(1, 2), st["dt"].transpose(1, 2), st["A"], st["B"].transpose(1, 2),
            st["C"].transpose(1, 2), return_last_state=True)
        y, y_state = ssm(**sdata)
        worst["mamba"] = max(worst["mamba"], relative_error(y, _t(want.transpose(1, 2))),
                             relative_error(y_state, _t(want_state)))
    assert max(worst.values()) <= REL_TOL, worst
    print("symbolic s parity: " + ", ".join(f"{k} {v:.2e}" for k, v in worst.items()))
