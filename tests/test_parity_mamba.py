"""[parity] `mamba` GGUF files in rlx-mlir against Hugging Face transformers loading the same
files (`MambaForCausalLM.from_pretrained(dir, gguf_file=...)`, which dequantizes to f32).

The file is a tiny random `MambaForCausalLM` written as llama.cpp's converter writes it
(tests/mamba_models.py; checked against the converter itself when `LLAMA_CPP_SRC` names
its sources). One compiled model per file serves every prompt length (a symbolic S) and
token-by-token decoding with the conv windows and SSM states as model state. Criteria:
relative error <= 1e-4 with f32 weights (and with quantized weights when the activations
stay f32: `exact_dequant`), and the SPEC's agreement (mean KL <= 0.01, the same top-1
wherever HF's top-two margin is >= 0.25) for a Q8_0 file with llama.cpp's q8 activations.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from mamba_models import gguf_tensors, hf_state, tiny_mamba, write_mamba_gguf

from rlx_mlir.models import ModelError, load_gguf, read_gguf

torch = pytest.importorskip("torch", reason="the [parity] extra is not installed")
transformers = pytest.importorskip("transformers", reason="the [parity] extra is not installed")

REL_TOL = 1e-4
MAX_MEAN_KL = 0.01
MARGIN = 0.25
LENGTHS = (1, 2, 7, 33)
"""Prompt lengths: one token, fewer than the conv's K-1 = 3, and more."""


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


def agreement(ours: np.ndarray, theirs: np.ndarray) -> tuple[float, int, int]:
    """(mean KL(HF || ours) per position, decisive positions, decisive ones with the same
    top-1) of logits [n, V]."""
    def log_softmax(x):
        x = x.astype(np.float64) - x.max(-1, keepdims=True)
        return x - np.log(np.exp(x).sum(-1, keepdims=True))

    p_log, q_log = log_softmax(theirs), log_softmax(ours)
    kl = (np.exp(p_log) * (p_log - q_log)).sum(-1)
    top2 = np.sort(theirs, -1)[:, -2:]
    decisive = top2[:, 1] - top2[:, 0] >= MARGIN
    same = theirs.argmax(-1) == ours.argmax(-1)
    return float(kl.mean()), int(decisive.sum()), int(same[decisive].sum())


@pytest.fixture(scope="module")
def model():
    return tiny_mamba()


@pytest.fixture(scope="module")
def files(model, tmp_path_factory) -> dict[str, Path]:
    """The model as F32, Q8_0 (the converter's --outtype q8_0) and Q4_0 matrices."""
    state, config = hf_state(model)
    folder = tmp_path_factory.mktemp("mamba")
    return {kind.name: write_mamba_gguf(folder / f"mamba-{kind.name}.gguf", state, config, kind)
            for kind in (T.F32, T.Q8_0, T.Q4_0)}


def hf_from_gguf(path: Path):
    return transformers.MambaForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()


def hf_logits(hf, ids) -> np.ndarray:
    with torch.no_grad():
        return hf(torch.tensor([list(ids)])).logits[0].float().numpy()


def prompt(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 280, n)


@pytest.fixture(scope="module")
def f32_lm(files):
    return load_gguf(files["F32"], max_seq=64)


def test_hf_reads_the_file_as_the_original_model(model, files):
    """The file holds the model: HF loading it computes what the original computes."""
    ids = prompt(9)
    assert relative_error(hf_logits(hf_from_gguf(files["F32"]), ids),
                          hf_logits(model, ids)) <= 1e-6


def test_config_and_states(f32_lm):
    c = f32_lm.config
    assert (c.architecture, c.n_layer, c.n_embd, c.n_vocab) == ("mamba", 2, 64, 280)
    assert (c.ssm_conv_kernel, c.ssm_inner_size, c.ssm_state_size,
            c.ssm_time_step_rank) == (4, 128, 12, 6)
    assert f32_lm.graph.inputs[:2] == ["ids", "rows"]  # no rope tables
    assert f32_lm.graph.states == ["blk0_conv", "blk0_ssm", "blk1_conv", "blk1_ssm"]


