"""What a `qwen35` GGUF file must hold: its gated-delta-net hyper-parameters
(`Qwen35Params`, `ModelConfig.arch_params`) and its tensors (`expected_tensors`), read by
`gguf_file` before anything is built. The graph is `arch_qwen35`'s."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlx_mlir.models.errors import ModelError

if TYPE_CHECKING:
    from rlx_mlir.models.gguf_file import ModelConfig


@dataclass(frozen=True)
class Qwen35Params:
    """The gated-delta-net hyper-parameters of a `qwen35` file (`qwen35.ssm.*`) and which
    main layers are recurrent."""

    conv_kernel: int
    head_k_dim: int
    """`ssm.state_size`: the key head size n (the delta rule's state is n × n)."""
    n_k_heads: int
    """`ssm.group_count`."""
    n_v_heads: int
    """`ssm.time_step_rank`."""
    head_v_dim: int
    """`ssm.inner_size` / n_v_heads."""
    recurrent: tuple[bool, ...]
    """Per main layer: a gated-delta-net layer (else gated full attention)."""
    n_rot: int = 0
    """`rope.dimension_count`: the rotated dims of each attention head (0: not given)."""

    @property
    def key_dim(self) -> int:
        return self.n_k_heads * self.head_k_dim

    @property
    def value_dim(self) -> int:
        return self.n_v_heads * self.head_v_dim

    @property
    def conv_dim(self) -> int:
        return 2 * self.key_dim + self.value_dim

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any], n_layer: int,
                      source: str) -> Qwen35Params:
        """The params of a `qwen35` file of `n_layer` main layers; ModelError naming the
        missing or inconsistent key."""
        def key(name: str) -> int:
            value = metadata.get(f"qwen35.{name}")
            if value is None:
                raise ModelError(f"{source}: missing metadata qwen35.{name}")
            return int(value)

        n_v, inner, n = key("ssm.time_step_rank"), key("ssm.inner_size"), key("ssm.state_size")
        n_k = key("ssm.group_count")
        if n_v <= 0 or n_k <= 0 or inner % n_v or n_v % n_k:
            raise ModelError(f"{source}: qwen35.ssm.inner_size {inner} must split into "
                             f"ssm.time_step_rank {n_v} value heads, a multiple of "
                             f"ssm.group_count {n_k} key heads")
        if inner // n_v != n:
            raise ModelError(f"{source}: value heads of {inner // n_v} (qwen35.ssm.inner_size "
                             f"/ ssm.time_step_rank) differ from key heads of {n} "
                             f"(ssm.state_size); the gated delta net needs them equal")
        flags = metadata.get("qwen35.attention.recurrent_layers")
        if flags is not None:
            recurrent = tuple(bool(f) for f in list(flags)[:n_layer])
            if len(recurrent) != n_layer:
                raise ModelError(f"{source}: qwen35.attention.recurrent_layers has "
                                 f"{len(list(flags))} entries, expected at least {n_layer}")
        else:
            interval = int(metadata.get("qwen35.full_attention_interval", 4))
            recurrent = tuple((i + 1) % interval != 0 for i in range(n_layer))
        n_rot = int(metadata.get("qwen35.rope.dimension_count", 0))
        return cls(key("ssm.conv_kernel"), n, n_k, n_v, inner // n_v, recurrent, n_rot)


def params_of(config: ModelConfig) -> Qwen35Params:
    """The Qwen35Params of a qwen35 config."""
    params = config.arch_params
    if not isinstance(params, Qwen35Params):
        raise ModelError(f"a qwen35 config needs Qwen35Params, got {params!r}")
    return params


def refine_config(config: ModelConfig, metadata: Mapping[str, Any], source: str) -> ModelConfig:
    """`config` with the qwen35 keys read (`arch_params`); ModelError for what the graph
    cannot run: more than one MTP layer."""
    if config.n_mtp > 1:
        raise ModelError(f"{source}: qwen35.nextn_predict_layers is {config.n_mtp}; rlx-mlir "
                         f"runs one MTP layer (as llama.cpp)")
    params = Qwen35Params.from_metadata(metadata, config.n_layer, source)
    return dataclasses.replace(config, arch_params=params)


def expected_tensors(config: ModelConfig,
                     has_output: bool) -> list[tuple[str, tuple[int, ...]]]:
    """(name, row-major shape) of every tensor a `qwen35` model of `config` needs, the MTP
    layer's included (its optional nextn.embed_tokens / shared_head_* are not listed)."""
    c, p = config, params_of(config)
    d, hd = c.n_embd, c.head_dim
    needed = [("token_embd.weight", (c.n_vocab, d)), ("output_norm.weight", (d,))]
    if has_output:
        needed.append(("output.weight", (c.n_vocab, d)))
    ffn = [("attn_norm.weight", (d,)), ("post_attention_norm.weight", (d,)),
           ("ffn_gate.weight", (c.n_ff, d)), ("ffn_up.weight", (c.n_ff, d)),
           ("ffn_down.weight", (d, c.n_ff))]
    attention = [("attn_q.weight", (2 * c.n_head * hd, d)),
                 ("attn_k.weight", (c.n_head_kv * hd, d)),
                 ("attn_v.weight", (c.n_head_kv * hd, d)),
                 ("attn_output.weight", (d, c.n_head * hd)),
                 ("attn_q_norm.weight", (hd,)), ("attn_k_norm.weight", (hd,))]
    delta_net = [("attn_qkv.weight", (p.conv_dim, d)), ("attn_gate.weight", (p.value_dim, d)),
                 ("ssm_conv1d.weight", (p.conv_dim, p.conv_kernel)),
                 ("ssm_dt.bias", (p.n_v_heads,)), ("ssm_a", (p.n_v_heads,)),
                 ("ssm_beta.weight", (p.n_v_heads, d)), ("ssm_alpha.weight", (p.n_v_heads, d)),
                 ("ssm_norm.weight", (p.head_v_dim,)), ("ssm_out.weight", (d, p.value_dim))]
    nextn = [("nextn.eh_proj.weight", (d, 2 * d)), ("nextn.enorm.weight", (d,)),
             ("nextn.hnorm.weight", (d,))]
    for i in range(c.n_layer + c.n_mtp):
        if i >= c.n_layer:
            layer = ffn + attention + nextn
        else:
            layer = ffn + (delta_net if p.recurrent[i] else attention)
        needed += [(f"blk.{i}.{name}", shape) for name, shape in layer]
    return needed


__all__ = ["Qwen35Params", "expected_tensors", "params_of", "refine_config"]
