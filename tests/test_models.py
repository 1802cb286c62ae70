"""rlx.models.load_gguf: the decoder graph of llama / qwen2 / qwen3 GGUF files.

Tiny random models (tests/gguf_models.py: several tensor types per model, tied and untied
outputs, F32 and quantized embeddings) are checked against an independent numpy forward
written from the SPEC; cached decoding (prefill, steps, chunks) against the full forward;
every bad file or argument is an RlxError raised before anything is compiled. Each model
runs compiled ("jit") and on the reference executor.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf_models import N_VOCAB, numpy_logits, write_tiny_model

import rlx_mlir as rlx
from rlx_mlir.core.errors import ArgumentError, RlxError
from rlx_mlir.models import LanguageModel, load_gguf
from rlx_mlir.models import architectures as architectures_module
from rlx_mlir.runnable import Runnable

ENGINES = ["jit", "reference"]
MAX_SEQ = 32

VARIANTS = {
    # Q4_1 q, Q8_0 k, Q4_K v, Q6_K o, F16 gate, Q5_0 up, Q4_0 down, Q8_0 tied embedding.
    "llama-mixed": dict(arch="llama"),
    "qwen2-untied": dict(arch="qwen2", tied=False, types={
        "attn_q.weight": T.Q5_1, "ffn_down.weight": T.Q5_K, "token_embd.weight": T.Q4_K,
        "output.weight": T.Q6_K}),
    "qwen3-float": dict(arch="qwen3", types={
        "attn_q.weight": T.BF16, "ffn_up.weight": T.F32, "token_embd.weight": T.F16}),
    "llama-f32-table": dict(arch="llama", seed=3, types={
        "token_embd.weight": T.F32, "attn_output.weight": T.F32}),
}
IDS = [5, 261, 72, 101, 108, 270, 32, 99, 97, 116]


@pytest.fixture(scope="module")
def model_files(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("tiny-models")
    return {name: write_tiny_model(folder / f"{name}.gguf", **spec)
            for name, spec in VARIANTS.items()}


_LOADED: dict[tuple[str, str], LanguageModel] = {}


@pytest.fixture
def load(model_files):
    """load(variant, engine) -> the LanguageModel, loaded once per module (and reset)."""

    def get(variant: str, engine: str) -> LanguageModel:
        key = (variant, engine)
        if key not in _LOADED:
            # exact_dequant: the numpy forward is f32 (the q8 form: test_jit_quant_dot.py)
            _LOADED[key] = load_gguf(model_files[variant], max_seq=MAX_SEQ, engine=engine,
                                     exact_dequant=True)
        model = _LOADED[key]
        model.reset()
        return model

    yield get


def assert_logits_close(got: np.ndarray, want: np.ndarray, tolerance: float = 2e-4) -> None:
    """Equal within `tolerance` of the largest logit (f32 rounding by default)."""
    scale = max(float(np.abs(want).max()), 1.0)
    np.testing.assert_allclose(got, want, rtol=0, atol=tolerance * scale)


QUANTIZED_ACTIVATIONS = 0.03
"""Tolerance (of the largest logit) of the default model against the f64 numpy forward:
its dequant_matmuls quantize their activations to 8-bit blocks (`activations="q8"`, as
llama.cpp does), about 1% here. A wrong rope, mask or weight layout is off by the size of
the logits themselves."""


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_logits_match_numpy(load, model_files, variant, engine):
    lm = load(variant, engine)
    got = lm.logits(IDS)
    assert got.shape == (len(IDS), N_VOCAB) and got.dtype == np.float32
    assert_logits_close(got, numpy_logits(model_files[variant], IDS))
    assert lm.position == len(IDS)  # logits leaves the ids in the cache
    assert isinstance(lm.runner, Runnable)  # a compiled model or the reference executor


def test_profile_of_a_prefill_and_a_decode_step(load, model_files):
    lm = load("llama-mixed", "jit")
    prof = lm.profile(IDS[:4], repeat=1)
    assert prof.prompt_tokens == 4 and lm.position == 4  # the cache holds the ids after
    assert prof.prefill.rows and prof.decode.rows and "| scope |" in prof.to_markdown()
    assert_logits_close(lm.step(IDS[4]), numpy_logits(model_files["llama-mixed"], IDS[:5])[-1])


def test_default_build_with_quantized_activations(model_files):
    """load_gguf's default build (q8 activations, as llama.cpp) is close to the exact
    forward and closer to the reference executor's q8 model, and its cached decoding
    equals its own full forward.

    Each q8 dequant_matmul equals the reference's within f32 rounding for the same x
    (test_jit_quant_dot.py), but through a model the f32-level differences of the other
    ops move an x·(1/d) across a rounding boundary now and then (one quant step), so the
    whole models agree statistically, not at f32 tolerance."""
    # the graph test_generate.py compiles (same types and max_seq): one compilation for both
    lm = load_gguf(model_files["llama-mixed"], max_seq=64)
    assert "activations q8" in str(lm.graph.to_module())
    full = lm.logits(IDS)
    want = numpy_logits(model_files["llama-mixed"], IDS)
    assert_logits_close(full, want, QUANTIZED_ACTIVATIONS)
    reference = load_gguf(model_files["llama-mixed"], max_seq=64, engine="reference")
    assert np.abs(full - reference.logits(IDS)).mean() < 0.6 * np.abs(full - want).mean()
    assert np.abs(full - want).mean() <= QUANTIZED_ACTIVATIONS / 5 * np.abs(want).max()
    lm.reset()
    assert_logits_close(lm.prefill(IDS[:5]), full[4])
    for i in range(5, len(IDS)):
        assert_logits_close(lm.step(IDS[i]), full[i])


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("variant", ["llama-mixed", "qwen2-untied", "qwen3-float"])
def test_prefill_and_steps_equal_the_full_forward(load, variant, engine):
    lm = load(variant, engine)
    full = lm.logits(IDS)
    lm.reset()
    assert lm.position == 0
    assert_logits_close(lm.prefill(IDS[:4]), full[3])
    for i in range(4, len(IDS)):
        assert_logits_close(lm.step(IDS[i]), full[i])
        assert lm.position == i + 1


@pytest.mark.parametrize("engine", ENGINES)
def test_prefill_in_chunks_and_logits_resets(load, engine):
    lm = load("llama-mixed", engine)
    full = lm.logits(IDS)
    lm.reset()
    lm.prefill(IDS[:3])
    lm.prefill(IDS[3:7])
    assert_logits_close(lm.prefill(IDS[7:]), full[-1])
    lm.step(3)
    assert_logits_close(lm.logits(IDS), full)  # from position 0 whatever the cache held


def test_config_tokenizer_and_repr(load):
    lm = load("qwen3-float", "reference")
    c = lm.config
    assert (c.architecture, c.n_layer, c.n_embd, c.n_head, c.n_head_kv, c.head_dim) == \
        ("qwen3", 2, 256, 4, 2, 64)
    assert c.rope_style == "half" and c.n_vocab == N_VOCAB
    assert lm.tokenizer.decode(lm.tokenizer.encode(" the cat")) == " the cat"
    assert "qwen3" in repr(lm) and f"max_seq {MAX_SEQ}" in repr(lm)
    assert rlx.models.load_gguf is load_gguf
    assert load("llama-mixed", "reference").config.rope_style == "interleaved"


def test_graph_has_every_layer_and_the_caches(load):
    graph = load("llama-mixed", "reference").graph
    text = graph.to_mlir()
    assert graph.inputs == ["ids", "cos", "sin", "rows", "temperature", "top_k", "top_p", "seed"]
    assert graph.states == ["blk0_k_cache", "blk0_v_cache", "blk1_k_cache", "blk1_v_cache"]
    # 7 matrices per layer and the tied output projection, all on the file's bytes.
    assert text.count("hir.dequant_matmul") == 2 * 7 + 1
    assert text.count("hir.attention") == 2 and text.count("mir.dequant_gather") == 1
    params = graph.params
    assert "token_embd_weight" in params and "output_weight" not in params  # tied
    assert "blk_1_attn_v_weight" in params


def test_weights_are_views_of_the_file(model_files):
    """Quantized matrices are the file's bytes (views of the mapping), never f32 copies."""
    with rlx.models.read_gguf(model_files["llama-mixed"]) as file:
        decoder = architectures_module.build_decoder(file.check_model(), file.tensors,
                                                     max_seq=8)
        params = decoder.params(file)
        q = params["blk_0_attn_q_weight"]
        assert q.dtype == np.uint8 and not q.flags.owndata and not q.flags.writeable
        assert q.shape == (256, 256 // 32 * 20)  # Q4_1: 20 bytes per 32 values
        assert params["token_embd_weight"].dtype == np.uint8
        f32_bytes = sum(a.nbytes for a in params.values() if a.dtype == np.float32)
        assert f32_bytes < 16 * 1024  # norms only
        del q, params


# --- errors, all before compilation -------------------------------------------------------


@pytest.fixture
def no_compilation(monkeypatch):
    """Fail the test if load_gguf gets as far as building the graph."""

    def refuse(*args, **kwargs):
        raise AssertionError("load_gguf built a graph for a file it should have refused")

    monkeypatch.setattr("rlx_mlir.models.model.build_decoder", refuse)


def error_of(path, **kwargs) -> str:
    with pytest.raises(RlxError) as info:
        load_gguf(path, **kwargs)
    return str(info.value)


def test_unsupported_architecture(tmp_path, no_compilation):
    path = write_tiny_model(tmp_path / "m.gguf", architecture="falcon")
    message = error_of(path)
    assert "unsupported architecture 'falcon'" in message and "llama" in message


def test_unsupported_matrix_type(tmp_path, no_compilation):
    path = write_tiny_model(tmp_path / "m.gguf", types={"ffn_up.weight": T.TQ2_0})
    message = error_of(path)
    assert "blk.0.ffn_up.weight" in message and "TQ2_0" in message


def test_missing_tensor(tmp_path, no_compilation):
    path = write_tiny_model(tmp_path / "m.gguf", drop="blk.1.ffn_norm.weight")
    assert "missing tensor 'blk.1.ffn_norm.weight'" in error_of(path)


def test_bad_magic_and_truncated_files(tmp_path, model_files, no_compilation):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"NOPE" + bytes(100))
    assert "not a GGUF file" in error_of(bad)
    data = model_files["llama-mixed"].read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) // 2])
    assert "truncated" in error_of(cut)