def test_prefill_at_every_length_with_one_compile(f32_lm, files):
    """`logits` over several prompt lengths (one compiled model, S symbolic) equals HF."""
    hf = hf_from_gguf(files["F32"])
    errors = {}
    for n in LENGTHS:
        ids = prompt(n, seed=n)
        errors[n] = relative_error(f32_lm.logits(ids), hf_logits(hf, ids))
        assert f32_lm.position == n
    print("\nmamba f32 prefill rel. error by length: "
          + ", ".join(f"{n}: {e:.1e}" for n, e in errors.items()))
    assert max(errors.values()) <= REL_TOL, errors


def test_decode_token_by_token_and_in_chunks(f32_lm, files):
    """prefill + step (and prefills of chunks shorter than the conv window) carry the
    states: each position's logits equal HF's full forward; reset starts over."""
    hf = hf_from_gguf(files["F32"])
    ids = prompt(12, seed=5)
    want = hf_logits(hf, ids)
    f32_lm.reset()
    got = [f32_lm.prefill(ids[:3])] + [f32_lm.step(int(t)) for t in ids[3:]]
    step_error = relative_error(np.stack(got), want[2:])
    assert f32_lm.position == 12
    f32_lm.reset()
    chunks = [f32_lm.prefill(ids[a:b]) for a, b in ((0, 1), (1, 3), (3, 4), (4, 12))]
    chunk_error = relative_error(np.stack(chunks), want[[0, 2, 3, 11]])
    mean_kl, decisive, same = agreement(np.stack(got), want[2:])
    print(f"\nmamba f32 decode: rel. error {step_error:.1e} (steps), {chunk_error:.1e} "
          f"(chunks); mean KL {mean_kl:.1e}, top-1 {same}/{decisive}")
    assert step_error <= REL_TOL and chunk_error <= REL_TOL
    assert mean_kl <= MAX_MEAN_KL and same == decisive


def test_generate_is_hf_greedy(f32_lm, files):
    hf = hf_from_gguf(files["F32"])
    ids = list(prompt(5, seed=9))
    want = []
    for _ in range(6):
        want.append(int(hf_logits(hf, ids + want)[-1].argmax()))
    assert f32_lm.generate_ids(ids, max_new_tokens=6) == want
    assert isinstance(f32_lm.generate("hello world", max_new_tokens=4), str)


@pytest.mark.parametrize("kind, exact", [("Q4_0", True), ("Q8_0", False)],
                         ids=["q4_0-exact", "q8_0-q8-activations"])
def test_quantized_file(files, kind, exact):
    """Quantized matrices (ssm_dt, whose rows of 6 fill no block, is F16 as the converter
    makes it) against HF loading the same file: within 1e-4 with f32 activations, the
    SPEC's agreement with llama.cpp's q8 activations; prefill and decode."""
    info = read_gguf(files[kind]).tensors
    assert info["blk.0.ssm_in.weight"].type_name == kind
    assert info["blk.0.ssm_dt.weight"].type_name == "F16"
    assert info["blk.0.ssm_conv1d.weight"].type_name == "F32"
    hf = hf_from_gguf(files[kind])
    lm = load_gguf(files[kind], max_seq=64, exact_dequant=exact)
    ids = prompt(24, seed=3)
    want = hf_logits(hf, ids)
    prefill = lm.logits(ids)
    lm.reset()
    decode = np.stack([lm.prefill(ids[:4])] + [lm.step(int(t)) for t in ids[4:]])
    errors = relative_error(prefill, want), relative_error(decode, want[3:])
    mean_kl, decisive, same = agreement(prefill, want)
    print(f"\nmamba {kind} ({'f32' if exact else 'q8'} activations): rel. error prefill "
          f"{errors[0]:.1e}, decode {errors[1]:.1e}; mean KL {mean_kl:.1e}, top-1 "
          f"{same}/{decisive} decisive")
    if exact:
        assert max(errors) <= REL_TOL, errors
    assert mean_kl <= MAX_MEAN_KL and same == decisive


def test_unsupported_files_are_model_errors(model, tmp_path):
    state, config = hf_state(model)
    falcon = write_mamba_gguf(tmp_path / "falcon.gguf", state, config, dt_b_c_rms=True)
    with pytest.raises(ModelError, match="dt_b_c_rms"):
        load_gguf(falcon)
    missing = write_mamba_gguf(tmp_path / "missing.gguf", state, config, drop="blk.1.ssm_a")
    with pytest.raises(ModelError, match="blk.1.ssm_a"):
        load_gguf(missing)


