"""qwen35_mtp_head (SPEC "Sequence ops from RLX"): the hir block, lowered by one pattern
into mir primitives, against a numpy reference written here from the SPEC text; betas
present or absent, GQA, odd sizes, S = 1; build errors. Then its matrices as raw GGUF rows
(`schemes`: q8_0, f16, the K-quants, q4_0; f32 and q8 activations) against the reference
executor and the SPEC's head on the dequantized weights."""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest

import rlx_mlir as rlx
from rlx_mlir.core import reference_kernels as K
from rlx_mlir.core.errors import DTypeError, RlxError, ShapeError
from rlx_mlir.core.shape_inference import QUANT_BLOCKS, QWEN35_MTP_MATRICES
from rlx_mlir.dialects import hir
from rlx_mlir.random_inputs import random_blocks

EPS = 1e-6


def rms(x, g, b=None):
    y = x / np.sqrt((x * x).mean(-1, keepdims=True) + EPS) * g
    return y if b is None else y + b


def rope_half(x, cos, sin, heads, d, n_rot):
    """x [B, S, heads·d]: in each head the first n_rot dims rotate (HF half style)."""
    b, s, _ = x.shape
    x = x.reshape(b, s, heads, d).copy()
    half = n_rot // 2
    x1, x2 = x[..., :half].copy(), x[..., half:n_rot].copy()
    c, sn = cos[None, :, None, :], sin[None, :, None, :]
    x[..., :half] = x1 * c - x2 * sn
    x[..., half:n_rot] = x2 * c + x1 * sn
    return x.reshape(b, s, heads * d)


def causal_gqa(q, k, v, heads, kv_heads, d):
    b, s, _ = q.shape
    out = np.zeros_like(q)
    for hh in range(heads):
        kvh = hh // (heads // kv_heads)
        qh, kh, vh = (t[..., i * d:(i + 1) * d] for t, i in ((q, hh), (k, kvh), (v, kvh)))
        scores = qh @ kh.transpose(0, 2, 1) / np.sqrt(d)
        scores = np.where(np.tril(np.ones((s, s), bool)), scores, -np.inf)
        p = np.exp(scores - scores.max(-1, keepdims=True))
        out[..., hh * d:(hh + 1) * d] = (p / p.sum(-1, keepdims=True)) @ vh
    return out


def mtp_head_np(o, heads, kv_heads, d, n_rot):
    """The SPEC text, step by step, in float64."""
    o = {k: None if v is None else np.asarray(v, np.float64) if v.dtype.kind == "f" else v
         for k, v in o.items()}
    B, S, _ = o["h_pre_norm"].shape
    h = rms(o["h_pre_norm"], o["hnorm_w"], o["hnorm_b"])
    e = rms(o["embed_w"][o["input_ids"]], o["enorm_w"], o["enorm_b"])
    cur = np.concatenate([e, h], -1) @ o["eh_w"]
    a = rms(cur, o["attn_norm_w"], o["attn_norm_b"])
    qg = (a @ o["q_gate_w"]).reshape(B, S, heads, 2 * d)
    q = rms(qg[..., :d], o["q_norm_w"], o["q_norm_b"]).reshape(B, S, heads * d)
    gate = qg[..., d:].reshape(B, S, heads * d)
    k = rms((a @ o["k_w"]).reshape(B, S, kv_heads, d), o["k_norm_w"], o["k_norm_b"])
    k = k.reshape(B, S, kv_heads * d)
    v = a @ o["v_w"]
    q = rope_half(q, o["cos"], o["sin"], heads, d, n_rot)
    k = rope_half(k, o["cos"], o["sin"], kv_heads, d, n_rot)
    att = causal_gqa(q, k, v, heads, kv_heads, d) / (1 + np.exp(-gate))
    cur = cur + att @ o["o_w"]
    f = rms(cur, o["post_norm_w"], o["post_norm_b"])
    g = f @ o["gate_w"]
    cur = cur + (g / (1 + np.exp(-g)) * (f @ o["up_w"])) @ o["down_w"]
    last = cur[np.arange(B), o["last_token_idx"]]
    return rms(last, o["head_norm_w"], o["head_norm_b"]) @ o["lm_head_w"]


