"""The graph of a GGUF decoder-only transformer (`llama`, `qwen2`, `qwen3`).

`build_decoder(config, tensors, max_seq=...)` returns a `DecoderGraph`: one `Graph` with
every layer, and how each of its params is read from the file. The graph is

```
inputs  ids  i32 (S,)            the new tokens, at positions P .. P+S-1
        cos, sin f32 (S, n_rot/2) rope rows for those positions (computed by the caller)
        rows i32 (R,)            which of the S hidden rows become logits
        temperature f32, top_k i32, top_p f32, seed i64 (rank 0): how `next_ids` is drawn
state   blk{i}_k_cache, blk{i}_v_cache f32 (max_seq, n_head_kv * head_dim)
output  logits f32 (R, n_vocab)
        next_ids i32 (R,)        `g.sample` of the logits (Philox keyed by seed and position)
```

With `slots=N` (batched decoding, `load_gguf(..., slots=N)`) the graph advances several
sequences in one call: a ragged batch of S rows, each naming its sequence's slot and its
position (decode rows of several sequences and prefill chunks of others together):

```
inputs  ids i32 (S,), cos, sin f32 (S, n_rot/2)    one row per token, rope rows of its position
        row_slots, row_positions i32 (S,)         the slot and position of each token
        rows i32 (R,)                             which rows become logits
        temperature f32, top_k i32, top_p f32, seed i64, sample_positions i64 (R,): per row
state   blk{i}_k_cache, blk{i}_v_cache f32 (N, max_seq, n_head_kv * head_dim)
```

Each token's k and v go to its slot's cache at its position (`cache_append(...,
slots=, positions=)`), and its query attends its own slot's rows up to its position
(`slot_attention`); the matmuls see every row at once (a batched decode step is a small
GEMM). Row r of `next_ids` is drawn as a one-row call at position `sample_positions[r]`
would draw it, so a seeded sequence draws the same tokens batched or alone.

and per layer: rms_norm → q/k/v projections (+ biases for qwen2; per-head q/k RMS norm
for qwen3) → rope in the file's style (adjacent pairs for `llama`, whose converter permuted
the q/k weights for it; halves for qwen2/qwen3) → `cache_append` of k and v → causal
grouped-query attention over the T = P+S cached rows → output projection, residual →
rms_norm → SwiGLU FFN, residual. Then the rows asked for, the output norm and the output
projection (`token_embd` when the file has no `output.weight`: tied embeddings).

`rows` lets one graph serve both uses: prefill and decode steps ask for the last row only
(R = 1, so the vocabulary-sized projection runs once), `logits(ids)` for all of them.

Weights stay in the file's quantization: a quantized (or F16/BF16) matrix is a `ui8` param
holding the raw GGUF rows, multiplied by `dequant_matmul`; the token embedding is looked up
with a dequantizing embedding that reads only the rows of the ids. F32 matrices are f32
params (transposed to [in, out]) used with `matmul`; 1-D tensors (norms, biases) are f32.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from rlx_mlir.core.quants import QUANT_TYPES, VEC_DOT_TYPES
from rlx_mlir.core.shape_inference import QUANT_BLOCKS
from rlx_mlir.graph import Graph, Value
from rlx_mlir.models.errors import BatchingUnsupported, ModelError
from rlx_mlir.models.gguf_file import ARCHITECTURE_MODULES, GGUFFile, ModelConfig, TensorInfo

MATRIX_SCHEMES = frozenset(name.upper() for name in QUANT_BLOCKS)
"""ggml types a weight matrix may have besides F32 (those `dequant_matmul` reads)."""

# How a file tensor becomes a param (see DecoderGraph.params).
RAW = "raw"
"""The GGUF bytes as they are, ui8 [rows, row_bytes] (a view of the memory-mapped file)."""
VALUES = "values"
"""f32 values in the tensor's own shape (a view for F32, dequantized for a small 1-D tensor)."""
TRANSPOSED = "transposed"
"""An F32 matrix [out, in] as f32 [in, out], for `matmul`."""


@dataclass(frozen=True)
class WeightBinding:
    """Which file tensor a graph param holds, and in what form (RAW, VALUES, TRANSPOSED)."""

    tensor: str
    form: str