def test_writer_matches_llama_cpp_converter(model, tmp_path):
    """tests/mamba_models.py writes what `convert_hf_to_gguf.py` writes for the same HF
    model: metadata keys and values (but the tokenizer and names), tensor names, shapes,
    types and values. Needs LLAMA_CPP_SRC (llama.cpp's sources, e.g. the vendor/llama.cpp
    of the llama-cpp-python 0.3.36 sdist)."""
    source = os.environ.get("LLAMA_CPP_SRC")
    if not source or not (Path(source) / "convert_hf_to_gguf.py").is_file():
        pytest.skip("LLAMA_CPP_SRC does not name llama.cpp's sources")
    model.save_pretrained(tmp_path / "hf")
    ours_by_type, theirs_by_type = {}, {}
    for kind in (T.F32, T.Q8_0):
        out = tmp_path / f"converted-{kind.name}.gguf"
        subprocess.run([sys.executable, str(Path(source) / "convert_hf_to_gguf.py"),
                        str(tmp_path / "hf"), "--outfile", str(out), "--outtype",
                        kind.name.lower()], check=True, capture_output=True,
                       env={**os.environ, "PYTHONPATH": str(Path(source) / "gguf-py")})
        state, config = hf_state(model)
        ours_by_type[kind] = read_gguf(write_mamba_gguf(tmp_path / f"ours-{kind.name}.gguf",
                                                        state, config, kind))
        theirs_by_type[kind] = read_gguf(out)
    for kind, ours in ours_by_type.items():
        theirs = theirs_by_type[kind]
        skip = ("tokenizer.", "general.name", "general.size_label")
        keys = {k: v for k, v in theirs.metadata.items() if not k.startswith(skip)}
        assert {k: ours.metadata[k] for k in keys} == keys
        assert {n: (t.type_name, t.shape) for n, t in ours.tensors.items()} == \
            {n: (t.type_name, t.shape) for n, t in theirs.tensors.items()}
        for name in theirs.tensors:
            np.testing.assert_allclose(ours.array(name), theirs.array(name), rtol=1e-6,
                                       atol=0, err_msg=name)
    assert set(gguf_tensors(*hf_state(model))) == set(theirs_by_type[T.F32].tensors)


def test_llama_quantize_q4_k_m_file(tmp_path):
    """A file that llama.cpp's own `llama-quantize` made Q4_K_M (K-quant matrices, Q6_K
    embedding, F16 fallback for ssm_dt's 16-value rows; llama.cpp's loader reading our
    writer's file on the way) against HF loading it: 1e-4 with f32 activations, the SPEC's
    agreement with q8 activations. Needs LLAMA_QUANTIZE (the path of the binary)."""
    binary = os.environ.get("LLAMA_QUANTIZE")
    if not binary or not Path(binary).is_file():
        pytest.skip("LLAMA_QUANTIZE does not name llama.cpp's llama-quantize")
    model = tiny_mamba(hidden_size=256, time_step_rank=16)  # rows that fill 256-value blocks
    source = write_mamba_gguf(tmp_path / "f32.gguf", *hf_state(model))
    path = tmp_path / "q4_k_m.gguf"
    subprocess.run([binary, str(source), str(path), "Q4_K_M"], check=True, capture_output=True)
    types = {t.type_name for t in read_gguf(path).tensors.values()}
    assert {"Q4_K", "Q6_K", "F16"} <= types
    ids = prompt(40, seed=7)
    want = hf_logits(hf_from_gguf(path), ids)
    for exact in (True, False):
        got = load_gguf(path, max_seq=64, exact_dequant=exact).logits(ids)
        error, (mean_kl, decisive, same) = relative_error(got, want), agreement(got, want)
        print(f"\nmamba Q4_K_M by llama-quantize ({'f32' if exact else 'q8'} activations): "
              f"rel. error {error:.1e}, mean KL {mean_kl:.1e}, top-1 {same}/{decisive}")
        assert error <= REL_TOL or not exact
        assert mean_kl <= MAX_MEAN_KL and same == decisive
