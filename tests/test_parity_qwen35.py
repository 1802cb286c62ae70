"""[parity] `load_gguf` on a `qwen35` file against the same Hugging Face model in torch.

The file (tests/gguf_qwen35.py) is a tiny random `Qwen3_5ForCausalLM` written as
llama.cpp's converter writes it (three gated-delta-net layers with 2 key / 4 value heads,
so the converter's value-head reordering is exercised, and one gated attention layer with
partial rope), plus an MTP layer. One compiled model serves every test: prefill at several
lengths (a symbolic S), token-by-token decoding and chunked prefill with the conv windows,
delta-rule states and KV caches as state, `reset`, generation, and `mtp_logits` against the
MTP head assembled from HF's own modules (RMS norms, the full-attention decoder layer).
Criteria: ≤ 1e-4 relative error (f32 weights), and the SPEC's mean KL ≤ 0.01 with the
same top-1 wherever HF's top-two margin is ≥ 0.25.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rlx_mlir.core.errors import ArgumentError
from rlx_mlir.models import ModelError, load_gguf

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
if not hasattr(transformers, "Qwen3_5ForCausalLM"):
    pytest.skip("transformers has no Qwen3_5ForCausalLM", allow_module_level=True)

from gguf_qwen35 import gguf_tensors, tiny_model, write_qwen35  # noqa: E402

REL_TOL = 1e-4
MAX_SEQ = 40
LLAMA_CPP = Path(os.environ.get(
    "RLX_LLAMA_CPP_SRC", "/work/wt/llamacpp-src/llama_cpp_python-0.3.36/vendor/llama.cpp"))


@pytest.fixture(scope="module")
def hf():
    return tiny_model()


@pytest.fixture(scope="module")
def lm(hf, tmp_path_factory):
    model, mtp = hf
    path = write_qwen35(tmp_path_factory.mktemp("qwen35") / "tiny-qwen35.gguf", model, mtp)
    return load_gguf(path, max_seq=MAX_SEQ)


def hf_logits(model, ids) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor(np.asarray(ids)[None])).logits[0].numpy()


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


def agreement(got: np.ndarray, want: np.ndarray) -> tuple[float, int, int]:
    """(mean KL(HF || rlx) per position, decisive positions, those with equal top-1)."""
    def log_softmax(x):
        x = x.astype(np.float64) - x.max(-1, keepdims=True)
        return x - np.log(np.exp(x).sum(-1, keepdims=True))

    lp, lq = log_softmax(want), log_softmax(got)
    kl = float((np.exp(lp) * (lp - lq)).sum(-1).mean())
    top2 = np.sort(want, -1)[:, -2:]
    decisive = top2[:, 1] - top2[:, 0] >= 0.25
    same = want.argmax(-1) == got.argmax(-1)
    return kl, int(decisive.sum()), int((same & decisive).sum())


def check(got: np.ndarray, want: np.ndarray, what: str) -> None:
    error = relative_error(got, want)
    kl, decisive, same = agreement(got, want)
    print(f"qwen35 {what}: rel {error:.2e}, KL {kl:.2e}, top-1 {same}/{decisive}")
    assert error <= REL_TOL, (what, error)
    assert kl <= 0.01 and same == decisive > 0, (what, kl, same, decisive)


def test_config_counts_main_and_mtp_layers(lm):
    c = lm.config
    assert (c.architecture, c.n_layer, c.n_mtp, c.head_dim) == ("qwen35", 4, 1, 16)
    assert (c.arch_params.recurrent, c.arch_params.n_rot) == ((True, True, True, False), 4)


def test_prefill_over_a_symbolic_length_matches_hf(lm, hf):
    """One compiled model, prompts of 1, 7, 13 and 4 tokens (S bound at each call)."""
    model = hf[0]
    rng = np.random.default_rng(1)
    for n in (1, 7, 13, 4):
        ids = rng.integers(0, model.config.vocab_size, n)
        check(lm.logits(ids), hf_logits(model, ids), f"prefill S={n}")


def test_decode_token_by_token_and_in_chunks_matches_hf(lm, hf):
    """Prefill 3 tokens, then steps; and chunks of 5, 1, 4, 2: the states carry it all."""
    model = hf[0]
    ids = np.random.default_rng(2).integers(0, model.config.vocab_size, 12)
    want = hf_logits(model, ids)
    lm.reset()
    rows = [lm.prefill(ids[:3])] + [lm.step(int(t)) for t in ids[3:]]
    assert lm.position == ids.size
    check(np.stack(rows), want[2:], "decode")
    lm.reset()
    ends = np.cumsum([5, 1, 4, 2])
    rows = [lm.prefill(ids[end - size:end]) for size, end in zip([5, 1, 4, 2], ends, strict=True)]
    check(np.stack(rows), want[ends - 1], "chunked prefill")


def test_reset_zeroes_every_state(lm):
    lm.reset()
    lm.prefill([5, 9, 3, 7])
    states = lm.runner.state
    for kind in ("blk0_conv", "blk0_ssm", "blk3_k_cache", "mtp_hidden"):
        assert np.abs(states[kind]).max() > 0, kind
    lm.reset()
    # the KV caches are empty at position 0 (their rows are overwritten before being read);
    # every other state (conv windows, delta-rule states, the MTP row) is zero again
    assert lm.position == 0
    left = [name for name in states if np.any(states[name]) and not name.endswith("_cache")]
    assert not left, left


def test_generate_is_hf_greedy(lm, hf):
    model = hf[0]
    prompt = [int(i) for i in np.random.default_rng(3).integers(0, model.config.vocab_size, 6)]
    got = lm.generate_ids(prompt, max_new_tokens=8)
    ids = list(prompt)
    for _ in range(len(got)):
        ids.append(int(hf_logits(model, ids)[-1].argmax()))
    assert got == ids[len(prompt):]


def prenorm_hidden(model, ids: list[int]) -> torch.Tensor:
    """HF's hidden states [1, len(ids), d] before the final norm (hooked)."""
    captured = {}
    hook = model.model.norm.register_forward_pre_hook(
        lambda module, args: captured.setdefault("h", args[0]))
    with torch.no_grad():
        model(torch.tensor([ids]))
    hook.remove()
    return captured["h"]


