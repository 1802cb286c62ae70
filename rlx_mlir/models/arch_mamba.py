"""`mamba` (Mamba 1) from GGUF: its config, its tensors and its graph.

A file as llama.cpp's converter writes it (`conversion/mamba.py`, `src/models/mamba.cpp`):

```
metadata  mamba.embedding_length d, .block_count, .ssm.conv_kernel K, .ssm.inner_size I,
          .ssm.state_size N, .ssm.time_step_rank R, .attention.layer_norm_rms_epsilon,
          .ssm.dt_b_c_rms (Falcon Mamba's extra norms: refused)
tensors   token_embd.weight [V, d], output_norm.weight [d], output.weight [V, d] (absent when
          tied), and per layer blk.N.: attn_norm.weight [d], ssm_in.weight [2I, d],
          ssm_conv1d.weight [I, K] + .bias [I], ssm_x.weight [R + 2N, I],
          ssm_dt.weight [I, R] + .bias [I], ssm_a [I, N] (already -exp(A_log)),
          ssm_d [I], ssm_out.weight [d, I]
```

The graph (`build_mamba`) has no rope and no KV cache: each layer's conv window
[1, K-1, I] and SSM state [1, I, N] are states (`g.state`, `g.assign`), so one compiled
graph prefills any number of tokens (a symbolic S) and decodes token by token:

```
inputs  ids i32 (S,), rows i32 (R,), temperature, top_k, top_p, seed (as `build_decoder`'s)
state   blk{i}_conv f32 (1, K-1, I), blk{i}_ssm f32 (1, I, N)
output  logits f32 (R, n_vocab), next_ids i32 (R,)
```

Per layer: h + mixer(rms_norm(h)), the mixer being `mamba_mixer` (also what the
hand-built Hugging Face stack of tests/test_parity_sequence.py runs).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rlx_mlir.graph import Graph, Value
from rlx_mlir.models.architectures import TRANSPOSED, DecoderBuilder, DecoderGraph
from rlx_mlir.models.errors import ModelError
from rlx_mlir.models.gguf_file import (
    ARCHITECTURE_MODULES,
    ArchitectureModule,
    ModelConfig,
    TensorInfo,
)

ARCHITECTURE = "mamba"


def mamba_mixer(g: Graph, x: Value, weights: Mapping[str, Value],
                project: Callable[[Value, str], Value], *, d_inner: int, d_state: int,
                dt_rank: int, conv_state: Value | None = None,
                ssm_state: Value | None = None,
                keep: Callable[[str, Value], None] | None = None) -> Value:
    """Mamba's mixer on x [B, S, d] (already normed) -> [B, S, d].

    `weights`: conv_w [K, I], conv_b [I], dt_bias [I], A [I, N] (negative: -exp(A_log)),
    D [I]; `project(v, name)` multiplies v by the matrix `name` (in_proj d -> 2I, x_proj
    I -> R+2N, dt_proj R -> I, out_proj I -> d). With `conv_state` [B, K-1, I] and
    `ssm_state` [B, I, N] (graph states), the conv and the scan start from them and the
    call's final window and state are assigned back: the model decodes with state.
    `keep(kind, value)` stores them instead ("conv", then "ssm"; the batched graph writes
    each sequence's into its slot), the states then being the initial values only."""

    def store(kind: str, state: Value, value: Value) -> None:
        if keep is None:
            g.assign(state, value)
        else:
            keep(kind, value)

    xz = project(x, "in_proj")
    xs, z = g.narrow(xz, 2, 0, d_inner), g.narrow(xz, 2, d_inner, d_inner)
    if conv_state is None:
        conv = g.depthwise_conv1d_causal(xs, weights["conv_w"])
    else:
        conv, window = g.depthwise_conv1d_causal(xs, weights["conv_w"], conv_state,
                                                 return_state=True)
        store("conv", conv_state, window)
    xc = g.silu(g.add(conv, weights["conv_b"]))
    dbl = project(xc, "x_proj")
    dt = g.narrow(dbl, 2, 0, dt_rank)
    b, c = g.narrow(dbl, 2, dt_rank, d_state), g.narrow(dbl, 2, dt_rank + d_state, d_state)
    delta = g.softplus(g.add(project(dt, "dt_proj"), weights["dt_bias"]))
    if ssm_state is None:
        y = g.selective_scan(xc, delta, weights["A"], b, c)
    else:
        y, final = g.selective_scan(xc, delta, weights["A"], b, c, initial_state=ssm_state,
                                    return_state=True)
        store("ssm", ssm_state, final)
    y = g.mul(g.add(y, g.mul(xc, weights["D"])), g.silu(z))
    return project(y, "out_proj")


# --- the file: config and tensors ---------------------------------------------------------


def mamba_config(metadata: Mapping[str, Any], source: str) -> ModelConfig:
    """The ModelConfig of a `mamba` file (no attention: n_head, head_dim, n_ff are 0, rope
    style "none"); ModelError naming a missing or unsupported key."""
    arch = ARCHITECTURE

    def key(name: str, default: Any = None) -> Any:
        value = metadata.get(f"{arch}.{name}", default)
        if value is None:
            raise ModelError(f"{source}: missing metadata {arch}.{name}")
        return value

    if bool(metadata.get(f"{arch}.ssm.dt_b_c_rms", False)):
        raise ModelError(f"{source}: {arch}.ssm.dt_b_c_rms is true (Falcon Mamba's RMS norms on "
                         f"dt, B and C), which rlx-mlir does not support")
    sizes = {name: int(key(name)) for name in
             ("embedding_length", "block_count", "ssm.conv_kernel", "ssm.inner_size",
              "ssm.state_size", "ssm.time_step_rank")}
    bad = [f"{arch}.{name} = {value}" for name, value in sizes.items() if value <= 0]
    if sizes["ssm.conv_kernel"] < 2:
        bad.append(f"{arch}.ssm.conv_kernel = {sizes['ssm.conv_kernel']} (expected >= 2)")
    if bad:
        raise ModelError(f"{source}: expected positive sizes, got {', '.join(bad)}")
    tokens = metadata.get("tokenizer.ggml.tokens")
    vocab = metadata.get(f"{arch}.vocab_size", len(tokens) if tokens is not None else None)
    if vocab is None:
        raise ModelError(f"{source}: neither {arch}.vocab_size nor tokenizer.ggml.tokens "
                         f"gives the vocabulary size")
    return ModelConfig(
        architecture=arch, n_layer=sizes["block_count"], n_embd=sizes["embedding_length"],
        n_head=0, n_head_kv=0, head_dim=0, n_ff=0, n_vocab=int(vocab), rope_theta=0.0,
        rope_style="none", eps=float(key("attention.layer_norm_rms_epsilon")),
        context_length=int(key("context_length", 0)),
        file_type=int(metadata.get("general.file_type", -1)),
        ssm_conv_kernel=sizes["ssm.conv_kernel"], ssm_inner_size=sizes["ssm.inner_size"],
        ssm_state_size=sizes["ssm.state_size"], ssm_time_step_rank=sizes["ssm.time_step_rank"])


def mamba_tensors(config: ModelConfig, has_output: bool) -> list[tuple[str, tuple[int, ...]]]:
    """(name, row-major shape) of every tensor of a `mamba` model (`expected_tensors`)."""
    c = config
    d, inner, n = c.n_embd, c.ssm_inner_size, c.ssm_state_size
    rank, taps = c.ssm_time_step_rank, c.ssm_conv_kernel
    needed = [("token_embd.weight", (c.n_vocab, d)), ("output_norm.weight", (d,))]
    if has_output:
        needed.append(("output.weight", (c.n_vocab, d)))
    layer = [
        ("attn_norm.weight", (d,)), ("ssm_in.weight", (2 * inner, d)),
        ("ssm_conv1d.weight", (inner, taps)), ("ssm_conv1d.bias", (inner,)),
        ("ssm_x.weight", (rank + 2 * n, inner)), ("ssm_dt.weight", (inner, rank)),
        ("ssm_dt.bias", (inner,)), ("ssm_a", (inner, n)), ("ssm_d", (inner,)),
        ("ssm_out.weight", (d, inner)),
    ]
    for i in range(c.n_layer):
        needed += [(f"blk.{i}.{name}", shape) for name, shape in layer]
    return needed


# --- the graph --------------------------------------------------------------------------------


def build_mamba(config: ModelConfig, tensors: Mapping[str, TensorInfo], *, max_seq: int,
                n_rot: int | None = None, activations: str = "q8",
                slots: int | None = None) -> DecoderGraph:
    """The graph of a `mamba` model (see the module docstring); `max_seq` bounds the tokens
    of one call and of a sequence, as for the transformer decoders (no rope: `n_rot` is
    not used). `slots`: the batched graph (`_MambaBuilder.build_batched`)."""
    return _MambaBuilder(config, tensors, max_seq, 0, activations, slots).build()


class _MambaBuilder(DecoderBuilder):
    """`DecoderBuilder` (weights, projections, the head) with Mamba layers and no rope."""

    PROJECTIONS = {"in_proj": "ssm_in.weight", "x_proj": "ssm_x.weight",
                   "dt_proj": "ssm_dt.weight", "out_proj": "ssm_out.weight"}

    def build(self) -> DecoderGraph:
        g = self.g
        if self.slots is not None:
            return self.build_batched()
        ids = g.input("ids", ("S",), "i32")
        rows = g.input("rows", ("R",), "i32")
        h = self.run_layers(ids, self.mamba_layer)
        self.head(h, rows)
        return DecoderGraph(self.g, self.config, 0, self.max_seq, self.weights, kv_cache=False)

    def build_batched(self) -> DecoderGraph:
        """B sequences of S tokens each (a rectangle: the scan runs along S), each in its
        slot of the per-sequence states `[slots, 1, size]` (conv window, scan state):

        inputs  ids i32 (B, S); row_slots i32 (B,): each sequence's slot; row_keep f32 (B,):
                1 continues the slot's state, 0 starts from zeros (a new sequence);
                row_positions i32 (B,): zeros (the states' one row); last_token i32 (1,): S - 1;
                rows i32 (R,): which sequences' logits; sampling per row as the
                transformers' batched graph (`architectures` module docstring).

        Each layer gathers its sequences' states, runs the mixer on [B, S, d], and writes
        the final states back into their slots (`cache_append(..., slots=)`)."""
        ids, last, rows = self.rectangle_inputs()
        h = self.run_layers(ids, self.mamba_layer)
        self.head(self.last_hidden(h, last), rows)
        return DecoderGraph(self.g, self.config, 0, self.max_seq, self.weights,
                            kv_cache=False, slots=self.slots, ragged=False)

    def mamba_layer(self, i: int, h: Value) -> Value:
        c, g = self.config, self.g
        blk = f"blk.{i}."
        inner, n, taps = c.ssm_inner_size, c.ssm_state_size, c.ssm_conv_kernel
        x = g.rms_norm(h, self.vector(blk + "attn_norm.weight"), eps=c.eps)
        if self.slots is not None:  # [B, S, d] already
            conv_state, store_conv = self.slot_state(f"blk{i}_conv", (taps - 1, inner))
            ssm_state, store_ssm = self.slot_state(f"blk{i}_ssm", (inner, n))
            stores = {"conv": store_conv, "ssm": store_ssm}
            mixed = self.mixer(blk, x, conv_state, ssm_state,
                               lambda kind, value: stores[kind](value))
            return g.add(h, mixed)
        x = g.reshape(x, (1, "S", c.n_embd))
        mixed = self.mixer(blk, x, g.state(f"blk{i}_conv", (1, taps - 1, inner)),
                           g.state(f"blk{i}_ssm", (1, inner, n)))
        return g.add(h, g.reshape(mixed, ("S", c.n_embd)))

    def mixer(self, blk: str, x: Value, conv_state: Value, ssm_state: Value,
              keep: Callable[[str, Value], None] | None = None) -> Value:
        """`mamba_mixer` of layer `blk` on x [B, S, d] from the given states."""
        c = self.config
        weights = {
            "conv_w": self.param(blk + "ssm_conv1d.weight", TRANSPOSED),  # [K, I]
            "conv_b": self.vector(blk + "ssm_conv1d.bias"),
            "dt_bias": self.vector(blk + "ssm_dt.bias"),
            "A": self.vector(blk + "ssm_a"), "D": self.vector(blk + "ssm_d"),
        }
        return mamba_mixer(
            self.g, x, weights, lambda v, name: self.project(v, blk + self.PROJECTIONS[name]),
            d_inner=c.ssm_inner_size, d_state=c.ssm_state_size,
            dt_rank=c.ssm_time_step_rank, conv_state=conv_state, ssm_state=ssm_state,
            keep=keep)


ARCHITECTURE_MODULES[ARCHITECTURE] = ArchitectureModule(build_mamba, config=mamba_config,
                                                         tensors=mamba_tensors, batched=True)

__all__ = ["build_mamba", "mamba_config", "mamba_mixer", "mamba_tensors"]
