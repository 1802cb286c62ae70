"""Reading GGUF files: metadata, tensor infos and memory-mapped tensor data, and `ModelConfig`.

`read_gguf(path)` parses the header with the GGUF constants of the `gguf` package
(`GGUFValueType`, `GGMLQuantizationType`, `GGML_QUANT_SIZES`) and memory-maps the file: a
tensor's data is a read-only numpy view of the mapping, never a copy. The header parser is
our own rather than `gguf.GGUFReader` because the latter builds one numpy view per array
element and takes about 4 s on the 98,000 strings of SmolLM2's vocabulary and merges; this
one reads them in well under 0.1 s and returns the same metadata (tests compare the two).

Every problem with a file -- not a GGUF file, truncated, unsupported version or value type,
unknown architecture, unsupported tensor type, missing or misshapen tensor -- is a
`ModelError` naming the file and the cause, never a crash.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGUF_MAGIC, GGMLQuantizationType, GGUFValueType

from rlx_mlir.core.quants import QUANT_TYPES, dequantize
from rlx_mlir.models.errors import ModelError

DEFAULT_ALIGNMENT = 32
SUPPORTED_TENSOR_TYPES = frozenset(QUANT_TYPES)
"""ggml types whose data rlx-mlir can use (those `rlx_mlir.core.quants` dequantizes)."""

_SCALAR_FORMATS = {
    GGUFValueType.UINT8: "<B", GGUFValueType.INT8: "<b", GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h", GGUFValueType.UINT32: "<I", GGUFValueType.INT32: "<i",
    GGUFValueType.FLOAT32: "<f", GGUFValueType.BOOL: "<?", GGUFValueType.UINT64: "<Q",
    GGUFValueType.INT64: "<q", GGUFValueType.FLOAT64: "<d",
}
_NUMPY_TYPES = {
    GGUFValueType.UINT8: np.uint8, GGUFValueType.INT8: np.int8, GGUFValueType.UINT16: np.uint16,
    GGUFValueType.INT16: np.int16, GGUFValueType.UINT32: np.uint32,
    GGUFValueType.INT32: np.int32, GGUFValueType.FLOAT32: np.float32,
    GGUFValueType.BOOL: np.bool_, GGUFValueType.UINT64: np.uint64,
    GGUFValueType.INT64: np.int64, GGUFValueType.FLOAT64: np.float64,
}


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a GGUF file."""

    name: str
    ggml_type: GGMLQuantizationType
    shape: tuple[int, ...]
    """Row-major, outermost first: a 2-D weight is [out_features, in_features] (GGUF stores
    the dimensions innermost first, ggml's ne[0], ne[1], ...)."""
    offset: int
    """Absolute byte offset of the data in the file."""
    n_bytes: int

    @property
    def type_name(self) -> str:
        """The ggml type name ("Q4_1", "F32", ...)."""
        return self.ggml_type.name

    @property
    def row_bytes(self) -> int:
        """Bytes of one row (the innermost dimension) of the data."""
        block_size, type_size = GGML_QUANT_SIZES[self.ggml_type]
        return self.shape[-1] // block_size * type_size


