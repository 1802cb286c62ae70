"""Tiny Mamba models for the tests: a random Hugging Face `MambaForCausalLM` and its GGUF file.

`write_mamba_gguf(path, state, config, matrix_type)` writes a Mamba state dict (Hugging
Face names, numpy arrays) the way llama.cpp's converter does (`convert_hf_to_gguf.py`,
`conversion/mamba.py` in the llama-cpp-python 0.3.36 sources): the same metadata keys,
tensor names, shapes and types (1-D tensors, `ssm_conv1d.weight` and the tensors without a
`.weight` suffix (`ssm_a`, `ssm_d`) stay F32; other matrices take `matrix_type`, F16
where a row does not fill its blocks; `A_log` is stored as `-exp(A_log)`; no
`output.weight` when the head is tied). The vocabulary is tests/gguf_models.py's byte-level
one (280 tokens, a multiple of 8 as the converter pads to). tests/test_parity_mamba.py
checks this against the converter itself when its sources are given
(`LLAMA_CPP_SRC=.../vendor/llama.cpp`).

`tiny_mamba(...)` (needs torch and transformers) is the random HF model both the
hand-built stack of tests/test_parity_sequence.py and the GGUF parity tests use.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import numpy as np
from gguf import GGMLQuantizationType as T
from gguf_models import CHATML, N_VOCAB, vocabulary

LAYER_NAMES = {
    "norm.weight": "attn_norm.weight", "mixer.in_proj.weight": "ssm_in.weight",
    "mixer.conv1d.weight": "ssm_conv1d.weight", "mixer.conv1d.bias": "ssm_conv1d.bias",
    "mixer.x_proj.weight": "ssm_x.weight", "mixer.dt_proj.weight": "ssm_dt.weight",
    "mixer.dt_proj.bias": "ssm_dt.bias", "mixer.A_log": "ssm_a", "mixer.D": "ssm_d",
    "mixer.out_proj.weight": "ssm_out.weight",
}
"""Hugging Face name (after backbone.layers.N.) -> GGUF name (after blk.N.)."""


def tiny_mamba(vocab_size: int = N_VOCAB, hidden_size: int = 64, state_size: int = 12,
               num_hidden_layers: int = 2, time_step_rank: int = 6, seed: int = 0) -> Any:
    """A random `MambaForCausalLM` (float32, eval mode) with irregular A, D and norms (HF's
    init leaves them regular); expand 2, conv kernel 4, tied head."""
    import pytest

    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "MambaForCausalLM"):
        pytest.skip("transformers has no MambaForCausalLM")
    config = transformers.MambaConfig(
        vocab_size=vocab_size, hidden_size=hidden_size, state_size=state_size,
        num_hidden_layers=num_hidden_layers, conv_kernel=4, expand=2,
        time_step_rank=time_step_rank, use_mambapy=False, tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = transformers.MambaForCausalLM(config).eval()
    with torch.no_grad():
        for layer in model.backbone.layers:
            layer.mixer.A_log.add_(0.3 * torch.randn_like(layer.mixer.A_log))
            layer.mixer.D.add_(0.5 * torch.randn_like(layer.mixer.D))
            layer.norm.weight.add_(0.2 * torch.randn_like(layer.norm.weight))
    return model


def hf_state(model: Any) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(state dict as float32 numpy, config as a dict) of a Hugging Face Mamba model."""
    state = {k: v.detach().float().numpy().copy() for k, v in model.state_dict().items()}
    return state, model.config.to_dict()


def gguf_tensors(state: dict[str, np.ndarray],
                 config: dict[str, Any]) -> dict[str, np.ndarray]:
    """The converter's f32 tensors (GGUF name -> row-major array) of a Mamba state dict."""
    out = {"token_embd.weight": state["backbone.embeddings.weight"]}
    for i in range(config["num_hidden_layers"]):
        for hf, name in LAYER_NAMES.items():
            value = state[f"backbone.layers.{i}.{hf}"]
            if hf == "mixer.A_log":
                value = -np.exp(value)
            if hf == "mixer.conv1d.weight":
                value = value.squeeze()  # [I, 1, K] -> [I, K]
            out[f"blk.{i}.{name}"] = value
    out["output_norm.weight"] = state["backbone.norm_f.weight"]
    head = state.get("lm_head.weight")
    if head is not None and not np.array_equal(head, out["token_embd.weight"]):
        out["output.weight"] = head
    return {k: np.ascontiguousarray(v, np.float32) for k, v in out.items()}


def tensor_type(name: str, shape: tuple[int, ...], matrix_type: T) -> T:
    """The type the converter gives tensor `name` of an `outtype` of `matrix_type`."""
    if len(shape) <= 1 or name.endswith("_norm.weight") or "ssm_conv1d" in name \
            or not name.endswith(".weight"):
        return T.F32
    block = gguf.GGML_QUANT_SIZES[matrix_type][0]
    if shape[-1] % block:  # gguf.QuantError: the converter falls back to F16
        return T.F16
    return matrix_type


