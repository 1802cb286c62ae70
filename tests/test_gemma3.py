"""The `gemma3` architecture (rlx_mlir/models/arch_gemma3.py) on a tiny random file.

The file is tests/gguf_models.py's tiny model with gemma3's tensors (q/k norms, post-attention
and post-FFN norms) and keys: a sliding window of W = 5 keys on layer 0 (pattern period 2:
layer 0 local, layer 1 global), a local rope base of 500 against the global 10000. It is
checked against an independent float64 numpy forward written from llama.cpp's
src/models/gemma3.cpp, on prompts longer than the window, both as one prefill and token by
token (so the window is exercised with cached keys), compiled and on the reference executor.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf_models import (
    EPS,
    HEAD_DIM,
    N_HEAD,
    N_HEAD_KV,
    N_LAYER,
    ROPE_THETA,
    head_rms_norm,
    rms_norm,
    rope,
    write_tiny_model,
)

from rlx_mlir.models import ModelError, load_gguf, read_gguf
from rlx_mlir.models.arch_gemma3 import attention_scale

WINDOW, ROPE_THETA_SWA, MAX_SEQ = 5, 500.0, 24
GEMMA3_KEYS = {"gemma3.attention.sliding_window": WINDOW,
               "gemma3.attention.sliding_window_pattern": 2,
               "gemma3.rope.freq_base_swa": ROPE_THETA_SWA}
IDS = [5, 261, 72, 101, 108, 270, 32, 99, 97, 116, 44, 262, 33]
"""13 tokens: longer than the window (5)."""


@pytest.fixture(scope="module")
def tiny_gemma3(tmp_path_factory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("gemma3") / "gemma3.gguf", "gemma3",
                            extra=GEMMA3_KEYS)


@pytest.fixture(scope="module", params=["jit", "reference"])
def model(request, tiny_gemma3):
    return load_gguf(tiny_gemma3, max_seq=MAX_SEQ, engine=request.param, exact_dequant=True)


def numpy_gemma3_logits(path: Path, ids: list[int], window: int = WINDOW) -> np.ndarray:
    """Logits [len(ids), n_vocab] of the tiny gemma3 file, float64, from position 0, with
    a window of `window` keys on the local layer."""
    reader = gguf.GGUFReader(path)
    w = {t.name: np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), np.float64)
         .reshape([int(d) for d in reversed(t.shape)]) for t in reader.tensors}
    h = w["token_embd.weight"][ids] * np.sqrt(np.float32(256))
    for i in range(N_LAYER):
        def p(name: str, i: int = i) -> np.ndarray:
            return w[f"blk.{i}.{name}"]

        local = i % 2 == 0
        x = rms_norm(h, p("attn_norm.weight"))
        q = head_rms_norm(x @ p("attn_q.weight").T, p("attn_q_norm.weight"))
        k = head_rms_norm(x @ p("attn_k.weight").T, p("attn_k_norm.weight"))
        v = x @ p("attn_v.weight").T
        cos, sin = tables(ROPE_THETA_SWA if local else ROPE_THETA, len(ids))
        q, k = rope(q, cos, sin, "half"), rope(k, cos, sin, "half")
        out = windowed_attention(q, k, v, window if local else len(ids))
        h = h + rms_norm(out @ p("attn_output.weight").T, p("post_attention_norm.weight"))
        x = rms_norm(h, p("ffn_norm.weight"))
        gate = x @ p("ffn_gate.weight").T
        gelu = 0.5 * gate * (1 + np.tanh(np.sqrt(2 / np.pi) * (gate + 0.044715 * gate ** 3)))
        ffn = (gelu * (x @ p("ffn_up.weight").T)) @ p("ffn_down.weight").T
        h = h + rms_norm(ffn, p("post_ffw_norm.weight"))
    return rms_norm(h, w["output_norm.weight"]) @ w["token_embd.weight"].T


def tables(theta: float, n: int) -> tuple[np.ndarray, np.ndarray]:
    angles = np.outer(np.arange(n), theta ** (-np.arange(0, HEAD_DIM, 2) / HEAD_DIM))
    return np.cos(angles), np.sin(angles)


def windowed_attention(q, k, v, window: int) -> np.ndarray:
    """Query i sees keys i - window < j <= i (llama.cpp's standard SWA mask)."""
    n, group = q.shape[0], N_HEAD // N_HEAD_KV
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    hidden = (j > i) | (j <= i - window)
    out = np.empty_like(q)
    for head in range(N_HEAD):
        cols = slice(head * HEAD_DIM, (head + 1) * HEAD_DIM)
        kv = slice(head // group * HEAD_DIM, (head // group + 1) * HEAD_DIM)
        scores = q[:, cols] @ k[:, kv].T / np.sqrt(HEAD_DIM)
        scores[hidden] = -np.inf
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
        out[:, cols] = weights / weights.sum(axis=-1, keepdims=True) @ v[:, kv]
    return out


def assert_close(got: np.ndarray, want: np.ndarray) -> None:
    scale = max(float(np.abs(want).max()), 1.0)
    np.testing.assert_allclose(got, want, rtol=0, atol=3e-4 * scale)


def test_config_reads_the_window_pattern_and_local_rope(tiny_gemma3):
    with read_gguf(tiny_gemma3) as file:
        config = file.check_model()
    assert (config.architecture, config.rope_style, config.head_dim) == ("gemma3", "half", 64)
    assert config.sliding_window == WINDOW and config.swa_layers == (True, False)
    assert config.rope_theta_swa == ROPE_THETA_SWA and config.logit_softcap == 0.0
    assert attention_scale(config) == 1 / 8
    assert EPS == pytest.approx(config.eps)


def test_logits_over_a_prompt_longer_than_the_window(model, tiny_gemma3):
    want = numpy_gemma3_logits(tiny_gemma3, IDS)
    assert_close(model.logits(IDS), want)
    # the window matters: full causal attention on layer 0 gives other logits
    full = numpy_gemma3_logits(tiny_gemma3, IDS, window=len(IDS))
    assert not np.allclose(want, full, atol=1e-2)


def test_decoding_token_by_token_slides_the_window(model, tiny_gemma3):
    want = numpy_gemma3_logits(tiny_gemma3, IDS)
    model.reset()
    assert_close(model.prefill(IDS[:3]), want[2])
    for position in range(3, len(IDS)):
        assert_close(model.step(IDS[position]), want[position])
    model.reset()
    assert_close(model.prefill(IDS[:7]), want[6])  # a chunk that straddles the window
    assert_close(model.prefill(IDS[7:]), want[-1])


def test_missing_gemma3_tensor_is_an_error(tmp_path):
    path = write_tiny_model(tmp_path / "bad.gguf", "gemma3", extra=GEMMA3_KEYS,
                            drop="blk.1.post_ffw_norm.weight")
    with pytest.raises(ModelError, match="missing tensor 'blk.1.post_ffw_norm.weight'"):
        load_gguf(path, max_seq=8)


@pytest.mark.parametrize("pattern, local", [
    (6, (True,) * 5 + (False,) + (True,) * 5 + (False,) + (True,) * 2),
    (0, (True,) * 14), ([True, False] * 7, (True, False) * 7)])
def test_swa_pattern_as_llama_cpp_reads_it(pattern, local):
    from rlx_mlir.models.arch_gemma3 import _swa_layers
    assert _swa_layers(pattern, 14, "f") == local


def test_chat_without_a_file_template_uses_gemma_turns(tmp_path):
    path = write_tiny_model(tmp_path / "plain.gguf", "gemma3", extra=GEMMA3_KEYS,
                            chat_template=None)
    lm = load_gguf(path, max_seq=8, engine="reference")
    bos = lm.tokenizer.tokens[lm.tokenizer.bos_id]
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hi "}, {"role": "assistant", "content": "Hello"},
                {"role": "user", "content": "Bye"}]
    assert lm.chat_prompt(messages) == (
        f"{bos}<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
        "<start_of_turn>model\nHello<end_of_turn>\n<start_of_turn>user\nBye<end_of_turn>\n"
        "<start_of_turn>model\n")