class GGUFFile:
    """A memory-mapped GGUF file: `metadata`, `tensors` (TensorInfo by name) and their data.

    Use `read_gguf(path)` to open one; `close()` (or a `with` block) unmaps it once no numpy
    view of its data is alive.
    """

    def __init__(self, path: Path, version: int, metadata: dict[str, Any],
                 tensors: dict[str, TensorInfo], mapping: mmap.mmap | None,
                 alignment: int, data_offset: int):
        self.path = path
        self.version = version
        self.metadata = metadata
        self.tensors = tensors
        self.alignment = alignment
        self.data_offset = data_offset
        self._mapping = mapping

    def __enter__(self) -> GGUFFile:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        arch = self.metadata.get("general.architecture", "?")
        return f"GGUFFile({str(self.path)!r}, architecture={arch!r}, tensors={len(self.tensors)})"

    def close(self) -> None:
        """Unmap the file; views of tensor data still alive keep the mapping until they die,
        but its pages leave this process's memory (they come back from the page cache
        when a view reads them): a compiled model binds copies of most weights
        (interleaved for the int8 kernels), and the pages they were copied from would
        otherwise stay resident beside them."""
        if self._mapping is not None:
            try:
                self._mapping.close()
            except BufferError:  # numpy views still export the buffer: leave it to them
                if hasattr(self._mapping, "madvise"):
                    self._mapping.madvise(mmap.MADV_DONTNEED)
            self._mapping = None

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    @property
    def config(self) -> ModelConfig:
        """The model hyper-parameters from the metadata (ModelError if not a supported model)."""
        return ModelConfig.from_metadata(self.metadata, source=str(self.path))

    def tensor(self, name: str) -> TensorInfo:
        """The TensorInfo of `name` (ModelError naming the file if it has no such tensor)."""
        info = self.tensors.get(name)
        if info is None:
            raise ModelError(f"{self.path}: no tensor named {name!r}")
        return info

    def raw(self, name: str) -> np.ndarray:
        """The tensor's bytes as a read-only uint8 view of the file, shape [*outer, row_bytes]."""
        info = self.tensor(name)
        if self._mapping is None:
            raise ModelError(f"{self.path} is closed")
        data = np.frombuffer(self._mapping, dtype=np.uint8, count=info.n_bytes,
                             offset=info.offset)
        return data.reshape(*info.shape[:-1], info.row_bytes)

    def array(self, name: str) -> np.ndarray:
        """The tensor's values as float32 [*shape]: a view for F32, dequantized otherwise."""
        info = self.tensor(name)
        if info.type_name not in SUPPORTED_TENSOR_TYPES:
            raise ModelError(f"{self.path}: tensor {name!r} has unsupported type "
                             f"{info.type_name}; supported: {', '.join(sorted(SUPPORTED_TENSOR_TYPES))}")
        raw = self.raw(name)
        if info.ggml_type == GGMLQuantizationType.F32:
            return raw.view(np.float32)
        return dequantize(raw, info.type_name)

    def check_model(self) -> ModelConfig:
        """The ModelConfig, after checking that every tensor the architecture needs is present
        with the shape the config implies and a supported type; ModelError otherwise."""
        config = self.config
        for name, shape in expected_tensors(config, has_output="output.weight" in self.tensors):
            info = self.tensors.get(name)
            if info is None:
                raise ModelError(f"{self.path}: missing tensor {name!r} needed by a "
                                 f"{config.architecture!r} model")
            if info.shape != shape:
                raise ModelError(f"{self.path}: tensor {name!r} has shape {list(info.shape)}, "
                                 f"expected {list(shape)} from the metadata")
            if info.type_name not in SUPPORTED_TENSOR_TYPES:
                raise ModelError(f"{self.path}: tensor {name!r} has unsupported type "
                                 f"{info.type_name}; supported: "
                                 f"{', '.join(sorted(SUPPORTED_TENSOR_TYPES))}")
        return config


def read_gguf(path: str | os.PathLike) -> GGUFFile:
    """Open and parse the GGUF file at `path` (memory-mapped); ModelError if it is not a valid
    little-endian GGUF v2/v3 file."""
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size < 8:
                _check_magic(path, handle.read(4))
                raise ModelError(f"{path}: truncated GGUF file ({size} bytes)")
            mapping = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as error:
        raise ModelError(f"cannot read GGUF file {path}: {error.strerror or error}") from error
    try:
        return _parse(path, mapping)
    except BaseException:
        mapping.close()
        raise


def _check_magic(path: Path, head: bytes) -> None:
    if len(head) < 4 or struct.unpack("<I", head[:4])[0] != GGUF_MAGIC:
        raise ModelError(f"{path}: not a GGUF file (bad magic {head[:4]!r}, expected b'GGUF')")


