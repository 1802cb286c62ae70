"""The `gemma3` architecture (Gemma 3 text models) as llama.cpp runs it (src/models/gemma3.cpp).

Differences from the llama graph of `architectures`:

- the looked-up embedding rows are scaled by √n_embd;
- per-head RMS norms of q and k (`attn_q_norm`, `attn_k_norm`, gamma [head_dim]) before rope;
- RMS norms after the attention output and after the FFN as well as before them
  (`post_attention_norm`, `post_ffw_norm`), each applied before its residual add;
- a GELU-tanh gated FFN: down(gelu_tanh(gate(x)) * up(x));
- head_dim (`gemma3.attention.key_length`) independent of n_embd / n_head; the attention
  scale is 1/√head_dim (llama.cpp's rule: 1/√(n_embd/n_head) for the 62-layer 27B model);
- local layers attend within a sliding window of W = `gemma3.attention.sliding_window` keys
  and rotate with their own rope base (`gemma3.rope.freq_base_swa`, default 10000, position
  scale 1); the others are global (the file's `rope.freq_base` and scaling). Which layers are
  local: `gemma3.attention.sliding_window_pattern` (a period N, or a per-layer array),
  default N = 6: layer i is local unless i % N == N - 1;
- optional final logit soft-capping (`gemma3.final_logit_softcapping`);
- the output projection is tied to `token_embd` unless the file has `output.weight`.

The converter (conversion/gemma.py) already adds 1 to every norm weight (Gemma's
RMSNorm multiplies by 1 + w), so the file's norms are used as they are.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from rlx_mlir.graph import Value
from rlx_mlir.models.architectures import DecoderBuilder, DecoderGraph
from rlx_mlir.models.errors import ModelError
from rlx_mlir.models.gguf_file import (
    ARCHITECTURE_MODULES,
    ArchitectureModule,
    ModelConfig,
    TensorInfo,
)

GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set prefix = messages[0]['content'] + '\n\n' -%}{%- set turns = messages[1:] -%}"
    "{%- else -%}{%- set prefix = '' -%}{%- set turns = messages -%}{%- endif -%}"
    "{%- for message in turns -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{ '<start_of_turn>' + role + '\n' + (prefix if loop.first else '') "
    "+ message['content'] | trim + '<end_of_turn>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}")
"""Gemma 3's turn format (Google's template: a system message joins the first user turn),
used by `lm.chat` when a gemma3 file has no tokenizer.chat_template (the 270M Q4_K_M has
none, and ChatML is not a format Gemma knows)."""

DEFAULT_SWA_PERIOD = 6
"""llama.cpp's default: every 6th layer is global (load_swa_pattern(ml, 6))."""


def gemma3_config(config: ModelConfig, metadata: dict[str, Any], source: str) -> ModelConfig:
    """`config` with gemma3's sliding-window and soft-capping keys read as llama.cpp reads
    them (what the file leaves out takes llama.cpp's default)."""
    window = int(metadata.get("gemma3.attention.sliding_window", 0))
    if window < 0:
        raise ModelError(f"{source}: gemma3.attention.sliding_window is {window}; expected >= 0")
    swa_layers: tuple[bool, ...] = ()
    if window > 0:
        swa_layers = _swa_layers(metadata.get("gemma3.attention.sliding_window_pattern",
                                              DEFAULT_SWA_PERIOD), config.n_layer, source)
    return dataclasses.replace(
        config, sliding_window=window, swa_layers=swa_layers,
        rope_theta_swa=float(metadata.get("gemma3.rope.freq_base_swa", 10000.0)),
        logit_softcap=float(metadata.get("gemma3.final_logit_softcapping", 0.0)))


def _swa_layers(pattern: Any, n_layer: int, source: str) -> tuple[bool, ...]:
    """Per layer, whether it is local: an array gives it per layer; a period N makes layer i
    local when i % N < N - 1 (N = 0: all local), as llama_hparams::set_swa_pattern."""
    if isinstance(pattern, list | np.ndarray):
        flags = tuple(bool(x) for x in pattern)
        if len(flags) < n_layer:
            raise ModelError(f"{source}: gemma3.attention.sliding_window_pattern has "
                             f"{len(flags)} entries, expected one per layer ({n_layer})")
        return flags[:n_layer]
    period = int(pattern)
    if period < 0:
        raise ModelError(f"{source}: gemma3.attention.sliding_window_pattern is {period}; "
                         f"expected a period >= 0 or a per-layer array")
    return tuple(period == 0 or i % period < period - 1 for i in range(n_layer))