def hf_mtp_head(model, mtp: dict, hidden: torch.Tensor, next_ids: list[int],
                positions: list[int]) -> np.ndarray:
    """The MTP head assembled from HF's modules (as vLLM's Qwen3.5 MTP) on rows of hidden
    states [1, n, d] and the tokens after them: hnorm / enorm (HF's 1 + w RMS norms), fc
    over concat(e, h), a full-attention Qwen3_5DecoderLayer at `positions` with a causal
    mask, the head norm and lm_head -> logits [n, V]."""
    from transformers.models.qwen3_5 import modeling_qwen3_5 as q

    c = model.config

    def norm(name):
        module = q.Qwen3_5RMSNorm(c.hidden_size, eps=c.rms_norm_eps)
        module.weight.data.copy_(mtp[name])
        return module

    layer = q.Qwen3_5DecoderLayer(c, layer_idx=c.layer_types.index("full_attention")).eval()
    layer.load_state_dict({k.removeprefix("mtp.layers.0."): v for k, v in mtp.items()
                           if k.startswith("mtp.layers.0.")})
    n = len(next_ids)
    mask = torch.full((n, n), float("-inf")).triu(1)[None, None]
    with torch.no_grad():
        e = norm("mtp.pre_fc_norm_embedding.weight")(model.model.embed_tokens(
            torch.tensor([next_ids])))
        h = norm("mtp.pre_fc_norm_hidden.weight")(hidden)
        x = torch.cat([e, h], -1) @ mtp["mtp.fc.weight"].T
        position = torch.tensor([positions])
        x = layer(x, position_embeddings=model.model.rotary_emb(x, position),
                  attention_mask=mask, position_ids=position)
        x = x[0] if isinstance(x, tuple) else x
        return model.lm_head(norm("mtp.norm.weight")(x))[0].numpy()


def test_mtp_logits_match_hf_modules(lm, hf):
    """After prefill and after a step: the head on the last position's hidden state and
    next_id (at the position after it)."""
    model, mtp = hf
    ids = [int(i) for i in np.random.default_rng(4).integers(0, model.config.vocab_size, 7)]
    lm.reset()
    with pytest.raises(ArgumentError, match="call prefill first"):
        lm.mtp_logits(ids[0])
    lm.prefill(ids[:5])
    got = [lm.mtp_logits(ids[5])]
    lm.step(ids[5])
    got.append(lm.mtp_logits(ids[6]))
    want = [hf_mtp_head(model, mtp, prenorm_hidden(model, ids[:n])[:, -1:], [ids[n]], [n])[0]
            for n in (5, 6)]
    check(np.stack(got), np.stack(want), "mtp head")
    with pytest.raises(ArgumentError, match="next_id"):
        lm.mtp_logits(model.config.vocab_size)


def test_mtp_head_over_a_symbolic_length_matches_hf_modules(lm, hf):
    """The compiled head (one compile, S read at run time) on S rows of hidden states and
    the tokens after them, causal over the rows: the logits of row `last` at S = 6 and 3."""
    model, mtp = hf
    ids = [int(i) for i in np.random.default_rng(5).integers(0, model.config.vocab_size, 7)]
    hidden = prenorm_hidden(model, ids[:6])
    want = hf_mtp_head(model, mtp, hidden, ids[1:7], list(range(1, 7)))
    got, expected = [], []
    for s, last in ((6, 5), (6, 2), (3, 2), (3, 0), (1, 0)):
        cos, sin = lm.rope_rows(1, 1 + s)
        logits = lm.mtp.runner(h=hidden[:, :s].numpy(), ids=np.array([ids[1:1 + s]], np.int32),
                               cos=cos, sin=sin, last=np.array([last], np.int32))
        got.append(np.asarray(logits[0] if isinstance(logits, tuple) else logits)[0])
        expected.append(want[last])
    check(np.stack(got), np.stack(expected), "mtp head, symbolic S")