class _Cursor:
    """Little-endian reads from the mapped header; reading past the end is a truncation."""

    def __init__(self, path: Path, buffer: mmap.mmap):
        self.path = path
        self.buffer = buffer
        self.size = len(buffer)
        self.pos = 0

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise ModelError(f"{self.path}: truncated GGUF file: {what} needs {n} bytes at "
                             f"offset {self.pos} but the file has {self.size} bytes")

    def scalar(self, fmt: str, what: str) -> Any:
        n = struct.calcsize(fmt)
        self.need(n, what)
        value = struct.unpack_from(fmt, self.buffer, self.pos)[0]
        self.pos += n
        return value

    def string(self, what: str) -> str:
        n = self.scalar("<Q", what)
        self.need(n, what)
        text = self.buffer[self.pos:self.pos + n].decode("utf-8", errors="replace")
        self.pos += n
        return text

    def value_type(self, what: str) -> GGUFValueType:
        code = self.scalar("<I", what)
        try:
            return GGUFValueType(code)
        except ValueError:
            raise ModelError(f"{self.path}: {what} has unknown GGUF value type {code} "
                             f"(corrupt file?)") from None

    def value(self, vtype: GGUFValueType, what: str) -> Any:
        if vtype == GGUFValueType.STRING:
            return self.string(what)
        if vtype == GGUFValueType.ARRAY:
            return self.array(what)
        return self.scalar(_SCALAR_FORMATS[vtype], what)

    def array(self, what: str) -> Any:
        item_type = self.value_type(what)
        count = self.scalar("<Q", what)
        if item_type in _NUMPY_TYPES:
            dtype = np.dtype(_NUMPY_TYPES[item_type]).newbyteorder("<")
            self.need(count * dtype.itemsize, what)
            values = np.frombuffer(self.buffer, dtype=dtype, count=count, offset=self.pos).copy()
            self.pos += count * dtype.itemsize
            return values
        # Each element needs at least 8 bytes (a string length or an array header).
        self.need(count * 8, what)
        if item_type == GGUFValueType.STRING:
            return self.strings(count, what)
        return [self.value(item_type, what) for _ in range(count)]

    def strings(self, count: int, what: str) -> list[str]:
        """`count` length-prefixed strings (a vocabulary: ~50k of them, read in one loop
        without a method call per string)."""
        buffer, pos, size = self.buffer, self.pos, self.size
        unpack = struct.Struct("<Q").unpack_from
        out = []
        for _ in range(count):
            if pos + 8 > size:
                self.pos = pos
                self.need(8, what)
            (n,) = unpack(buffer, pos)
            pos += 8
            if pos + n > size:
                self.pos = pos
                self.need(n, what)
            out.append(buffer[pos:pos + n].decode("utf-8", errors="replace"))
            pos += n
        self.pos = pos
        return out