def attention_scale(config: ModelConfig) -> float:
    """The q scale llama.cpp uses (after google/gemma_pytorch's config)."""
    if config.n_layer == 62:  # Gemma 3 27B: query_pre_attn_scalar = n_embd / n_head
        return 1.0 / math.sqrt(config.n_embd // config.n_head)
    return 1.0 / math.sqrt(config.head_dim)


class Gemma3Builder(DecoderBuilder):
    """The gemma3 decoder graph: the llama builder's weights and head, gemma3's layers."""

    def build(self) -> DecoderGraph:
        c, g = self.config, self.g
        # Local layers read their own rope rows (inputs cos_local, sin_local).
        self.local_rope = None
        if any(c.swa_layers):
            self.local_rope = (g.input("cos_local", ("S", self.n_rot // 2)),
                               g.input("sin_local", ("S", self.n_rot // 2)))
        decoder = super().build()
        if self.local_rope is not None:
            decoder.extra_rope["local"] = (c.rope_theta_swa, 1.0)
        return decoder

    def embed(self, tensor: str, ids: Value) -> Value:
        # llama.cpp scales the looked-up rows by sqrtf(n_embd) (an f32 constant)
        rows = super().embed(tensor, ids)
        return self.g.mul(rows, float(np.float32(math.sqrt(self.config.n_embd))))

    def project(self, x: Value, tensor: str) -> Value:
        y = super().project(x, tensor)
        cap = self.config.logit_softcap
        if tensor in ("output.weight", "token_embd.weight") and cap > 0:
            y = self.g.mul(self.g.tanh(self.g.mul(y, 1.0 / cap)), cap)
        return y

    def layer(self, i: int, h: Value, cos: Value, sin: Value) -> Value:
        c, g = self.config, self.g
        blk = f"blk.{i}."
        local = bool(c.swa_layers) and c.swa_layers[i]
        if local:
            cos, sin = self.local_rope
        x = g.rms_norm(h, self.vector(blk + "attn_norm.weight"), eps=c.eps)
        q = self.head_norm(self.project(x, blk + "attn_q.weight"),
                           blk + "attn_q_norm.weight", c.n_head)
        k = self.head_norm(self.project(x, blk + "attn_k.weight"),
                           blk + "attn_k_norm.weight", c.n_head_kv)
        v = self.project(x, blk + "attn_v.weight")
        q = g.rope(q, cos, sin, c.head_dim, self.n_rot, style=c.rope_style)
        k = g.rope(k, cos, sin, c.head_dim, self.n_rot, style=c.rope_style)
        attended = self.cached_attention(i, q, k, v, scale=attention_scale(c),
                                         window=(c.sliding_window if local else 0) or None)
        out = self.project(attended, blk + "attn_output.weight")
        h = g.add(h, g.rms_norm(out, self.vector(blk + "post_attention_norm.weight"), eps=c.eps))
        x = g.rms_norm(h, self.vector(blk + "ffn_norm.weight"), eps=c.eps)
        gate = g.gelu_tanh(self.project(x, blk + "ffn_gate.weight"))
        up = self.project(x, blk + "ffn_up.weight")
        ffn = self.project(g.mul(gate, up), blk + "ffn_down.weight")
        return g.add(h, g.rms_norm(ffn, self.vector(blk + "post_ffw_norm.weight"), eps=c.eps))


def build_gemma3(config: ModelConfig, tensors: Mapping[str, TensorInfo], *, max_seq: int,
                 n_rot: int | None = None, activations: str = "q8",
                 slots: int | None = None) -> DecoderGraph:
    """The `gemma3` decoder graph (the interface of `architectures.build_decoder`)."""
    return Gemma3Builder(config, tensors, max_seq, n_rot or config.head_dim, activations,
                         slots).build()


ARCHITECTURE_MODULES["gemma3"] = ArchitectureModule(build_gemma3, refine=gemma3_config,
                                                    batched=True)

__all__ = ["GEMMA3_CHAT_TEMPLATE", "Gemma3Builder", "attention_scale", "build_gemma3", "gemma3_config"]