def operands(rng, B, S, dm, heads, kv_heads, d, n_rot, vocab, ffn, betas):
    def w(*shape, scale=None):
        return (rng.standard_normal(shape) * (scale or shape[0] ** -0.5)).astype(np.float32)

    def norm(n):
        return (1 + 0.2 * rng.standard_normal(n)).astype(np.float32)

    def beta(n):
        return (0.1 * rng.standard_normal(n)).astype(np.float32) if betas else None

    angles = np.arange(S)[:, None] * (1e4 ** -(np.arange(0, n_rot, 2) / n_rot))[None]
    o = {
        "h_pre_norm": w(B, S, dm, scale=1.0), "input_ids": rng.integers(0, vocab, (B, S)),
        "cos": np.cos(angles).astype(np.float32), "sin": np.sin(angles).astype(np.float32),
        "last_token_idx": rng.integers(0, S, B).astype(np.int32),
        "embed_w": w(vocab, dm, scale=1.0),
        "hnorm_w": norm(dm), "hnorm_b": beta(dm), "enorm_w": norm(dm), "enorm_b": beta(dm),
        "eh_w": w(2 * dm, dm), "attn_norm_w": norm(dm), "attn_norm_b": beta(dm),
        "q_gate_w": w(dm, heads * 2 * d), "k_w": w(dm, kv_heads * d), "v_w": w(dm, kv_heads * d),
        "q_norm_w": norm(d), "q_norm_b": beta(d), "k_norm_w": norm(d), "k_norm_b": beta(d),
        "o_w": w(heads * d, dm), "post_norm_w": norm(dm), "post_norm_b": beta(dm),
        "gate_w": w(dm, ffn), "up_w": w(dm, ffn), "down_w": w(ffn, dm),
        "head_norm_w": norm(dm), "head_norm_b": beta(dm), "lm_head_w": w(dm, vocab),
    }
    assert list(o) == [name for name, _ in hir.Qwen35MtpHeadOp.get_irdl_definition().operands]
    return o


def head_graph(o, heads, kv_heads, d, n_rot):
    g = rlx.Graph("mtp")
    inputs = {"h_pre_norm", "input_ids", "cos", "sin", "last_token_idx"}
    values = {}
    for name, array in o.items():
        if array is None:
            values[name] = None
            continue
        dtype = {"i": "i64" if array.dtype == np.int64 else "i32"}.get(array.dtype.kind, "f32")
        declare = g.input if name in inputs else g.param
        values[name] = declare(name, array.shape, dtype)
    g.output(g.qwen35_mtp_head(*values.values(), num_heads=heads, num_kv_heads=kv_heads,
                               head_dim=d, n_rot=n_rot, eps=EPS))
    return g


CASES = [  # B, S, d, heads, kv_heads, head_dim, n_rot, vocab, ffn, betas
    (2, 5, 32, 4, 2, 8, 4, 40, 48, False),
    (1, 1, 24, 2, 2, 12, 6, 17, 40, True),
    (3, 7, 40, 4, 1, 10, 2, 33, 24, True),
]