def test_unknown_name_or_path(tmp_path, no_compilation):
    assert "no such file" in error_of(tmp_path / "nothing.gguf")
    assert "smollm2-135m-instruct" in error_of("not-a-model")


def test_unsupported_rope_scaling(tmp_path, no_compilation):
    path = write_tiny_model(tmp_path / "m.gguf", extra={"llama.rope.scaling.type": "yarn"})
    assert "rope scaling 'yarn'" in error_of(path)


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(max_seq=0), "max_seq"), (dict(max_seq=1.5), "max_seq"),
    (dict(threads=0), "threads"), (dict(engine="gpu"), "engine"),
])
def test_bad_load_arguments(model_files, no_compilation, kwargs, fragment):
    with pytest.raises(ArgumentError, match=fragment):
        load_gguf(model_files["llama-mixed"], **kwargs)


@pytest.mark.parametrize("ids, fragment", [
    ([1, N_VOCAB], f"token id {N_VOCAB} at index 1 is out of range"),
    ([-1], "token id -1"), ([], "non-empty"), ([[1, 2]], "1-D"), ([1.0, 2.0], "integer"),
])
def test_bad_token_ids(load, ids, fragment):
    lm = load("llama-mixed", "reference")
    with pytest.raises(ArgumentError, match=fragment):
        lm.logits(ids)
    with pytest.raises(ArgumentError, match=fragment):
        lm.prefill(ids)
    assert lm.position == 0


def test_bad_step_and_cache_full(load):
    lm = load("llama-mixed", "reference")
    with pytest.raises(ArgumentError, match="token_id"):
        lm.step("a")
    lm.prefill(list(range(MAX_SEQ - 1)))
    lm.step(4)
    with pytest.raises(ArgumentError, match="cache full"):
        lm.step(4)
    assert lm.position == MAX_SEQ
    lm.reset()
    with pytest.raises(ArgumentError, match="cache full"):
        lm.prefill(list(range(MAX_SEQ + 1)))


def test_linear_rope_scaling_divides_the_positions(tmp_path):
    """`rope.scaling.type = linear` with factor f rotates position p as p / f."""
    keys = {"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": 2.0}
    scaled = load_gguf(write_tiny_model(tmp_path / "scaled.gguf", extra=keys), max_seq=8,
                       engine="reference")
    plain = load_gguf(write_tiny_model(tmp_path / "plain.gguf"), max_seq=8, engine="reference")
    np.testing.assert_allclose(scaled._cos[2], plain._cos[1], rtol=1e-6)
    np.testing.assert_allclose(scaled._sin[4], plain._sin[2], rtol=1e-6)
    assert not np.allclose(scaled._sin[1], plain._sin[1])