def _parse(path: Path, mapping: mmap.mmap) -> GGUFFile:
    _check_magic(path, mapping[:4])
    cursor = _Cursor(path, mapping)
    cursor.pos = 4
    version = cursor.scalar("<I", "the version")
    if version not in (2, 3):
        hint = " (a big-endian file?)" if version > 0xFFFF else ""
        raise ModelError(f"{path}: unsupported GGUF version {version}{hint}; "
                         f"rlx-mlir reads versions 2 and 3")
    n_tensors = cursor.scalar("<Q", "the tensor count")
    n_kv = cursor.scalar("<Q", "the metadata count")
    metadata: dict[str, Any] = {}
    for index in range(n_kv):
        key = cursor.string(f"metadata key #{index}")
        metadata[key] = cursor.value(cursor.value_type(f"metadata {key!r}"), f"metadata {key!r}")
    alignment = int(metadata.get("general.alignment", DEFAULT_ALIGNMENT))
    if alignment <= 0 or alignment & (alignment - 1):
        raise ModelError(f"{path}: general.alignment {alignment} is not a power of two")
    infos = [_tensor_info(cursor, index) for index in range(n_tensors)]
    data_offset = -(-cursor.pos // alignment) * alignment
    tensors: dict[str, TensorInfo] = {}
    for name, ggml_type, shape, relative, n_bytes in infos:
        if name in tensors:
            raise ModelError(f"{path}: duplicate tensor name {name!r}")
        start = data_offset + relative
        if start + n_bytes > cursor.size:
            raise ModelError(f"{path}: truncated GGUF file: tensor {name!r} needs bytes "
                             f"{start}..{start + n_bytes} but the file has {cursor.size} bytes")
        tensors[name] = TensorInfo(name, ggml_type, shape, start, n_bytes)
    return GGUFFile(path, version, metadata, tensors, mapping, alignment, data_offset)


def _tensor_info(cursor: _Cursor, index: int) -> tuple[str, GGMLQuantizationType,
                                                       tuple[int, ...], int, int]:
    name = cursor.string(f"tensor info #{index}")
    n_dims = cursor.scalar("<I", f"tensor {name!r}")
    if not 1 <= n_dims <= 4:
        raise ModelError(f"{cursor.path}: tensor {name!r} has {n_dims} dimensions (corrupt file?)")
    dims = [cursor.scalar("<Q", f"tensor {name!r}") for _ in range(n_dims)]
    code = cursor.scalar("<I", f"tensor {name!r}")
    offset = cursor.scalar("<Q", f"tensor {name!r}")
    try:
        ggml_type = GGMLQuantizationType(code)
    except ValueError:
        raise ModelError(f"{cursor.path}: tensor {name!r} has unknown ggml type {code}") from None
    if ggml_type not in GGML_QUANT_SIZES:
        raise ModelError(f"{cursor.path}: tensor {name!r} has unsupported type {ggml_type.name}")
    block_size, type_size = GGML_QUANT_SIZES[ggml_type]
    if dims[0] % block_size:
        raise ModelError(f"{cursor.path}: tensor {name!r} ({ggml_type.name}) has rows of "
                         f"{dims[0]} values, not a multiple of its block size {block_size}")
    n_elements = int(np.prod(dims, dtype=np.uint64))
    n_bytes = n_elements // block_size * type_size
    return name, ggml_type, tuple(reversed(dims)), offset, n_bytes


# --- model configuration -----------------------------------------------------------------

ROPE_STYLES = {"llama": "interleaved", "qwen2": "half", "qwen3": "half", "qwen35": "half",
               "gemma3": "half"}
"""How each supported architecture rotates q/k: llama.cpp's NORM rope on adjacent pairs for
`llama` (the converter permuted the weights for it), NEOX halves for qwen2/qwen3."""


@dataclass(frozen=True)
class ModelConfig:
    """The hyper-parameters of a decoder-only transformer read from GGUF metadata."""

    architecture: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_vocab: int
    rope_theta: float
    rope_style: str
    """"interleaved" (llama) or "half" (qwen2, qwen3)."""
    eps: float
    context_length: int
    file_type: int
    """`general.file_type` (a gguf.LlamaFileType value; -1 when absent)."""
    ssm_conv_kernel: int = 0
    """State-space models (`mamba`; 0 otherwise): the causal conv's taps K
    (`{arch}.ssm.conv_kernel`), the inner width I, the SSM state size N and the time-step
    rank R (`.ssm.inner_size`, `.ssm.state_size`, `.ssm.time_step_rank`)."""
    ssm_inner_size: int = 0
    ssm_state_size: int = 0
    ssm_time_step_rank: int = 0
    n_mtp: int = 0
    """Multi-token-prediction layers after the `n_layer` main ones (`nextn_predict_layers`)."""
    arch_params: Any = None
    """Architecture-specific hyper-parameters (qwen35: arch_qwen35.Qwen35Params)."""
    # Sliding-window attention and logit soft-capping (gemma3; the defaults mean none).
    sliding_window: int = 0
    """W of the local layers' windows (0: every layer attends to all earlier keys)."""
    swa_layers: tuple[bool, ...] = ()
    """Which layers are local (sliding-window) ones; empty when none is."""
    rope_theta_swa: float = 10000.0
    """Rope base of the local layers (their position scale is always 1)."""
    logit_softcap: float = 0.0
    """cap > 0: logits become cap * tanh(logits / cap)."""

    @property
    def file_type_name(self) -> str:
        """The file type's name ("MOSTLY_Q4_1", ...), or "unknown"."""
        from gguf import LlamaFileType
        try:
            return LlamaFileType(self.file_type).name
        except ValueError:
            return "unknown"

    @classmethod
    def from_metadata(cls, metadata: dict[str, Any], source: str = "GGUF file") -> ModelConfig:
        """The config of a file of a supported architecture: the transformer keys (llama,
        qwen2, qwen3, and gemma3/qwen35 before their `refine`), or an ArchitectureModule's
        own `config` (mamba); ModelError naming the missing or unsupported item otherwise."""
        arch = metadata.get("general.architecture")
        if arch is None:
            raise ModelError(f"{source}: no general.architecture in the metadata")
        module = ARCHITECTURE_MODULES.get(arch)
        if module is not None and module.config is not None:
            return module.config(metadata, source)
        if arch not in ROPE_STYLES:
            raise ModelError(f"{source}: unsupported architecture {arch!r}; supported: "
                             f"{', '.join([*ROPE_STYLES, *ARCHITECTURE_MODULES])}")

        def key(name: str, default: Any = None) -> Any:
            value = metadata.get(f"{arch}.{name}", default)
            if value is None:
                raise ModelError(f"{source}: missing metadata {arch}.{name}")
            return value

        n_embd = int(key("embedding_length"))
        n_head = int(key("attention.head_count"))
        if n_head <= 0 or n_embd <= 0:
            raise ModelError(f"{source}: {arch}.attention.head_count ({n_head}) and "
                             f"{arch}.embedding_length ({n_embd}) must be positive")
        n_head_kv = int(key("attention.head_count_kv", n_head))
        if n_head_kv <= 0 or n_head % n_head_kv:
            raise ModelError(f"{source}: {arch}.attention.head_count {n_head} is not a multiple "
                             f"of head_count_kv {n_head_kv}")
        if arch in ("qwen3", "qwen35"):
            head_dim = int(key("attention.key_length"))
        else:
            head_dim = int(key("attention.key_length", n_embd // n_head))
        tokens = metadata.get("tokenizer.ggml.tokens")
        vocab = metadata.get(f"{arch}.vocab_size", len(tokens) if tokens is not None else None)
        if vocab is None:
            raise ModelError(f"{source}: neither {arch}.vocab_size nor tokenizer.ggml.tokens "
                             f"gives the vocabulary size")
        n_mtp = int(metadata.get(f"{arch}.nextn_predict_layers", 0))
        n_layer = int(key("block_count")) - n_mtp
        config = cls(
            architecture=arch, n_layer=n_layer, n_embd=n_embd, n_head=n_head,
            n_head_kv=n_head_kv, head_dim=head_dim, n_ff=int(key("feed_forward_length")),
            n_vocab=int(vocab), rope_theta=float(key("rope.freq_base", 10000.0)),
            rope_style=ROPE_STYLES[arch],
            eps=float(key("attention.layer_norm_rms_epsilon")),
            context_length=int(key("context_length")),
            file_type=int(metadata.get("general.file_type", -1)), n_mtp=n_mtp)
        if module is None or module.refine is None:
            return config
        return module.refine(config, metadata, source)


def expected_tensors(config: ModelConfig,
                     has_output: bool) -> list[tuple[str, tuple[int, ...]]]:
    """(name, row-major shape) of every tensor a model of `config` needs; without
    `output.weight` the output projection is tied to `token_embd.weight`."""
    module = ARCHITECTURE_MODULES.get(config.architecture)
    if module is not None and module.tensors is not None:
        return module.tensors(config, has_output)
    c = config
    q_dim, kv_dim = c.n_head * c.head_dim, c.n_head_kv * c.head_dim
    needed = [("token_embd.weight", (c.n_vocab, c.n_embd)), ("output_norm.weight", (c.n_embd,))]
    if has_output:
        needed.append(("output.weight", (c.n_vocab, c.n_embd)))
    for i in range(c.n_layer):
        layer = [
            ("attn_norm.weight", (c.n_embd,)), ("attn_q.weight", (q_dim, c.n_embd)),
            ("attn_k.weight", (kv_dim, c.n_embd)), ("attn_v.weight", (kv_dim, c.n_embd)),
            ("attn_output.weight", (c.n_embd, q_dim)), ("ffn_norm.weight", (c.n_embd,)),
            ("ffn_gate.weight", (c.n_ff, c.n_embd)), ("ffn_up.weight", (c.n_ff, c.n_embd)),
            ("ffn_down.weight", (c.n_embd, c.n_ff)),
        ]
        if c.architecture == "qwen2":
            layer += [("attn_q.bias", (q_dim,)), ("attn_k.bias", (kv_dim,)),
                      ("attn_v.bias", (kv_dim,))]
        if c.architecture in ("qwen3", "gemma3"):
            layer += [("attn_q_norm.weight", (c.head_dim,)),
                      ("attn_k_norm.weight", (c.head_dim,))]
        if c.architecture == "gemma3":
            layer += [("post_attention_norm.weight", (c.n_embd,)),
                      ("post_ffw_norm.weight", (c.n_embd,))]
        needed += [(f"blk.{i}.{name}", shape) for name, shape in layer]
    return needed


@dataclass(frozen=True)
class ArchitectureModule:
    """An architecture defined in its own module (`rlx_mlir/models/arch_<name>.py`), which
    registers it in ARCHITECTURE_MODULES when `rlx_mlir.models` is imported: how its
    config is read, which tensors it needs, and its graph."""

    build: Callable[..., Any]
    """(config, tensors, *, max_seq, n_rot, activations) -> DecoderGraph (`build_decoder`)."""
    config: Callable[[Mapping[str, Any], str], ModelConfig] | None = None
    """(metadata, source) -> ModelConfig, for a model that is no attention transformer
    (`mamba`); None: the transformer keys are read, then `refine` runs."""
    refine: Callable[[ModelConfig, Mapping[str, Any], str], ModelConfig] | None = None
    """(config, metadata, source) -> the config with the architecture's own keys read
    (gemma3's windows, qwen35's delta-net sizes); ModelError naming what is wrong."""
    batched: bool = False
    """Whether `build` takes `slots=` (batched decoding: slot KV caches, per-row positions)."""
    tensors: Callable[[ModelConfig, bool], list[tuple[str, tuple[int, ...]]]] | None = None
    """(config, has_output) -> (name, row-major shape) of every tensor; None: the
    transformer's (`expected_tensors`)."""


ARCHITECTURE_MODULES: dict[str, ArchitectureModule] = {}
"""Architecture name -> its ArchitectureModule (gemma3, qwen35, mamba: arch_<name>.py, each
registering itself when imported; `rlx_mlir.models` imports them all). The others
(llama, qwen2, qwen3) are the plain transformer of `architectures.DecoderBuilder`."""
