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


@pytest.fixture(scope="module")
def q8_lm(hf, tmp_path_factory):
    """The tiny model's file with every matrix Q8_0 (the conv's stays F32, as llama.cpp
    keeps it), loaded with llama.cpp's q8 activations."""
    import gguf

    model, mtp = hf
    path = write_qwen35(tmp_path_factory.mktemp("qwen35-q8") / "q8.gguf", model, mtp,
                        quant=gguf.GGMLQuantizationType.Q8_0)
    return load_gguf(path, max_seq=16)


def test_a_q8_0_file_agrees_with_hf(hf, q8_lm):
    """The SPEC's criterion against HF's f32 model, prefill and decode, and the MTP head
    (its weights in the file's Q8_0)."""
    model, mtp = hf
    lm = q8_lm
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


# --- the MTP head keeps the file's quantization ---------------------------------------------

def f32_copy_head(path: Path, max_seq: int):
    """The MTP head as it was built before it kept the file's quantization, the ground
    truth: every matrix an f32 copy of the file's tensor, dequantized (the file's types
    read as F32, so the head binds `file.array`, the dequantized values)."""
    import dataclasses

    import gguf

    import rlx_mlir as rlx
    from rlx_mlir.models.architectures import build_decoder
    from rlx_mlir.models.gguf_file import read_gguf

    with read_gguf(path) as file:
        as_f32 = {name: dataclasses.replace(info, ggml_type=gguf.GGMLQuantizationType.F32)
                  for name, info in file.tensors.items()}
        head = build_decoder(file.check_model(), as_f32, max_seq=max_seq).mtp
        assert head is not None
        return rlx.jit(head.graph, params=head.params(file), max_dims={"S": max_seq})


def mtp_inputs(lm, next_id: int) -> dict[str, np.ndarray]:
    """What `lm.mtp_logits(next_id)` gives its head now (MtpHead.logits)."""
    cos, sin = lm.rope_rows(lm.position, lm.position + 1)
    return dict(h=np.asarray(lm.runner.state["mtp_hidden"], np.float32).reshape(1, 1, -1),
                ids=np.array([[next_id]], np.int32), cos=cos, sin=sin,
                last=np.zeros(1, np.int32))


def test_a_quantized_files_mtp_head_holds_no_f32_copy(hf, q8_lm):
    """Loaded from the Q8_0 file (q8 activations): every matrix of the compiled head, the
    vocabulary-sized embedding and output included, is a ui8 param of the file's rows (no
    f32 array of a matrix's size); `mtp_logits` agrees with the f32-copy head."""
    model, _ = hf
    c, lm = q8_lm.config, q8_lm
    params = [a for a in lm.mtp.runner.signature.args if a.role == "param"]
    matrices = [a for a in params if len(a.shape) == 2]
    assert len(matrices) == 10 and all(a.dtype == "ui8" for a in matrices), matrices
    assert {"token_embd_weight", "output_weight"} <= {a.name for a in matrices}
    assert all(len(a.shape) == 1 and a.shape[0] <= c.n_embd for a in params if a.dtype == "f32")
    ids = [int(i) for i in np.random.default_rng(8).integers(0, model.config.vocab_size, 6)]
    lm.reset()
    lm.prefill(ids)
    want = f32_copy_head(lm.path, lm.max_seq)(**mtp_inputs(lm, 5))[0]
    got = lm.mtp_logits(5)
    kl, decisive, same = agreement(got[None], want[None])
    error = relative_error(got, want)
    print(f"qwen35 Q8_0 mtp head (q8 activations) vs its f32 copy: rel {error:.2e}, KL {kl:.2e}")
    # q8 activations against f32 ones: the 8-bit rounding of each product's input
    assert error <= 0.03 and kl <= 1e-3 and same == decisive, (error, kl, same, decisive)


@pytest.mark.parametrize("quant", ["Q8_0", "Q4_0", "F16"])
def test_a_quantized_files_mtp_head_matches_its_f32_copy(hf, tmp_path, quant):
    """The head of a Q8_0, Q4_0 or F16 file with f32 activations (`exact_dequant`)
    against the f32-copy head on the same inputs: equal to float32 rounding; its params are
    the file's raw rows (RAW bindings, ui8 views), no f32 array of a matrix's size."""
    import gguf

    import rlx_mlir as rlx
    from rlx_mlir.models.arch_qwen35 import compile_mtp
    from rlx_mlir.models.architectures import RAW, build_decoder
    from rlx_mlir.models.gguf_file import read_gguf

    model, mtp = hf
    path = write_qwen35(tmp_path / f"{quant}.gguf", model, mtp,
                        quant=gguf.GGMLQuantizationType[quant])
    max_seq, s = 8, 3
    with read_gguf(path) as file:
        config = file.check_model()
        decoder = build_decoder(config, file.tensors, max_seq=max_seq, activations="f32")
        assert decoder.mtp is not None
        matrices = [b for b in decoder.mtp.weights.values() if len(file.tensors[b.tensor].shape) == 2]
        assert len(matrices) == 10 and all(b.form == RAW for b in matrices), matrices
        arrays = decoder.mtp.params(file)
        for name, binding in decoder.mtp.weights.items():  # views of the mapped file
            if binding.form == RAW:
                a = arrays[name]
                assert a.dtype == np.uint8 and not a.flags.owndata and not a.flags.writeable
        assert all(a.ndim == 1 and a.size <= config.n_embd for a in arrays.values()
                   if a.dtype == np.float32)
        head = compile_mtp(decoder, file, lambda graph, params: rlx.jit(
            graph.graph, params=params, max_dims={"S": max_seq}))
    rng = np.random.default_rng(9)
    angles = rng.uniform(0, 6, (s, decoder.n_rot // 2))
    inputs = dict(h=rng.standard_normal((1, s, config.n_embd)).astype(np.float32),
                  ids=rng.integers(0, config.n_vocab, (1, s)).astype(np.int32),
                  cos=np.cos(angles).astype(np.float32), sin=np.sin(angles).astype(np.float32))
    f32_copy = f32_copy_head(path, max_seq)
    for last in (s - 1, 0):
        got = head.runner(**inputs, last=np.array([last], np.int32))
        want = f32_copy(**inputs, last=np.array([last], np.int32))
        error = relative_error(got, want)
        print(f"qwen35 {quant} mtp head vs its f32 copy (f32 activations): rel {error:.2e}")
        assert error <= 1e-5, (quant, last, error)


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
