"""Tiny GGUF language models for the model tests, and an independent numpy forward.

`write_tiny_model(path, arch, types=...)` writes a random `llama`, `qwen2` or `qwen3` model
with gguf.GGUFWriter: d 256 (so every K-quant fits a row), 2 layers, 4 heads / 2 kv heads,
head_dim 64, a byte-level BPE vocabulary (the 256 byte tokens, a few merged words, ChatML
control tokens) and a ChatML chat template. Block types are quantized by gguf.quants where
it can; K-quant blocks are random bytes whose f16 scales are set so the weights have a sane
size (gguf cannot quantize those).

`numpy_logits(path, ids)` is the model written from the SPEC with nothing of rlx_mlir:
weights dequantized by gguf.quants, float64 math, rope per architecture (adjacent pairs for
llama, halves for qwen2/qwen3), causal grouped-query attention from position 0.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as T

N_LAYER, N_EMBD, N_HEAD, N_HEAD_KV, HEAD_DIM, N_FF = 2, 256, 4, 2, 64, 512
ROPE_THETA, EPS = 10000.0, 1e-5
WORDS = ["Ġthe", "Ġcat", "Ġsat", "hello", "Ġworld", "Ġon", "Ġmat"]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
          "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")

# Byte offsets and target weight scale of the f16 scale fields of K-quant blocks.
K_SCALE_OFFSETS = {T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208], T.Q2_K: [80, 82],
                   T.Q3_K: [108]}
WEIGHT_STD = 0.06

MIXED_TYPES = {
    "attn_q.weight": T.Q4_1, "attn_k.weight": T.Q8_0, "attn_v.weight": T.Q4_K,
    "attn_output.weight": T.Q6_K, "ffn_gate.weight": T.F16, "ffn_up.weight": T.Q5_0,
    "ffn_down.weight": T.Q4_0, "token_embd.weight": T.Q8_0,
}
"""Per-tensor types of the default tiny model: several kinds in one model."""


def vocabulary() -> tuple[list[str], list[int], list[str]]:
    """(tokens, token types, merges): bytes, merged WORDS (built right to left), specials."""
    from rlx_mlir.models.tokenizer import _byte_decoder

    tokens = [c for c, _ in sorted(_byte_decoder().items(), key=lambda item: item[1])]
    merges: list[str] = []
    for word in WORDS:
        for start in range(len(word) - 2, -1, -1):
            if word[start:] not in tokens:
                merges.append(f"{word[start]} {word[start + 1:]}")
                tokens.append(word[start:])
    types = [1] * len(tokens) + [3] * len(SPECIALS)
    return tokens + SPECIALS, types, merges


N_VOCAB = len(vocabulary()[0])


def random_tensor(shape: tuple[int, ...], kind: T, rng: np.random.Generator,
                  std: float = WEIGHT_STD) -> np.ndarray:
    """Data of `kind` for a tensor of row-major `shape`, values of about `std`."""
    values = (rng.standard_normal(shape) * std).astype(np.float32)
    if kind == T.F32:
        return values
    if kind == T.F16:
        return values.astype(np.float16)
    if kind not in K_SCALE_OFFSETS:
        return gguf.quants.quantize(values, kind)
    raw = rng.integers(0, 256, size=gguf.quants.quant_shape_to_byte_shape(shape, kind),
                       dtype=np.uint8)
    blocks = raw.reshape(-1, gguf.GGML_QUANT_SIZES[kind][1])
    for offset in K_SCALE_OFFSETS[kind]:
        scale = np.abs(rng.standard_normal((blocks.shape[0], 1))) + 0.5
        blocks[:, offset:offset + 2] = scale.astype(np.float16).view(np.uint8)
    measured = gguf.quants.dequantize(raw, kind).std()
    for offset in K_SCALE_OFFSETS[kind]:
        scale = blocks[:, offset:offset + 2].copy().view(np.float16).astype(np.float32)
        blocks[:, offset:offset + 2] = (scale * std / measured).astype(np.float16).view(np.uint8)
    return raw


def tensor_specs(arch: str, types: dict[str, T], tied: bool) -> dict[str, tuple[tuple[int, ...], T]]:
    q, kv = N_HEAD * HEAD_DIM, N_HEAD_KV * HEAD_DIM
    layer = {
        "attn_norm.weight": (N_EMBD,), "attn_q.weight": (q, N_EMBD),
        "attn_k.weight": (kv, N_EMBD), "attn_v.weight": (kv, N_EMBD),
        "attn_output.weight": (N_EMBD, q), "ffn_norm.weight": (N_EMBD,),
        "ffn_gate.weight": (N_FF, N_EMBD), "ffn_up.weight": (N_FF, N_EMBD),
        "ffn_down.weight": (N_EMBD, N_FF),
    }
    if arch == "qwen2":
        layer |= {"attn_q.bias": (q,), "attn_k.bias": (kv,), "attn_v.bias": (kv,)}
    if arch in ("qwen3", "gemma3"):
        layer |= {"attn_q_norm.weight": (HEAD_DIM,), "attn_k_norm.weight": (HEAD_DIM,)}
    if arch == "gemma3":
        layer |= {"post_attention_norm.weight": (N_EMBD,), "post_ffw_norm.weight": (N_EMBD,)}
    shapes = {"token_embd.weight": (N_VOCAB, N_EMBD), "output_norm.weight": (N_EMBD,)}
    if not tied:
        shapes["output.weight"] = (N_VOCAB, N_EMBD)
    for i in range(N_LAYER):
        shapes |= {f"blk.{i}.{name}": shape for name, shape in layer.items()}
    specs = {}
    for name, shape in shapes.items():
        short = name.split(".", 2)[-1] if name.startswith("blk.") else name
        specs[name] = (shape, types.get(short, T.F32 if len(shape) == 1 else T.Q8_0))
    return specs


def write_tiny_model(path: Path, arch: str = "llama", *, types: dict[str, T] | None = None,
                     tied: bool = True, seed: int = 0, eos_token_id: int | None = None,
                     architecture: str | None = None, drop: str | None = None,
                     chat_template: str | None = CHATML, extra: dict | None = None) -> Path:
    """A random tiny model of `arch` (see the module docstring). `architecture` overrides the
    written general.architecture (for unsupported ones), `drop` leaves a tensor out, `extra`
    adds metadata (key -> value, written as uint32/float32/str by type)."""
    rng = np.random.default_rng(seed)
    arch_name = architecture or arch
    writer = gguf.GGUFWriter(path, arch_name)
    writer.add_block_count(N_LAYER)
    writer.add_context_length(512)
    writer.add_embedding_length(N_EMBD)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_layer_norm_rms_eps(EPS)
    writer.add_rope_freq_base(ROPE_THETA)
    if arch in ("qwen3", "gemma3"):
        writer.add_key_length(HEAD_DIM)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    tokens, token_types, merges = vocabulary()
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types(token_types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokens.index("<|im_start|>"))
    writer.add_eos_token_id(tokens.index("<|im_end|>") if eos_token_id is None else eos_token_id)
    writer.add_add_bos_token(False)
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    for key, value in (extra or {}).items():
        if isinstance(value, str):
            writer.add_string(key, value)
        elif isinstance(value, float):
            writer.add_float32(key, value)
        else:
            writer.add_uint32(key, value)
    for name, (shape, kind) in tensor_specs(arch, {**MIXED_TYPES, **(types or {})}, tied).items():
        std = 1.0 if name.endswith("_norm.weight") else WEIGHT_STD
        data = random_tensor(shape, kind, rng, std)
        if name.endswith("_norm.weight"):
            data = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        if name != drop:
            writer.add_tensor(name, data, raw_dtype=None if kind in (T.F32, T.F16) else kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# --- the independent numpy model ------------------------------------------------------------


def numpy_logits(path: Path, ids: list[int]) -> np.ndarray:
    """Logits [len(ids), n_vocab] of the model at `path` from position 0 (float64 math)."""
    reader = gguf.GGUFReader(path)
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    w = {t.name: np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), np.float64)
         .reshape([int(d) for d in reversed(t.shape)]) for t in reader.tensors}
    h = w["token_embd.weight"][ids]
    cos, sin = rope_tables(len(ids))
    for i in range(N_LAYER):
        def p(name: str, i: int = i) -> np.ndarray:
            return w[f"blk.{i}.{name}"]

        x = rms_norm(h, p("attn_norm.weight"))
        q, k, v = (x @ p(f"attn_{n}.weight").T for n in "qkv")
        if arch == "qwen2":
            q, k, v = q + p("attn_q.bias"), k + p("attn_k.bias"), v + p("attn_v.bias")
        if arch == "qwen3":
            q = head_rms_norm(q, p("attn_q_norm.weight"))
            k = head_rms_norm(k, p("attn_k_norm.weight"))
        style = "interleaved" if arch == "llama" else "half"
        q, k = rope(q, cos, sin, style), rope(k, cos, sin, style)
        h = h + attention(q, k, v) @ p("attn_output.weight").T
        x = rms_norm(h, p("ffn_norm.weight"))
        gate = x @ p("ffn_gate.weight").T
        h = h + (gate / (1 + np.exp(-gate)) * (x @ p("ffn_up.weight").T)) @ p("ffn_down.weight").T
    out = w.get("output.weight", w["token_embd.weight"])
    return rms_norm(h, w["output_norm.weight"]) @ out.T


def rms_norm(x: np.ndarray, gamma: np.ndarray) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + EPS) * gamma


def head_rms_norm(x: np.ndarray, gamma: np.ndarray) -> np.ndarray:
    heads = x.reshape(x.shape[0], -1, HEAD_DIM)
    return rms_norm(heads, gamma).reshape(x.shape)


def rope_tables(n: int) -> tuple[np.ndarray, np.ndarray]:
    inv_freq = ROPE_THETA ** (-np.arange(0, HEAD_DIM, 2) / HEAD_DIM)
    angles = np.outer(np.arange(n), inv_freq)
    return np.cos(angles), np.sin(angles)


def rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, style: str) -> np.ndarray:
    heads = x.reshape(x.shape[0], -1, HEAD_DIM).copy()
    half = HEAD_DIM // 2
    if style == "interleaved":
        a, b = heads[..., 0::2].copy(), heads[..., 1::2].copy()
    else:
        a, b = heads[..., :half].copy(), heads[..., half:].copy()
    c, s = cos[:, None, :], sin[:, None, :]
    ra, rb = a * c - b * s, b * c + a * s
    if style == "interleaved":
        heads[..., 0::2], heads[..., 1::2] = ra, rb
    else:
        heads[..., :half], heads[..., half:] = ra, rb
    return heads.reshape(x.shape)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    n = q.shape[0]
    out = np.empty_like(q)
    group = N_HEAD // N_HEAD_KV
    mask = np.triu(np.ones((n, n), bool), 1)
    for head in range(N_HEAD):
        cols = slice(head * HEAD_DIM, (head + 1) * HEAD_DIM)
        kv_cols = slice(head // group * HEAD_DIM, (head // group + 1) * HEAD_DIM)
        scores = q[:, cols] @ k[:, kv_cols].T / np.sqrt(HEAD_DIM)
        scores[mask] = -np.inf
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
        out[:, cols] = (weights / weights.sum(axis=-1, keepdims=True)) @ v[:, kv_cols]
    return out