@dataclass
class DecoderGraph:
    """A decoder's graph, and how to bind its params from the GGUF file."""

    graph: Graph
    config: ModelConfig
    n_rot: int
    max_seq: int
    weights: dict[str, WeightBinding]
    """Graph param name -> the file tensor it holds."""
    kv_cache: bool = True
    """Whether the graph keeps KV caches (the runner's position counts the tokens); a
    recurrent model (`mamba`) has only assigned states, and its caller counts them."""
    mtp: DecoderGraph | None = None
    """A second graph run beside the decoder: a qwen35 file's MTP head (arch_qwen35)."""
    extra_rope: dict[str, tuple[float, float]] = field(default_factory=dict)
    """More rope tables the graph reads: inputs `cos_{name}`, `sin_{name}` [S, n_rot/2] of
    base theta and position scale (name -> (theta, scale)); gemma3's local layers."""
    slots: int | None = None
    """Sequences the graph decodes together (slot KV caches, per-row positions and
    sampling; see the module docstring); None: one sequence at the model's position."""
    ragged: bool = True
    """With slots: a call is a ragged batch of token rows (the transformers); False: a
    rectangle of B sequences × S tokens (the recurrent models, whose scans run along S)."""

    def params(self, file: GGUFFile) -> dict[str, np.ndarray]:
        """The param arrays, read from `file`: views of the mapped file where the form
        allows (RAW, and VALUES of F32 tensors), never an f32 copy of a quantized matrix."""
        arrays = {}
        for name, binding in self.weights.items():
            if binding.form == RAW:
                arrays[name] = file.raw(binding.tensor)
            elif binding.form == TRANSPOSED:
                arrays[name] = np.ascontiguousarray(file.array(binding.tensor).T)
            else:
                arrays[name] = file.array(binding.tensor)
        return arrays


def check_tensor_types(config: ModelConfig, tensors: Mapping[str, TensorInfo],
                       source: str) -> None:
    """ModelError naming the first tensor whose type the graph cannot use: a matrix must be
    F32 or a `dequant_matmul` scheme; 1-D tensors may be any type the reader dequantizes."""
    for name, info in tensors.items():
        if len(info.shape) == 2 and info.type_name != "F32" \
                and info.type_name not in MATRIX_SCHEMES:
            raise ModelError(
                f"{source}: tensor {name!r} has type {info.type_name}, which rlx-mlir cannot "
                f"multiply yet; supported matrix types: F32, "
                f"{', '.join(sorted(MATRIX_SCHEMES))}")
        if info.type_name not in QUANT_TYPES:
            raise ModelError(f"{source}: tensor {name!r} has unsupported type {info.type_name}")


def build_decoder(config: ModelConfig, tensors: Mapping[str, TensorInfo], *, max_seq: int,
                  n_rot: int | None = None, activations: str = "q8",
                  slots: int | None = None) -> DecoderGraph:
    """The graph of the model described by `config` with the file's `tensors` (their types
    choose the kernels); KV caches of `max_seq` rows. The tensors are assumed present with
    the right shapes (`GGUFFile.check_model`). `activations` is the form of every
    block-quantized `dequant_matmul`: "q8" (llama.cpp's) or "f32". `slots`: the batched
    graph of that many sequences (module docstring); `BatchingUnsupported` for an
    architecture module that declares none."""
    module = ARCHITECTURE_MODULES.get(config.architecture)
    if module is not None:  # an architecture of its own module (arch_<name>.py)
        if slots is None:
            return module.build(config, tensors, max_seq=max_seq, n_rot=n_rot,
                                activations=activations)
        if not module.batched:
            raise BatchingUnsupported(
                f"batched decoding (slots > 1) is not implemented for {config.architecture} "
                f"models yet; load it with slots=1")
        return module.build(config, tensors, max_seq=max_seq, n_rot=n_rot,
                            activations=activations, slots=slots)
    return DecoderBuilder(config, tensors, max_seq, n_rot or config.head_dim,
                          activations, slots).build()