def write_mamba_gguf(path: Path, state: dict[str, np.ndarray], config: dict[str, Any],
                     matrix_type: T = T.F32, *, dt_b_c_rms: bool = False,
                     drop: str | None = None) -> Path:
    """The GGUF file of a Mamba state dict, as the converter writes it (module docstring).
    `drop` leaves a tensor out; `dt_b_c_rms` sets Falcon Mamba's flag (for error tests)."""
    writer = gguf.GGUFWriter(path, "mamba")
    d = config["hidden_size"]
    writer.add_type("model")
    writer.add_name("Tiny Mamba")
    writer.add_context_length(2**20)
    writer.add_embedding_length(d)
    writer.add_feed_forward_length(0)
    writer.add_head_count(0)
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_ssm_conv_kernel(config["conv_kernel"])
    writer.add_ssm_inner_size(config["intermediate_size"])
    writer.add_ssm_state_size(config["state_size"])
    writer.add_ssm_time_step_rank(config["time_step_rank"])
    writer.add_layer_norm_rms_eps(config["layer_norm_epsilon"])
    writer.add_ssm_dt_b_c_rms(dt_b_c_rms)
    file_types = {T.F32: gguf.LlamaFileType.ALL_F32, T.F16: gguf.LlamaFileType.MOSTLY_F16,
                  T.Q8_0: gguf.LlamaFileType.MOSTLY_Q8_0, T.Q4_0: gguf.LlamaFileType.MOSTLY_Q4_0}
    writer.add_file_type(file_types[matrix_type])
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    tokens, token_types, merges = vocabulary()
    assert len(tokens) == config["vocab_size"] == N_VOCAB
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types(token_types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokens.index("<|im_start|>"))
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHATML)
    for name, values in gguf_tensors(state, config).items():
        if name == drop:
            continue
        kind = tensor_type(name, values.shape, matrix_type)
        if kind == T.F32:
            writer.add_tensor(name, values)
        elif kind == T.F16:
            writer.add_tensor(name, values.astype(np.float16))
        else:
            writer.add_tensor(name, gguf.quants.quantize(values, kind), raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# --- without torch: a random state dict and an independent numpy forward ------------------------


def random_mamba(vocab_size: int = N_VOCAB, hidden_size: int = 64, state_size: int = 12,
                 num_hidden_layers: int = 2, time_step_rank: int = 6,
                 seed: int = 0) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(state dict, config) of a random Mamba model in Hugging Face's names, numpy only."""
    rng = np.random.default_rng(seed)
    d, inner, n, rank, taps = hidden_size, 2 * hidden_size, state_size, time_step_rank, 4
    config = {"vocab_size": vocab_size, "hidden_size": d, "intermediate_size": inner,
              "state_size": n, "time_step_rank": rank, "conv_kernel": taps,
              "num_hidden_layers": num_hidden_layers, "layer_norm_epsilon": 1e-5}

    def normal(*shape, std=0.1):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    state = {"backbone.embeddings.weight": normal(vocab_size, d, std=1.0),
             "backbone.norm_f.weight": 1 + normal(d)}
    for i in range(num_hidden_layers):
        p = f"backbone.layers.{i}."
        state |= {
            p + "norm.weight": 1 + normal(d, std=0.2), p + "mixer.in_proj.weight": normal(2 * inner, d),
            p + "mixer.conv1d.weight": normal(inner, 1, taps, std=0.3),
            p + "mixer.conv1d.bias": normal(inner), p + "mixer.x_proj.weight": normal(rank + 2 * n, inner),
            p + "mixer.dt_proj.weight": normal(inner, rank, std=0.3),
            p + "mixer.dt_proj.bias": normal(inner, std=0.5) - 2,
            p + "mixer.A_log": np.log(np.arange(1, n + 1, dtype=np.float32))[None].repeat(inner, 0)
            + normal(inner, n, std=0.3),
            p + "mixer.D": 1 + normal(inner, std=0.5), p + "mixer.out_proj.weight": normal(d, inner),
        }
    return state, config


def numpy_mamba_logits(path: Path, ids: list[int]) -> np.ndarray:
    """Logits [len(ids), n_vocab] of the `mamba` file at `path` from an empty state, float64,
    written from the Mamba paper / llama.cpp's mamba.cpp with nothing of rlx_mlir."""
    reader = gguf.GGUFReader(path)
    w = {t.name: np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), np.float64)
         .reshape([int(d) for d in reversed(t.shape)]) for t in reader.tensors}
    eps = float(reader.fields["mamba.attention.layer_norm_rms_epsilon"].parts[-1][0])
    n_layer = int(reader.fields["mamba.block_count"].parts[-1][0])
    rank = int(reader.fields["mamba.ssm.time_step_rank"].parts[-1][0])

    def rms_norm(x, gamma):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * gamma

    def silu(x):
        return x / (1 + np.exp(-x))

    h = w["token_embd.weight"][ids]
    s = len(ids)
    for i in range(n_layer):
        p = {k.split(".", 2)[2]: v for k, v in w.items() if k.startswith(f"blk.{i}.")}
        xz = rms_norm(h, p["attn_norm.weight"]) @ p["ssm_in.weight"].T
        inner = xz.shape[1] // 2
        x, z = xz[:, :inner], xz[:, inner:]
        conv_w = p["ssm_conv1d.weight"]  # [I, K]
        taps = conv_w.shape[1]
        padded = np.concatenate([np.zeros((taps - 1, inner)), x])
        x = silu(sum(padded[k:k + s] * conv_w[:, k] for k in range(taps)) + p["ssm_conv1d.bias"])
        dbl = x @ p["ssm_x.weight"].T
        n = (dbl.shape[1] - rank) // 2
        dt, b, c = dbl[:, :rank], dbl[:, rank:rank + n], dbl[:, rank + n:]
        delta = np.logaddexp(0, dt @ p["ssm_dt.weight"].T + p["ssm_dt.bias"])
        state = np.zeros((inner, n))
        y = np.empty_like(x)
        for t in range(s):
            state = np.exp(delta[t][:, None] * p["ssm_a"]) * state \
                + (delta[t] * x[t])[:, None] * b[t][None]
            y[t] = state @ c[t]
        h = h + ((y + x * p["ssm_d"]) * silu(z)) @ p["ssm_out.weight"].T
    out = w.get("output.weight", w["token_embd.weight"])
    return rms_norm(h, w["output_norm.weight"]) @ out.T
