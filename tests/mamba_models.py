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
