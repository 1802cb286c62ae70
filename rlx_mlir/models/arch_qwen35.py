"""`qwen35` (Qwen3.5) from GGUF, as llama.cpp's converter writes it (`conversion/qwen.py`,
`Qwen3_5TextModel`; the graph of `src/models/qwen35.cpp`).

Layers are of two kinds (`qwen35.attention.recurrent_layers`, else every
`full_attention_interval`-th layer is full attention):

- gated delta net (linear attention): `attn_qkv` → causal depthwise conv (`ssm_conv1d`,
  its last K−1 inputs kept as the state `blk{i}_conv` [1, K−1, C]) → SiLU → q, k, v;
  q and k l2-normalized (q also scaled by 1/√n) and repeated to the value heads in the
  converter's tiled order (value head j reads key head j mod n_k); β = sigmoid(`ssm_beta`
  x), g = softplus(`ssm_alpha` x + `ssm_dt.bias`) · `ssm_a` (the file holds −exp(A_log));
  `gated_delta_net` from the state `blk{i}_ssm` [1, H_v, n, n]; the gated RMS norm
  rms_norm(o, `ssm_norm`) · silu(`attn_gate` x); `ssm_out`.
- gated full attention: `attn_q` gives per head [q | gate]; per-head RMS norm of q and
  k; rope (NEOX halves) on the first `rope.dimension_count` dims of each head (the file's
  interleaved M-RoPE sections all read the same position for text, so this is exactly
  it); KV caches through `cache_append`; causal GQA; · sigmoid(gate); `attn_output`.

Both are followed by the residual, `post_attention_norm`, a SwiGLU FFN and the residual.
The converter stores every RMS norm gamma as used (it adds HF's `1 +`), except
`ssm_norm`, which HF uses as is. One graph serves prefill (any S) and decoding (S = 1):
the conv windows, delta-rule states and KV caches are model states.

MTP: the file's block_count counts the `nextn_predict_layers` MTP layers after the main
ones (`config.n_layer` the main ones only). With an MTP layer the decoder keeps the last
position's hidden state before the output norm in the state `mtp_hidden` (the row
`last` of the call), and a second small graph, `hir.qwen35_mtp_head` on that row and a
token's embedding, gives `lm.mtp_logits(next_id)`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from rlx_mlir.core.errors import ArgumentError
from rlx_mlir.graph import Graph, Value
from rlx_mlir.models.architectures import (
    RAW,
    TRANSPOSED,
    VALUES,
    DecoderBuilder,
    DecoderGraph,
    WeightBinding,
)
from rlx_mlir.models.gguf_file import (
    ARCHITECTURE_MODULES,
    ArchitectureModule,
    GGUFFile,
    ModelConfig,
    TensorInfo,
)
from rlx_mlir.models.qwen35_config import expected_tensors, params_of, refine_config

if TYPE_CHECKING:
    from rlx_mlir.models.model import LanguageModel
    from rlx_mlir.runnable import Runnable

L2_EPS = 1e-6
"""The epsilon of the l2 normalization of q and k (Hugging Face's `l2norm`)."""


def build_decoder(config: ModelConfig, tensors: Mapping[str, TensorInfo], *, max_seq: int,
                  n_rot: int | None = None, activations: str = "q8",
                  slots: int | None = None) -> DecoderGraph:
    """The `qwen35` decoder graph (the interface of `architectures.build_decoder`, plus
    the input `last` and the state `mtp_hidden` when the file has an MTP layer), with its
    MTP head graph as `.mtp`. `n_rot` defaults to the file's `rope.dimension_count`.
    `slots`: the batched graph (`_Qwen35Builder.build_batched`)."""
    n_rot = n_rot or params_of(config).n_rot or config.head_dim
    decoder = _Qwen35Builder(config, tensors, max_seq, n_rot, activations, slots).build()
    if config.n_mtp:
        decoder.mtp = _MtpBuilder(config, tensors, n_rot, max_seq, activations).build()
    return decoder


def l2_normalize(g: Graph, x: Value, eps: float = L2_EPS) -> Value:
    """x / sqrt(sum(x², last axis) + eps), Hugging Face's `l2norm` of Qwen3.5."""
    return x * g.rsqrt(g.reduce_sum(x * x, -1, keepdim=True) + eps)


class _Qwen35Builder(DecoderBuilder):
    """The decoder: gated-delta-net and gated-attention layers (module docstring)."""

    lead: tuple[str, ...] = ("S",)
    """The leading dims of the token rows: [S] for one sequence, [B, S] batched."""

    def build(self) -> DecoderGraph:
        c, g = self.config, self.g
        if self.slots is not None:
            return self.build_batched()
        ids = g.input("ids", ("S",), "i32")
        cos = g.input("cos", ("S", self.n_rot // 2))
        sin = g.input("sin", ("S", self.n_rot // 2))
        rows = g.input("rows", ("R",), "i32")
        h = self.run_layers(ids, lambda i, h: self.layer(i, h, cos, sin))
        with g.scope("head"):
            if c.n_mtp:  # the MTP head reads the last position's hidden state (pre-norm)
                last = g.gather(h, g.input("last", (1,), "i32"), axis=0)
                g.assign(g.state("mtp_hidden", (1, c.n_embd)), last)
            out = g.rms_norm(g.gather(h, rows, axis=0), self.vector("output_norm.weight"),
                             eps=c.eps)
            head = "output.weight" if "output.weight" in self.tensors else "token_embd.weight"
            logits = self.project(out, head)
            sampled = g.sample(logits, temperature=g.input("temperature", (), "f32"),
                               top_k=g.input("top_k", (), "i32"), top_p=g.input("top_p", (), "f32"),
                               seed=g.input("seed", (), "i64"))
        g.output(logits=logits, next_ids=sampled)
        return DecoderGraph(g, c, self.n_rot, self.max_seq, self.weights)

    def build_batched(self) -> DecoderGraph:
        """B sequences of S tokens each, a rectangle as Mamba's (`arch_mamba`): the conv
        windows and delta-rule states are per-slot states (`slot_state`; `row_slots`,
        `row_keep`, `row_positions` [B] as there), and the attention layers' KV caches
        slot caches [slots, max_seq, ·] written and read at each token's slot and
        position (`token_slots`, `token_positions` [B, S]: a sequence's S tokens at
        consecutive positions from its own start); cos, sin [B, S, n_rot/2] are those
        positions' rope rows. `last_token` (1,) is S - 1; `rows` (R,) which sequences'
        logits; sampling per row (`sample_positions`: each draw counted as the
        one-sequence graph counts it). With an MTP layer each sequence's last hidden
        state goes to its slot of `mtp_hidden` [slots, 1, d] (`mtp_logits` reads slot 0)."""
        c, g = self.config, self.g
        self.lead = ("B", "S")
        ids, last, rows = self.rectangle_inputs()
        self.token_slots = g.input("token_slots", self.lead, "i32")
        self.token_positions = g.input("token_positions", self.lead, "i32")
        cos = g.input("cos", (*self.lead, self.n_rot // 2))
        sin = g.input("sin", (*self.lead, self.n_rot // 2))
        h = self.run_layers(ids, lambda i, h: self.layer(i, h, cos, sin))
        final = self.last_hidden(h, last)
        if c.n_mtp:  # each sequence's last hidden state (pre-norm), for the MTP head
            with g.scope("head"):
                self.slot_state("mtp_hidden", (c.n_embd,))[1](final)
        self.head(final, rows)
        return DecoderGraph(g, c, self.n_rot, self.max_seq, self.weights, slots=self.slots,
                            ragged=False)

    def layer(self, i: int, h: Value, cos: Value, sin: Value) -> Value:
        c, g = self.config, self.g
        blk = f"blk.{i}."
        x = g.rms_norm(h, self.vector(blk + "attn_norm.weight"), eps=c.eps)
        if params_of(c).recurrent[i]:
            h = h + self.delta_net(i, x)
        else:
            h = h + self.gated_attention(i, x, cos, sin)
        x = g.rms_norm(h, self.vector(blk + "post_attention_norm.weight"), eps=c.eps)
        gate = g.silu(self.project(x, blk + "ffn_gate.weight"))
        up = self.project(x, blk + "ffn_up.weight")
        return h + self.project(g.mul(gate, up), blk + "ffn_down.weight")

    def delta_net(self, i: int, x: Value) -> Value:
        """The gated-delta-net mixer of layer i on x (S, d) -> (S, d)."""
        g, p, blk = self.g, params_of(self.config), f"blk.{i}."
        n, nk, nv = p.head_k_dim, p.n_k_heads, p.n_v_heads
        seq = self.lead if self.slots is not None else (1, "S")  # the ops' [b, s, ...]
        qkv = g.reshape(self.project(x, blk + "attn_qkv.weight"), (*seq, p.conv_dim))
        window, keep_window = self.recurrent_state(f"blk{i}_conv",
                                                   (p.conv_kernel - 1, p.conv_dim))
        mixed, new_window = g.depthwise_conv1d_causal(qkv, self.conv_weight(blk), window,
                                                      return_state=True)
        keep_window(new_window)
        mixed = g.silu(mixed)
        q = g.reshape(g.narrow(mixed, 2, 0, p.key_dim), (*seq, nk, n))
        k = g.reshape(g.narrow(mixed, 2, p.key_dim, p.key_dim), (*seq, nk, n))
        v = g.reshape(g.narrow(mixed, 2, 2 * p.key_dim, p.value_dim), (*seq, nv, n))
        q = l2_normalize(g, q) * float(n ** -0.5)
        k = l2_normalize(g, k)
        if nv != nk:  # the converter ordered the value heads so that head j reads key j % nk
            q = g.concat([q] * (nv // nk), axis=2)
            k = g.concat([k] * (nv // nk), axis=2)
        beta = g.sigmoid(self.project(x, blk + "ssm_beta.weight"))
        alpha = self.project(x, blk + "ssm_alpha.weight") + self.vector(blk + "ssm_dt.bias")
        decay = g.softplus(alpha) * self.vector(blk + "ssm_a")
        recurrent, keep_recurrent = self.recurrent_state(f"blk{i}_ssm", (nv, n, n))
        o, final = g.gated_delta_net(q, k, v, g.reshape(decay, (*seq, nv)),
                                     g.reshape(beta, (*seq, nv)), initial_state=recurrent,
                                     return_state=True)
        keep_recurrent(final)
        z = g.reshape(self.project(x, blk + "attn_gate.weight"), (*seq, nv, n))
        o = g.rms_norm(o, self.vector(blk + "ssm_norm.weight"), eps=self.config.eps) * g.silu(z)
        return self.project(g.reshape(o, (*self.lead, p.value_dim)), blk + "ssm_out.weight")

    def recurrent_state(self, name: str, shape: tuple[int, ...]) -> tuple[Value, Callable]:
        """(the state's value at the call's start [b, *shape], a function keeping its value
        at the end): the state `name` [1, *shape], or batched each sequence's slot of it."""
        if self.slots is not None:
            return self.slot_state(name, shape)
        state = self.g.state(name, (1, *shape))
        return state, lambda value: self.g.assign(state, value)

    def conv_weight(self, blk: str) -> Value:
        """`ssm_conv1d.weight` [C, K] as the conv's f32 [K, C]."""
        tensor = blk + "ssm_conv1d.weight"
        key = (tensor, "conv")
        if key not in self._values:
            name = tensor.replace(".", "_") + "_t"
            info = self.tensors[tensor]
            self._values[key] = self.g.param(name, tuple(reversed(info.shape)))
            self.weights[name] = WeightBinding(tensor, "transposed")
        return self._values[key]

    def gated_attention(self, i: int, x: Value, cos: Value, sin: Value) -> Value:
        """The gated full-attention mixer of layer i on x (S, d) -> (S, d)."""
        c, g, blk = self.config, self.g, f"blk.{i}."
        heads, kv_heads, d, lead = c.n_head, c.n_head_kv, c.head_dim, self.lead
        qg = g.reshape(self.project(x, blk + "attn_q.weight"), (*lead, heads, 2 * d))
        q = self.head_rms(g.narrow(qg, -1, 0, d), blk + "attn_q_norm.weight", heads)
        gate = g.reshape(g.narrow(qg, -1, d, d), (*lead, heads * d))
        k = g.reshape(self.project(x, blk + "attn_k.weight"), (*lead, kv_heads, d))
        k = self.head_rms(k, blk + "attn_k_norm.weight", kv_heads)
        v = self.project(x, blk + "attn_v.weight")
        if self.slots is not None:
            return self.project(self.slot_attention(i, q, k, v, cos, sin) * g.sigmoid(gate),
                                blk + "attn_output.weight")
        q = g.rope(q, cos, sin, d, self.n_rot, style="half")
        k = g.rope(k, cos, sin, d, self.n_rot, style="half")
        kv_shape = (self.max_seq, kv_heads * d)
        keys = g.cache_append(g.state(f"blk{i}_k_cache", kv_shape), k)
        values = g.cache_append(g.state(f"blk{i}_v_cache", kv_shape), v)
        attended = g.attention(q, keys, values, num_heads=heads, head_dim=d,
                               num_kv_heads=kv_heads, mask_kind="causal")
        return self.project(attended * g.sigmoid(gate), blk + "attn_output.weight")

    def slot_attention(self, i: int, q: Value, k: Value, v: Value, cos: Value,
                       sin: Value) -> Value:
        """The batched graph's attention of layer i: q, k, v [B, S, ·] roped at each
        token's position, k and v written to the tokens' slots, q attending its slot."""
        c, g = self.config, self.g
        heads, kv_heads, d = c.n_head, c.n_head_kv, c.head_dim
        q = self.rope_rows(q, cos, sin, heads)
        k = self.rope_rows(k, cos, sin, kv_heads)
        kv_shape = (self.slots, self.max_seq, kv_heads * d)
        where = dict(slots=self.token_slots, positions=self.token_positions)
        keys = g.cache_append(g.state(f"blk{i}_k_cache", kv_shape), k, **where)
        values = g.cache_append(g.state(f"blk{i}_v_cache", kv_shape), v, **where)
        return g.slot_attention(q, keys, values, self.token_slots, self.token_positions,
                                num_heads=heads, head_dim=d, num_kv_heads=kv_heads)

    def rope_rows(self, x: Value, cos: Value, sin: Value, n_heads: int) -> Value:
        """`g.rope(..., style="half")` of x [B, S, n_heads·head_dim] with cos, sin
        [B, S, n_rot/2]: each sequence's rows at its own positions (`g.rope` takes one
        table [S, n_rot/2] for every sequence), as elementwise ops on the heads."""
        g, d, half = self.g, self.config.head_dim, self.n_rot // 2
        heads = g.reshape(x, (*self.lead, n_heads, d))
        cos, sin = (g.reshape(t, (*self.lead, 1, half)) for t in (cos, sin))
        x1, x2 = g.narrow(heads, 3, 0, half), g.narrow(heads, 3, half, half)
        parts = [x1 * cos - x2 * sin, x2 * cos + x1 * sin]
        if self.n_rot < d:
            parts.append(g.narrow(heads, 3, self.n_rot, d - self.n_rot))
        return g.reshape(g.concat(parts, axis=3), (*self.lead, n_heads * d))

    def head_rms(self, x: Value, tensor: str, n_heads: int) -> Value:
        """RMS norm of each head of x (*lead, n_heads, head_dim), flattened to (*lead,
        n_heads·head_dim)."""
        g, d = self.g, self.config.head_dim
        return g.reshape(g.rms_norm(x, self.vector(tensor), eps=self.config.eps),
                         (*self.lead, n_heads * d))


# --- the MTP head ----------------------------------------------------------------------

class _MtpBuilder(DecoderBuilder):
    """The graph of `hir.qwen35_mtp_head` over a symbolic S (`mtp_logits` runs S = 1):
    inputs h (1, S, d) (hidden states before the output norm), ids (1, S) (the tokens
    after them), cos/sin (S, n_rot/2), last (1,) (the row whose logits are wanted);
    output logits (1, n_vocab). Its matrices stay in the file's quantization, as the
    decoder's (`DecoderBuilder.project`; its params are made by `DecoderBuilder.param`):
    a quantized or F16/BF16 matrix is a RAW param (a view of the mapped file, never an
    f32 copy) that the op reads by its scheme (`schemes`, with the decoder's
    `activations`), the embedding table too; F32 matrices are f32 params, transposed to
    [in, out] (the table as it is); the norms are f32 vectors."""

    def __init__(self, config: ModelConfig, tensors: Mapping[str, TensorInfo], n_rot: int,
                 max_seq: int, activations: str = "q8"):
        super().__init__(config, tensors, max_seq, n_rot, activations)
        self.g = Graph("qwen35_mtp")
        self.schemes: dict[str, str] = {}
        """The head's operand -> the scheme of the raw rows it is given (its RAW params)."""

    def matrix(self, operand: str, tensor: str) -> Value:
        """The head's matrix `operand` from the file's `tensor` [out, in], in the file's
        type: F32 as f32 (the embedding table as is, others [in, out]), else the raw rows."""
        info = self.tensors[tensor]
        if info.type_name == "F32":
            return self.param(tensor, VALUES if operand == "embed_w" else TRANSPOSED)
        self.schemes[operand] = info.type_name.lower()
        return self.param(tensor, RAW)

    def optional(self, tensor: str, fallback: str) -> str:
        return tensor if tensor in self.tensors else fallback

    def build(self) -> DecoderGraph:
        c, g = self.config, self.g
        blk = f"blk.{c.n_layer}."
        output = "output.weight" if "output.weight" in self.tensors else "token_embd.weight"
        h = g.input("h", (1, "S", c.n_embd))
        ids = g.input("ids", (1, "S"), "i32")
        cos, sin = g.input("cos", ("S", self.n_rot // 2)), g.input("sin", ("S", self.n_rot // 2))
        last = g.input("last", (1,), "i32")
        matrices = {
            "embed_w": self.optional(blk + "nextn.embed_tokens.weight", "token_embd.weight"),
            "eh_w": blk + "nextn.eh_proj.weight", "q_gate_w": blk + "attn_q.weight",
            "k_w": blk + "attn_k.weight", "v_w": blk + "attn_v.weight",
            "o_w": blk + "attn_output.weight", "gate_w": blk + "ffn_gate.weight",
            "up_w": blk + "ffn_up.weight", "down_w": blk + "ffn_down.weight",
            "lm_head_w": self.optional(blk + "nextn.shared_head_head.weight", output),
        }
        weights = {operand: self.matrix(operand, tensor) for operand, tensor in matrices.items()}
        with g.scope("mtp"):
            logits = g.qwen35_mtp_head(
                h, ids, cos, sin, last, **weights,
                hnorm_w=self.vector(blk + "nextn.hnorm.weight"),
                enorm_w=self.vector(blk + "nextn.enorm.weight"),
                attn_norm_w=self.vector(blk + "attn_norm.weight"),
                q_norm_w=self.vector(blk + "attn_q_norm.weight"),
                k_norm_w=self.vector(blk + "attn_k_norm.weight"),
                post_norm_w=self.vector(blk + "post_attention_norm.weight"),
                head_norm_w=self.vector(self.optional(blk + "nextn.shared_head_norm.weight",
                                                      "output_norm.weight")),
                num_heads=c.n_head, num_kv_heads=c.n_head_kv, head_dim=c.head_dim,
                n_rot=self.n_rot, eps=c.eps, schemes=self.schemes, activations=self.activations)
        g.output(logits=logits)
        return DecoderGraph(g, c, self.n_rot, self.max_seq, self.weights)


class MtpHead:
    """The compiled MTP head of a language model (`LanguageModel.mtp_logits`)."""

    def __init__(self, runner: Runnable):
        self.runner = runner

    def logits(self, lm: LanguageModel, next_id: int) -> np.ndarray:
        """The head's logits [n_vocab] for the token after `next_id`, from the hidden state
        of the last position the model ran and `next_id`'s embedding; `next_id` takes the
        position after it (its rope row; one row attends to itself only)."""
        position = lm.position
        if position == 0:
            raise ArgumentError("mtp_logits: the model holds no tokens yet; call prefill first")
        hidden = np.asarray(lm.runner.state["mtp_hidden"], np.float32)  # [slots, 1, d]
        hidden = hidden.reshape(-1, 1, hidden.shape[-1])[:1]  # batched: slot 0's row
        row = min(position, lm.max_seq - 1)
        cos, sin = lm.rope_rows(row, row + 1)
        logits = self.runner(h=hidden, ids=np.array([[next_id]], np.int32), cos=cos, sin=sin,
                             last=np.zeros(1, np.int32))
        return np.asarray(logits[0] if isinstance(logits, tuple) else logits)[0]


def compile_mtp(decoder: DecoderGraph, file: GGUFFile, compile_graph: Any) -> MtpHead | None:
    """The compiled MTP head of `decoder` (None without one): `compile_graph(graph_of,
    params)` is the loader's compiler."""
    if decoder.mtp is None:
        return None
    return MtpHead(compile_graph(decoder.mtp, decoder.mtp.params(file)))



ARCHITECTURE_MODULES["qwen35"] = ArchitectureModule(build_decoder, refine=refine_config,
                                                   tensors=expected_tensors, batched=True)

__all__ = ["MtpHead", "build_decoder", "compile_mtp", "l2_normalize"]
