"""Tiny Qwen3.5 models for the qwen35 tests: a random Hugging Face `Qwen3_5ForCausalLM`
(with an MTP layer's weights beside it) and its GGUF file written as llama.cpp's converter
writes it (`conversion/qwen.py`, `Qwen3_5TextModel` and its bases: same tensor names,
shapes, transforms and metadata keys), with tests/gguf_models.py's byte-level vocabulary.

The converter's own tokenizer check refuses a made-up vocabulary, so the file is written
here with gguf.GGUFWriter; `test_parity_qwen35.py` checks these names, shapes and values
against the converter itself when the llama.cpp sources are at hand.

The converter's transforms: every RMS norm gamma but the delta net's (`linear_attn.norm`)
is stored as HF uses it, 1 + w; `A_log` becomes `ssm_a` = −exp(A_log); the conv weight
[C, 1, K] is squeezed to [C, K]; value heads are reordered from grouped by key head to
tiled (value head j of the file is HF's (j mod n_k) · r + j div n_k, r = n_v / n_k) in
in_proj_qkv's v rows, in_proj_z, in_proj_a/b, A_log, dt_bias, the conv's v channels and
out_proj's columns; the MTP weights (`mtp.*`) become layer n_layer's nextn tensors.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import torch
import transformers
from gguf_models import vocabulary

N_VOCAB = len(vocabulary()[0])

CONFIG = dict(
    vocab_size=N_VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
    layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
    num_attention_heads=4, num_key_value_heads=2, head_dim=16,
    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
    linear_value_head_dim=16, linear_conv_kernel_dim=4, partial_rotary_factor=0.25,
    tie_word_embeddings=False, rms_norm_eps=1e-6, mtp_num_hidden_layers=1,
)
"""Three gated-delta-net layers (2 key heads, 4 value heads) and one gated attention layer
(4 heads, 2 kv heads, head_dim 16, 4 rotary dims), an MTP layer."""


def tiny_model(seed: int = 0):
    """(HF model in eval mode, the MTP layer's HF-named weights `mtp.*`), every weight
    random (HF zero-initializes its (1 + w) norms: they get noise too)."""
    config = transformers.Qwen3_5TextConfig(**CONFIG)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = transformers.Qwen3_5ForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or "A_log" in name or "dt_bias" in name:
                p.add_(0.2 * torch.randn_like(p))
        model.lm_head.weight.mul_(30.0)  # logits of a few units: top-two margins that decide
    d, f, hd = config.hidden_size, config.intermediate_size, config.head_dim
    q_out, kv_out = 2 * config.num_attention_heads * hd, config.num_key_value_heads * hd

    def w(*shape, scale=None):
        return torch.randn(*shape) * (scale if scale is not None else shape[-1] ** -0.5)

    layer = "mtp.layers.0."
    mtp = {"mtp.fc.weight": w(d, 2 * d), "mtp.pre_fc_norm_embedding.weight": w(d, scale=0.2),
           "mtp.pre_fc_norm_hidden.weight": w(d, scale=0.2), "mtp.norm.weight": w(d, scale=0.2),
           layer + "input_layernorm.weight": w(d, scale=0.2),
           layer + "post_attention_layernorm.weight": w(d, scale=0.2),
           layer + "self_attn.q_proj.weight": w(q_out, d),
           layer + "self_attn.k_proj.weight": w(kv_out, d),
           layer + "self_attn.v_proj.weight": w(kv_out, d),
           layer + "self_attn.o_proj.weight": w(d, config.num_attention_heads * hd),
           layer + "self_attn.q_norm.weight": w(hd, scale=0.2),
           layer + "self_attn.k_norm.weight": w(hd, scale=0.2),
           layer + "mlp.gate_proj.weight": w(f, d), layer + "mlp.up_proj.weight": w(f, d),
           layer + "mlp.down_proj.weight": w(d, f)}
    return model, mtp


def _np(t) -> np.ndarray:
    return t.detach().to(torch.float32).numpy().copy()


def _tiled(x: np.ndarray, axis: int, n_k: int, per_k: int, head: int) -> np.ndarray:
    """Value heads along `axis` from grouped by key head to the converter's tiled order."""
    x = np.moveaxis(x, axis, 0)
    rest = x.shape[1:]
    x = x.reshape(n_k, per_k, head, *rest).swapaxes(0, 1).reshape(n_k * per_k * head, *rest)
    return np.ascontiguousarray(np.moveaxis(x, 0, axis))


def gguf_tensors(model, mtp: dict | None) -> dict[str, np.ndarray]:
    """The converter's tensors (GGUF name -> row-major f32 array) of the HF model."""
    c = model.config
    sd = {k: _np(v) for k, v in model.state_dict().items()}
    n_k, n_v = c.linear_num_key_heads, c.linear_num_value_heads
    per_k, dk, dv = n_v // n_k, c.linear_key_head_dim, c.linear_value_head_dim
    key_dim = n_k * dk

    def tiled(x, axis=0, head=dv):
        return _tiled(x, axis, n_k, per_k, head)

    out = {"token_embd.weight": sd["model.embed_tokens.weight"],
           "output_norm.weight": 1 + sd["model.norm.weight"],
           "output.weight": sd["lm_head.weight"]}
    for i, kind in enumerate(c.layer_types):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        out |= {b + "attn_norm.weight": 1 + sd[p + "input_layernorm.weight"],
                b + "post_attention_norm.weight": 1 + sd[p + "post_attention_layernorm.weight"]}
        out |= {b + f"ffn_{n}.weight": sd[p + f"mlp.{n}_proj.weight"] for n in ("gate", "up", "down")}
        if kind == "full_attention":
            out |= _attention(sd, p + "self_attn.", b)
            continue
        a = p + "linear_attn."
        qkv = sd[a + "in_proj_qkv.weight"]
        conv = sd[a + "conv1d.weight"][:, 0, :]
        out |= {
            b + "attn_qkv.weight": np.concatenate([qkv[:2 * key_dim], tiled(qkv[2 * key_dim:])]),
            b + "attn_gate.weight": tiled(sd[a + "in_proj_z.weight"]),
            b + "ssm_conv1d.weight": np.concatenate([conv[:2 * key_dim],
                                                     tiled(conv[2 * key_dim:])]),
            b + "ssm_dt.bias": tiled(sd[a + "dt_bias"], head=1),
            b + "ssm_a": tiled(-np.exp(sd[a + "A_log"]), head=1),
            b + "ssm_beta.weight": tiled(sd[a + "in_proj_b.weight"], head=1),
            b + "ssm_alpha.weight": tiled(sd[a + "in_proj_a.weight"], head=1),
            b + "ssm_norm.weight": sd[a + "norm.weight"],
            b + "ssm_out.weight": tiled(sd[a + "out_proj.weight"], axis=1),
        }
    if mtp:
        m = {k: _np(v) for k, v in mtp.items()}
        b, p = f"blk.{c.num_hidden_layers}.", "mtp.layers.0."
        out |= {b + "nextn.eh_proj.weight": m["mtp.fc.weight"],
                b + "nextn.enorm.weight": 1 + m["mtp.pre_fc_norm_embedding.weight"],
                b + "nextn.hnorm.weight": 1 + m["mtp.pre_fc_norm_hidden.weight"],
                b + "nextn.shared_head_norm.weight": 1 + m["mtp.norm.weight"],
                b + "attn_norm.weight": 1 + m[p + "input_layernorm.weight"],
                b + "post_attention_norm.weight": 1 + m[p + "post_attention_layernorm.weight"]}
        out |= {b + f"ffn_{n}.weight": m[p + f"mlp.{n}_proj.weight"] for n in ("gate", "up", "down")}
        out |= _attention(m, p + "self_attn.", b)
    return out


def _attention(sd: dict, p: str, b: str) -> dict[str, np.ndarray]:
    return {b + "attn_q.weight": sd[p + "q_proj.weight"], b + "attn_k.weight": sd[p + "k_proj.weight"],
            b + "attn_v.weight": sd[p + "v_proj.weight"],
            b + "attn_output.weight": sd[p + "o_proj.weight"],
            b + "attn_q_norm.weight": 1 + sd[p + "q_norm.weight"],
            b + "attn_k_norm.weight": 1 + sd[p + "k_norm.weight"]}


def write_qwen35(path: Path, model, mtp: dict | None = None, *, drop: str | None = None,
                 extra: dict | None = None, quant: gguf.GGMLQuantizationType | None = None
                 ) -> Path:
    """The GGUF file of `model` (and its MTP weights `mtp`, when given) at `path`, f32, with
    the converter's metadata; `drop` leaves a tensor out, `extra` overrides metadata,
    `quant` quantizes every matrix but the conv's (rows of K values) with gguf.quants."""
    c = model.config
    n_mtp = 1 if mtp else 0
    writer = gguf.GGUFWriter(path, "qwen35")
    writer.add_block_count(c.num_hidden_layers + n_mtp)
    writer.add_context_length(c.max_position_embeddings)
    writer.add_embedding_length(c.hidden_size)
    writer.add_feed_forward_length(c.intermediate_size)
    writer.add_head_count(c.num_attention_heads)
    writer.add_head_count_kv(c.num_key_value_heads)
    writer.add_rope_freq_base(c.rope_parameters["rope_theta"])
    writer.add_layer_norm_rms_eps(c.rms_norm_eps)
    writer.add_key_length(c.head_dim)
    writer.add_value_length(c.head_dim)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    if n_mtp:
        writer.add_nextn_predict_layers(n_mtp)
    writer.add_ssm_conv_kernel(c.linear_conv_kernel_dim)
    writer.add_ssm_state_size(c.linear_key_head_dim)
    writer.add_ssm_group_count(c.linear_num_key_heads)
    writer.add_ssm_time_step_rank(c.linear_num_value_heads)
    writer.add_ssm_inner_size(c.linear_value_head_dim * c.linear_num_value_heads)
    # the installed gguf has no add_recurrent_layers: the converter's key and value
    writer.add_array("qwen35.attention.recurrent_layers",
                     [t == "linear_attention" for t in c.layer_types] + [False] * n_mtp)
    writer.add_full_attention_interval(4)
    writer.add_rope_dimension_count(int(c.head_dim * c.rope_parameters["partial_rotary_factor"]))
    writer.add_rope_dimension_sections([11, 11, 10, 0])
    tokens, token_types, merges = vocabulary()
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen35")
    writer.add_token_list(tokens)
    writer.add_token_types(token_types)
    writer.add_token_merges(merges)
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    writer.add_add_bos_token(False)
    for key, value in (extra or {}).items():
        writer.add_uint32(key, value)
    for name, data in gguf_tensors(model, mtp).items():
        data = np.ascontiguousarray(data, np.float32)
        if name == drop:
            continue
        if quant is not None and data.ndim == 2 and "ssm_conv1d" not in name:
            writer.add_tensor(name, gguf.quants.quantize(data, quant), raw_dtype=quant)
        else:
            writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