@pytest.mark.parametrize("case", CASES)
def test_mtp_head_matches_the_spec(case):
    B, S, dm, heads, kv_heads, d, n_rot, vocab, ffn, betas = case
    o = operands(np.random.default_rng(sum(case[:-1])), *case)
    want = mtp_head_np(o, heads, kv_heads, d, n_rot)
    g = head_graph(o, heads, kv_heads, d, n_rot)
    args = {k: v for k, v in o.items() if v is not None}
    np.testing.assert_allclose(rlx.reference(g)(**args), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(rlx.jit(g)(**args), want, rtol=1e-4, atol=1e-4)


def test_mtp_head_is_one_hir_block_lowered_to_primitives():
    case = CASES[0]
    o = operands(np.random.default_rng(0), *case)
    model = rlx.jit(head_graph(o, *case[3:7]))
    assert model.mlir("hir").count("hir.qwen35_mtp_head") == 1
    mir_text = model.mlir("mir")
    assert "hir." not in mir_text
    for op in ("mir.attention", "mir.rope", "mir.gather", "mir.rms_norm", "mir.concat"):
        assert op in mir_text, op


def test_mtp_head_errors():
    case = CASES[0]
    o = operands(np.random.default_rng(0), *case)
    heads, kv_heads, d, n_rot = case[3:7]
    with pytest.raises(ShapeError, match=r"qwen35_mtp_head: eh_w: expected shape \[64, 32\]"):
        head_graph({**o, "eh_w": o["eh_w"][:40]}, heads, kv_heads, d, n_rot)
    with pytest.raises(ShapeError, match=r"qwen35_mtp_head: q_norm_w: expected shape \[8\]"):
        head_graph({**o, "q_norm_w": o["q_norm_w"][:4]}, heads, kv_heads, d, n_rot)
    with pytest.raises(ShapeError, match=r"qwen35_mtp_head: n_rot: expected an even value"):
        head_graph(o, heads, kv_heads, d, 3)
    with pytest.raises(ShapeError, match=r"qwen35_mtp_head: last_token_idx: expected shape \[2\]"):
        head_graph({**o, "last_token_idx": o["last_token_idx"][:1]}, heads, kv_heads, d, n_rot)
    with pytest.raises(DTypeError, match="qwen35_mtp_head: last_token_idx: expected element type"):
        head_graph({**o, "last_token_idx": o["last_token_idx"].astype(np.float32)}, heads,
                   kv_heads, d, n_rot)


def test_mtp_head_over_a_symbolic_s():
    """One compiled head with S symbolic (h, input_ids, cos, sin): every S up to the bound,
    S = 1 included, matches the SPEC at every batch row's last_token_idx."""
    B, dm, heads, kv_heads, d, n_rot, vocab, ffn = 2, 32, 4, 2, 8, 4, 40, 48
    symbolic = {"h_pre_norm": (B, "S", dm), "input_ids": (B, "S"), "cos": ("S", n_rot // 2),
                "sin": ("S", n_rot // 2)}
    o = operands(np.random.default_rng(7), B, 1, dm, heads, kv_heads, d, n_rot, vocab, ffn, True)
    g = rlx.Graph("mtp_s")
    values = {}
    for name, array in o.items():
        dtype = {"i": "i64" if array.dtype == np.int64 else "i32"}.get(array.dtype.kind, "f32")
        declare = g.param if name not in symbolic and name != "last_token_idx" else g.input
        values[name] = declare(name, symbolic.get(name, array.shape), dtype)
    g.output(g.qwen35_mtp_head(*values.values(), num_heads=heads, num_kv_heads=kv_heads,
                               head_dim=d, n_rot=n_rot, eps=EPS))
    model = rlx.jit(g, max_dims={"S": 9})
    for s in (1, 6, 9, 2):
        o = operands(np.random.default_rng(s), B, s, dm, heads, kv_heads, d, n_rot, vocab, ffn,
                     True)
        args = {k: v for k, v in o.items() if k in symbolic or k == "last_token_idx"}
        params = {k: v for k, v in o.items() if k not in args}
        np.testing.assert_allclose(model(**args, **params), mtp_head_np(o, heads, kv_heads, d, n_rot),
                                   rtol=1e-4, atol=1e-4, err_msg=f"S={s}")


# --- matrices in a GGUF file's quantization (`schemes`) -------------------------------------

QUANT_CASES = {  # name: (B, S, d, heads, kv_heads, head_dim, n_rot, vocab, ffn, betas), schemes
    "q8_0": ((2, 5, 32, 4, 2, 8, 4, 40, 96, False),
             dict.fromkeys(QWEN35_MTP_MATRICES, "q8_0")),
    "f16": ((1, 1, 24, 2, 2, 12, 6, 17, 40, True), dict.fromkeys(QWEN35_MTP_MATRICES, "f16")),
    # a Q4_K_M-like mix: every K-quant beside q8_0, q4_0, f16 and one f32 matrix (v_w)
    "k-quants": ((3, 7, 256, 4, 1, 16, 4, 33, 256, True),
                 dict(embed_w="q6_k", eh_w="q4_k", q_gate_w="q5_k", k_w="q8_0", o_w="q4_0",
                      gate_w="q4_k", up_w="q4_k", down_w="q6_k", lm_head_w="q6_k")),
}


def raw_rows(w_in_out, scheme, rng, table=False):
    """Random raw GGUF rows ui8 [out, in/values·bytes] of `scheme` for a matrix given as f32
    [in, out] (the embedding table: [V, d]), and their dequantized f32 in the same layout."""
    rows = w_in_out if table else w_in_out.T
    values, block_bytes = QUANT_BLOCKS[scheme]
    raw = random_blocks(scheme, (rows.shape[0], rows.shape[1] // values * block_bytes), rng)
    dequantized = K.DEQUANTIZE[scheme](raw, rows.shape[1])
    return raw, dequantized if table else np.ascontiguousarray(dequantized.T)


def quantized_operands(case, schemes, seed=0):
    """(operands with the `schemes` matrices as raw rows, the same with those dequantized)."""
    rng = np.random.default_rng(seed)
    o = operands(rng, *case)
    raw, dequantized = dict(o), dict(o)
    for name, scheme in schemes.items():
        raw[name], dequantized[name] = raw_rows(o[name], scheme, rng, table=name == "embed_w")
    return raw, dequantized


def quantized_head_graph(o, schemes, activations, heads, kv_heads, d, n_rot, symbolic=False):
    g = rlx.Graph("mtp_q")
    inputs = {"h_pre_norm": 1, "input_ids": 1, "cos": 0, "sin": 0, "last_token_idx": None}
    values = {}
    for name, array in o.items():
        if array is None:
            values[name] = None
            continue
        dtype = {"i": "i64" if array.dtype == np.int64 else "i32", "u": "ui8"}.get(
            array.dtype.kind, "f32")
        shape = array.shape
        if name in inputs:
            axis = inputs[name]
            if symbolic and axis is not None:
                shape = (*shape[:axis], "S", *shape[axis + 1:])
            values[name] = g.input(name, shape, dtype)
        else:
            values[name] = g.param(name, shape, dtype)
    g.output(g.qwen35_mtp_head(**values, num_heads=heads, num_kv_heads=kv_heads, head_dim=d,
                               n_rot=n_rot, eps=EPS, schemes=schemes, activations=activations))
    return g


def relative(got, want):
    return float(np.abs(got - want).max() / np.abs(want).max())


@functools.cache
def compiled_head(name, activations):
    """(raw operands, dequantized operands, graph, compiled model) of a QUANT_CASES case,
    compiled once per module run."""
    case, schemes = QUANT_CASES[name]
    raw, dequantized = quantized_operands(case, schemes, seed=len(name))
    g = quantized_head_graph(raw, schemes, activations, *case[3:7])
    return raw, dequantized, g, rlx.jit(g)


@pytest.mark.parametrize("activations", ["f32", "q8"])
@pytest.mark.parametrize("name", list(QUANT_CASES))
def test_quantized_mtp_head_matches_the_reference(name, activations):
    """Compiled == reference (the same dequant_matmul / dequant_gather semantics, q8
    activations included: the reference models ggml's quantization of them exactly), and
    with f32 activations both equal the SPEC's head on the dequantized f32 weights."""
    case, _ = QUANT_CASES[name]
    heads, kv_heads, d, n_rot = case[3:7]
    raw, dequantized, g, model = compiled_head(name, activations)
    args = {k: v for k, v in raw.items() if v is not None}
    want = rlx.reference(g)(**args)
    error = relative(model(**args), want)
    print(f"mtp head {name} activations {activations}: compiled vs reference {error:.1e}")
    assert error <= 1e-5, error
    spec = mtp_head_np(dequantized, heads, kv_heads, d, n_rot)
    if activations == "f32":
        np.testing.assert_allclose(want, spec, rtol=1e-4, atol=1e-4 * np.abs(spec).max())
    else:  # 8-bit activations: close to the f32 head, not equal (~1% of the logits' range)
        assert relative(want, spec) <= 0.05, relative(want, spec)


def test_quantized_mtp_head_lowers_to_dequantizing_kernels():
    hir_text, mir_text = (compiled_head("k-quants", "q8")[3].mlir(stage)
                          for stage in ("hir", "mir"))
    assert "embed(q6_k %embed_w)" in hir_text and "activations q8" in hir_text
    assert "attn(q5_k %q_gate_w, q8_0 %k_w, %v_w)" in hir_text
    # every quantized matrix but the table and gate/up, which mir-fuse makes one product
    assert mir_text.count("mir.dequant_matmul") == 6
    assert re.search(r"mir.shared_input_matmul %\w+, %gate_w, %up_w scheme q4_k activations q8",
                     mir_text)
    assert mir_text.count("mir.dequant_gather %embed_w, %input_ids scheme q6_k") == 1
    assert mir_text.count("mir.matmul") == 1  # v_w, the f32 one
    assert "mir.gather %embed_w" not in mir_text


def test_quantized_mtp_head_over_a_symbolic_s():
    """One compile with S symbolic and q8_0 weights: every S matches the reference."""
    case, schemes = QUANT_CASES["q8_0"]
    heads, kv_heads, d, n_rot = case[3:7]
    raw, _ = quantized_operands(case, schemes)
    model = rlx.jit(quantized_head_graph(raw, schemes, "q8", heads, kv_heads, d, n_rot,
                                         symbolic=True), max_dims={"S": 9})
    for s in (1, 4, 9):
        o, _ = quantized_operands((case[0], s, *case[2:]), schemes, seed=s)
        o = {k: v for k, v in o.items() if v is not None}
        g = quantized_head_graph(o, schemes, "q8", heads, kv_heads, d, n_rot)
        want = rlx.reference(g)(**o)
        assert relative(model(**o), want) <= 1e-5, s


def test_quantized_mtp_head_errors():
    case, schemes = QUANT_CASES["q8_0"]
    heads, kv_heads, d, n_rot = case[3:7]
    raw, dequantized = quantized_operands(case, schemes)

    def build(o, schemes=schemes, activations="f32"):
        return quantized_head_graph(o, schemes, activations, heads, kv_heads, d, n_rot)

    with pytest.raises(DTypeError, match="qwen35_mtp_head: eh_w: expected element type ui8"):
        build({**raw, "eh_w": dequantized["eh_w"]})
    with pytest.raises(DTypeError, match="qwen35_mtp_head: eh_w: expected element type f32"):
        build(raw, {k: v for k, v in schemes.items() if k != "eh_w"})
    with pytest.raises(ShapeError, match=r"qwen35_mtp_head: eh_w: expected shape \[32, 68\] "
                                         r"\(q8_0 rows of \[2d, d\]"):
        build({**raw, "eh_w": raw["eh_w"][:, :34]})
    with pytest.raises(ShapeError, match=r"qwen35_mtp_head: lm_head_w: q4_k rows need an input "
                                         r"size that is a multiple of 256"):
        build(raw, {**schemes, "lm_head_w": "q4_k"})
    with pytest.raises(RlxError, match="qwen35_mtp_head: schemes: k_w: expected one of"):
        build(raw, {**schemes, "k_w": "q9_0"})
    with pytest.raises(RlxError, match="qwen35_mtp_head: schemes: 'hnorm_w' is no matrix"):
        build(raw, {**schemes, "hnorm_w": "q8_0"})
    with pytest.raises(RlxError, match="qwen35_mtp_head: activations: expected one of"):
        build(raw, activations="q4")