class DecoderBuilder:
    """Builds the decoder graph layer by layer, recording each param's file tensor."""

    def __init__(self, config: ModelConfig, tensors: Mapping[str, TensorInfo], max_seq: int,
                 n_rot: int, activations: str = "q8", slots: int | None = None):
        self.config = config
        self.slots = slots
        self.activations = activations
        self.tensors = tensors
        self.max_seq = max_seq
        self.n_rot = n_rot
        self.g = Graph(f"{config.architecture}_decoder")
        self.weights: dict[str, WeightBinding] = {}
        self._values: dict[tuple[str, str], Value] = {}

    def build(self) -> DecoderGraph:
        c, g = self.config, self.g
        ids = g.input("ids", ("S",), "i32")
        cos = g.input("cos", ("S", self.n_rot // 2))
        sin = g.input("sin", ("S", self.n_rot // 2))
        if self.slots is not None:  # each row names its sequence's slot and position
            self.row_slots = g.input("row_slots", ("S",), "i32")
            self.row_positions = g.input("row_positions", ("S",), "i32")
        rows = g.input("rows", ("R",), "i32")
        h = self.run_layers(ids, lambda i, h: self.layer(i, h, cos, sin))
        self.head(h, rows)
        return DecoderGraph(g, c, self.n_rot, self.max_seq, self.weights, slots=self.slots)

    def run_layers(self, ids: Value, layer: Callable[[int, Value], Value]) -> Value:
        """The hidden states after the token embedding of `ids` and every layer
        (`layer(i, h)`), each in its scope (scopes name the kernels' origins:
        `lm.profile` groups by them)."""
        with self.g.scope("embed"):
            h = self.embed("token_embd.weight", ids)
        for i in range(self.config.n_layer):
            with self.g.scope(f"layer{i}"):
                h = layer(i, h)
        return h

    def rectangle_inputs(self) -> tuple[Value, Value, Value]:
        """The inputs of a rectangle's batched graph (B sequences × S tokens: arch_mamba,
        arch_qwen35): ids [B, S]; each sequence's `row_slots`, `row_keep` and
        `row_positions` [B] (`slot_state`); `last_token` (1,), S - 1; `rows` (R,), which
        sequences' logits. Returns (ids, last_token, rows)."""
        g = self.g
        ids = g.input("ids", ("B", "S"), "i32")
        self.row_slots = g.input("row_slots", ("B",), "i32")
        self.row_keep = g.input("row_keep", ("B",), "f32")
        self.row_positions = g.input("row_positions", ("B",), "i32")
        return ids, g.input("last_token", (1,), "i32"), g.input("rows", ("R",), "i32")

    def last_hidden(self, h: Value, last: Value) -> Value:
        """Each sequence's hidden state at `last` of a rectangle's h [B, S, d]: [B, d]."""
        return self.g.reshape(self.g.gather(h, last, axis=1), ("B", self.config.n_embd))

    def head(self, h: Value, rows: Value) -> None:
        """The graph's outputs: the logits of the hidden `rows` (output norm and projection)
        and the next ids drawn from them."""
        c, g = self.config, self.g
        with g.scope("head"):
            out = g.gather(h, rows, axis=0)
            out = g.rms_norm(out, self.vector("output_norm.weight"), eps=c.eps)
            head = "output.weight" if "output.weight" in self.tensors else "token_embd.weight"
            logits = self.project(out, head)
            # the next token of every row, drawn in the graph: decoding reads one id per step
            per_row = () if self.slots is None else ("R",)  # batched: one setting per row
            params = {name: g.input(name, per_row, dtype) for name, dtype in (
                ("temperature", "f32"), ("top_k", "i32"), ("top_p", "f32"), ("seed", "i64"))}
            if self.slots is not None:
                params["positions"] = g.input("sample_positions", ("R",), "i64")
            sampled = g.sample(logits, **params)
        g.output(logits=logits, next_ids=sampled)

    # --- one decoder layer ----------------------------------------------------------------

    def layer(self, i: int, h: Value, cos: Value, sin: Value) -> Value:
        c, g = self.config, self.g
        blk = f"blk.{i}."
        x = g.rms_norm(h, self.vector(blk + "attn_norm.weight"), eps=c.eps)
        q = self.projection(x, blk + "attn_q")
        k = self.projection(x, blk + "attn_k")
        v = self.projection(x, blk + "attn_v")
        if c.architecture == "qwen3":
            q = self.head_norm(q, blk + "attn_q_norm.weight", c.n_head)
            k = self.head_norm(k, blk + "attn_k_norm.weight", c.n_head_kv)
        style = c.rope_style
        q = g.rope(q, cos, sin, c.head_dim, self.n_rot, style=style)
        k = g.rope(k, cos, sin, c.head_dim, self.n_rot, style=style)
        attended = self.cached_attention(i, q, k, v)
        h = g.add(h, self.project(attended, blk + "attn_output.weight"))
        x = g.rms_norm(h, self.vector(blk + "ffn_norm.weight"), eps=c.eps)
        gate = g.silu(self.project(x, blk + "ffn_gate.weight"))
        up = self.project(x, blk + "ffn_up.weight")
        return g.add(h, self.project(g.mul(gate, up), blk + "ffn_down.weight"))

    def cached_attention(self, i: int, q: Value, k: Value, v: Value,
                         scale: float | None = None, window: int | None = None) -> Value:
        """k and v appended to layer i's KV caches, then causal grouped-query attention of
        q over them (within the last `window` keys of each query when given): at the
        model's position, or with slots at each row's own slot and position."""
        c, g = self.config, self.g
        heads = dict(num_heads=c.n_head, head_dim=c.head_dim, num_kv_heads=c.n_head_kv,
                     scale=scale, window=window)
        kv_width = c.n_head_kv * c.head_dim
        if self.slots is None:
            kv_shape = (self.max_seq, kv_width)
            keys = g.cache_append(g.state(f"blk{i}_k_cache", kv_shape), k)
            values = g.cache_append(g.state(f"blk{i}_v_cache", kv_shape), v)
            return g.attention(q, keys, values, mask_kind="causal", **heads)
        kv_shape = (self.slots, self.max_seq, kv_width)
        where = dict(slots=self.row_slots, positions=self.row_positions)
        keys = g.cache_append(g.state(f"blk{i}_k_cache", kv_shape), k, **where)
        values = g.cache_append(g.state(f"blk{i}_v_cache", kv_shape), v, **where)
        return g.slot_attention(q, keys, values, self.row_slots, self.row_positions, **heads)

    def slot_state(self, name: str, shape: tuple[int, ...]) -> tuple[Value, Callable]:
        """(the sequences' initial values [B, *shape], a function storing their final
        values) of the per-slot state `name` [slots, 1, prod(shape)], in a rectangle's
        batched graph (inputs `row_slots`, `row_keep` and `row_positions` [B], the latter
        zeros: the state's one row): a sequence with keep 0 starts from zeros."""
        g, width = self.g, math.prod(shape)
        state = g.state(name, (self.slots, 1, width))
        rows = g.gather(g.reshape(state, (self.slots, width)), self.row_slots, axis=0)
        rows = g.mul(rows, g.reshape(self.row_keep, ("B", 1)))

        def store(value: Value) -> None:
            g.cache_append(state, g.reshape(value, ("B", width)), slots=self.row_slots,
                           positions=self.row_positions)

        return g.reshape(rows, ("B", *shape)), store

    def projection(self, x: Value, prefix: str) -> Value:
        """x @ W^T of `prefix.weight`, plus `prefix.bias` when the file has one (qwen2)."""
        y = self.project(x, prefix + ".weight")
        if prefix + ".bias" in self.tensors:
            y = self.g.add(y, self.vector(prefix + ".bias"))
        return y

    def head_norm(self, x: Value, tensor: str, n_heads: int) -> Value:
        """RMS norm of each head of x (S, n_heads * head_dim) with one gamma [head_dim]."""
        g, d = self.g, self.config.head_dim
        per_head = g.reshape(x, ("S", n_heads, d))
        normed = g.rms_norm(per_head, self.vector(tensor), eps=self.config.eps)
        return g.reshape(normed, ("S", n_heads * d))

    # --- weights ---------------------------------------------------------------------------

    def project(self, x: Value, tensor: str) -> Value:
        """x @ W^T for the file's matrix W [out, in], in the file's own type."""
        info = self.tensors[tensor]
        if info.type_name == "F32":
            return self.g.matmul(x, self.param(tensor, TRANSPOSED))
        scheme = info.type_name.lower()
        # llama.cpp quantizes the activations of block-quantized matrices (f16/bf16: f32)
        form = self.activations if scheme in VEC_DOT_TYPES else "f32"
        return self.g.dequant_matmul(x, self.param(tensor, RAW), scheme, activations=form)

    def embed(self, tensor: str, ids: Value) -> Value:
        """Rows `ids` of the table [n_vocab, n_embd], dequantizing only those rows."""
        info = self.tensors[tensor]
        if info.type_name == "F32":
            return self.g.embedding(self.param(tensor, VALUES), ids)
        return self.g.embedding(self.param(tensor, RAW), ids, scheme=info.type_name.lower())

    def vector(self, tensor: str) -> Value:
        return self.param(tensor, VALUES)

    def param(self, tensor: str, form: str) -> Value:
        """The graph param holding `tensor` in `form` (one param per tensor and form: the tied
        output projection reuses the embedding table's)."""
        key = (tensor, form)
        if key not in self._values:
            info = self.tensors[tensor]
            name = tensor.replace(".", "_")
            if form == RAW:
                self._values[key] = self.g.param(name, (*info.shape[:-1], info.row_bytes), "ui8")
            elif form == TRANSPOSED:
                name += "_t"
                self._values[key] = self.g.param(name, tuple(reversed(info.shape)))
            else:
                self._values[key] = self.g.param(name, info.shape)
            self.weights[name] = WeightBinding(tensor, form)
        return self._values[key]


__all__ = ["DecoderBuilder", "DecoderGraph", "WeightBinding", "build_decoder", "check_tensor_types"]