def test_a_q8_0_file_agrees_with_hf(hf, tmp_path):
    """Every matrix Q8_0 (the conv's stays F32, as llama.cpp keeps it): the SPEC's criterion
    against HF's f32 model, prefill and decode, and the MTP head (f32 copies of its weights)."""
    import gguf

    model, mtp = hf
    path = write_qwen35(tmp_path / "q8.gguf", model, mtp, quant=gguf.GGMLQuantizationType.Q8_0)
    lm = load_gguf(path, max_seq=16)
    ids = [int(i) for i in np.random.default_rng(6).integers(0, model.config.vocab_size, 12)]
    want = hf_logits(model, ids)
    for what, got in (("prefill", lm.logits(ids)),
                      ("decode", np.stack([lm.reset() or lm.prefill(ids[:4])]
                                          + [lm.step(t) for t in ids[4:]]))):
        kl, decisive, same = agreement(got, want[-len(got):])
        print(f"qwen35 Q8_0 {what}: KL {kl:.2e}, top-1 {same}/{decisive}")
        assert kl <= 0.01 and same == decisive > 0, (what, kl, same, decisive)
    got = lm.mtp_logits(7)
    kl, decisive, same = agreement(got[None], hf_mtp_head(
        model, mtp, prenorm_hidden(model, ids)[:, -1:], [7], [len(ids)]))
    print(f"qwen35 Q8_0 mtp head: KL {kl:.2e}, top-1 {same}/{decisive}")
    assert kl <= 0.01 and same == decisive, (kl, same, decisive)


def test_a_file_without_nextn_has_no_mtp_logits(hf, tmp_path):
    model, _ = hf
    lm = load_gguf(write_qwen35(tmp_path / "no-mtp.gguf", model), engine="reference")
    assert (lm.config.n_layer, lm.config.n_mtp) == (4, 0)
    lm.prefill([1, 2, 3])
    with pytest.raises(ModelError, match="no multi-token-prediction layer"):
        lm.mtp_logits(4)


@pytest.mark.parametrize("drop", ["blk.1.ssm_a", "blk.4.nextn.eh_proj.weight"])
def test_missing_tensor_is_a_model_error(hf, tmp_path, drop):
    model, mtp = hf
    path = write_qwen35(tmp_path / "bad.gguf", model, mtp, drop=drop)
    with pytest.raises(ModelError, match=f"missing tensor '{drop}'"):
        load_gguf(path, engine="reference")


def test_bad_ssm_metadata_is_a_model_error(hf, tmp_path):
    model, _ = hf
    path = write_qwen35(tmp_path / "bad.gguf", model, extra={"qwen35.ssm.state_size": 8})
    with pytest.raises(ModelError, match="the gated delta net needs them equal"):
        load_gguf(path, engine="reference")


CONVERT = """
import sys
sys.path[:0] = [{src!r}, {src!r} + "/gguf-py"]
import conversion.qwen as qwen
def set_vocab(self):  # the converter's tokenizer check refuses a made-up vocabulary
    self.gguf_writer.add_tokenizer_model("gpt2")
import convert_hf_to_gguf as convert
qwen.Qwen3_5TextModel.set_vocab = set_vocab
sys.argv = ["convert", {hf!r}, "--outfile", {out!r}, "--outtype", "f32"]
convert.main()
"""


@pytest.mark.skipif(not (LLAMA_CPP / "convert_hf_to_gguf.py").exists(),
                    reason="llama.cpp sources not at hand (RLX_LLAMA_CPP_SRC)")
def test_the_writer_matches_llama_cpps_converter(hf, tmp_path):
    """llama.cpp's converter on the saved HF model (+ mtp.* weights): the same tensor
    names, shapes and values as tests/gguf_qwen35.py writes, and the same metadata."""
    import gguf
    from safetensors.torch import load_file, save_file

    model, mtp = hf
    model.save_pretrained(tmp_path / "hf")
    weights = tmp_path / "hf" / "model.safetensors"
    save_file({**load_file(weights), **{k: v.contiguous() for k, v in mtp.items()}}, weights,
              metadata={"format": "pt"})
    out = tmp_path / "converted.gguf"
    script = CONVERT.format(src=str(LLAMA_CPP), hf=str(tmp_path / "hf"), out=str(out))
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True)
    reader = gguf.GGUFReader(out)
    converted = {t.name: np.asarray(t.data).reshape([int(d) for d in reversed(t.shape)])
                 for t in reader.tensors}
    mine = gguf_tensors(model, mtp)
    assert sorted(converted) == sorted(mine)
    for name, data in mine.items():
        np.testing.assert_allclose(converted[name], data, rtol=1e-6, atol=1e-7, err_msg=name)
    written = gguf.GGUFReader(write_qwen35(tmp_path / "mine.gguf", model, mtp))
    for key, field in reader.fields.items():
        if key.startswith("qwen35.") or key == "general.architecture":
            assert written.fields[key].contents() == field.contents(), key
