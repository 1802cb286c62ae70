"""rlx.models.load_gguf on `mamba` files (rlx_mlir/models/arch_mamba.py), without torch.

A random Mamba model written as llama.cpp's converter writes it (tests/mamba_models.py)
against an independent float64 numpy forward of the same file; one compiled model serves
every prompt length, chunked prefills and token-by-token steps with the conv windows and
SSM states as model state; the reference executor runs the same graph; bad files are
ModelErrors raised before compiling.
"""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from mamba_models import numpy_mamba_logits, random_mamba, write_mamba_gguf

from rlx_mlir.core.errors import ArgumentError
from rlx_mlir.models import ModelError, load_gguf

REL_TOL = 1e-4
IDS = [5, 261, 72, 101, 108, 270, 32, 99, 97, 116, 3]


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    state, config = random_mamba()
    return write_mamba_gguf(tmp_path_factory.mktemp("mamba") / "mamba.gguf", state, config)


@pytest.fixture(scope="module")
def want(model_file) -> np.ndarray:
    return numpy_mamba_logits(model_file, IDS)


@pytest.fixture(scope="module", params=["jit", "reference"])
def lm(request, model_file):
    return load_gguf(model_file, max_seq=16, engine=request.param)


def test_logits_at_several_lengths(lm, model_file, want):
    for n in (1, 2, 5, len(IDS)):
        error = relative_error(lm.logits(IDS[:n]), want[:n])
        assert error <= REL_TOL, (n, error)
        assert lm.position == n


def test_steps_and_chunks_carry_the_state(lm, want):
    lm.reset()
    steps = [lm.prefill(IDS[:1])] + [lm.step(t) for t in IDS[1:]]
    assert relative_error(np.stack(steps), want) <= REL_TOL
    lm.reset()
    chunks = [lm.prefill(IDS[a:b]) for a, b in ((0, 2), (2, 3), (3, 9), (9, 11))]
    assert relative_error(np.stack(chunks), want[[1, 2, 8, 10]]) <= REL_TOL
    lm.reset()  # zeroes the states: the same logits as from a fresh model
    assert lm.position == 0
    assert relative_error(lm.prefill(IDS[:3]), want[2]) <= REL_TOL


def test_generation_and_its_bound(lm):
    ids = lm.generate_ids(IDS[:4], max_new_tokens=5)
    assert len(ids) == 5
    assert lm.generate_ids(IDS[:4], max_new_tokens=5) == ids  # generate resets the states
    lm.reset()
    lm.prefill(IDS)
    with pytest.raises(ArgumentError, match="max_seq is 16"):
        lm.prefill(IDS[:6])  # 11 + 6 tokens > max_seq
    assert lm.position == len(IDS)


def test_quantized_matrices(tmp_path, want):
    """Q4_0 matrices (F16 ssm_dt) with llama.cpp's q8 activations against the numpy forward
    of the same file; and the profile of a prefill and a step."""
    state, config = random_mamba()
    path = write_mamba_gguf(tmp_path / "q4_0.gguf", state, config, T.Q4_0)
    lm = load_gguf(path, max_seq=16)
    theirs = numpy_mamba_logits(path, IDS)
    ours = lm.logits(IDS)
    assert relative_error(ours, theirs) <= 0.05
    assert (ours.argmax(-1) == theirs.argmax(-1)).all()
    profile = lm.profile(IDS[:4], repeat=1)
    for phase in (profile.prefill, profile.decode):
        assert any("selective_scan" in row.kernel for row in phase.rows)


@pytest.mark.parametrize("change, message", [
    (dict(drop="blk.0.ssm_conv1d.bias"), "missing tensor 'blk.0.ssm_conv1d.bias'"),
    (dict(dt_b_c_rms=True), "dt_b_c_rms"),
])
def test_bad_files_are_model_errors(tmp_path, change, message):
    state, config = random_mamba()
    path = write_mamba_gguf(tmp_path / "bad.gguf", state, config, **change)
    with pytest.raises(ModelError, match=message):
        load_gguf(path)


def test_mismatched_sizes_are_model_errors(tmp_path):
    state, config = random_mamba()
    path = write_mamba_gguf(tmp_path / "bad.gguf", state, {**config, "state_size": 10})
    with pytest.raises(ModelError, match=r"blk.0.ssm_x.weight.*shape \[30, 128\], expected "
                                         r"\[26, 128\]"):
        load_gguf(path)
