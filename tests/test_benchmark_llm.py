"""benchmarks/llm.py's `--requantize`: the requantized file is made once by the binary
RLX_LLAMA_QUANTIZE names, into RLX_CACHE_DIR/models, and named after the model and type."""

from __future__ import annotations

import importlib.util
import stat
import sys
from pathlib import Path

import pytest

# By path: xdsl installs a top-level `benchmarks` package of its own, which an
# `import benchmarks` may find first.
_SPEC = importlib.util.spec_from_file_location(
    "rlx_benchmarks_llm", Path(__file__).resolve().parents[1] / "benchmarks" / "llm.py")
llm = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(llm)


def test_requantized_is_made_once_in_the_cache(tmp_path, monkeypatch):
    source = tmp_path / "Tiny-Model.Q4_1.gguf"
    source.write_bytes(b"GGUF tiny")
    log = tmp_path / "calls.txt"
    fake = tmp_path / "llama-quantize"
    fake.write_text(f"#!{sys.executable}\n"
                    "import shutil, sys\n"
                    f"open({str(log)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
                    "shutil.copy(sys.argv[2], sys.argv[3])\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("RLX_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("RLX_LLAMA_QUANTIZE", str(fake))
    made = llm.requantized(str(source), "Q4_K_M")
    assert made == str(tmp_path / "cache" / "models" / "Tiny-Model.Q4_K_M.gguf")
    assert open(made, "rb").read() == b"GGUF tiny"
    assert llm.requantized(str(source), "Q4_K_M") == made
    calls = log.read_text().splitlines()
    assert len(calls) == 1 and calls[0].startswith("--allow-requantize ")
    assert calls[0].endswith(" Q4_K_M")


def test_requantize_without_the_binary_says_what_to_set(tmp_path, monkeypatch):
    monkeypatch.setenv("RLX_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("RLX_LLAMA_QUANTIZE", raising=False)
    with pytest.raises(SystemExit, match="RLX_LLAMA_QUANTIZE"):
        llm.requantized(str(tmp_path / "m.Q4_1.gguf"), "Q6_K")


@pytest.mark.parametrize("tied", [True, False])
def test_decode_weight_bytes_counts_the_head_once(tmp_path, tied):
    """Every tensor a decode step reads: a tied token table is the head; an untied one is
    only looked up, so output.weight counts instead."""
    from gguf_models import write_tiny_model

    from rlx_mlir.models.gguf_file import read_gguf

    path = write_tiny_model(tmp_path / "tiny.gguf", tied=tied)
    with read_gguf(path) as gguf:
        sizes = {name: t.n_bytes for name, t in gguf.tensors.items()}
    assert ("output.weight" in sizes) is not tied
    want = sum(sizes.values()) - (0 if tied else sizes["token_embd.weight"])
    assert llm.decode_weight_bytes(str(path)) == want


def test_the_report_sets_decode_next_to_the_memory_bandwidth():
    """GB/s of each decode rate (tg128 × weight bytes) next to the machine's read GB/s."""
    meta = {"model": "m.gguf", "timestamp": "t", "cpu": "cpu", "cores": 2, "llama_bench": "lb",
            "weight_bytes": 100_000_000}
    ours = [{"threads": 2, "prefill": {16: 1.0, 64: 1.0, 256: 1.0}, "decode": {32: 1.0, 128: 250.0},
             "load_s": 1.0, "peak_rss_mb": 300.0, "read_gbps": 31.5}]
    theirs = [{"threads": 2, "prefill": {16: 1.0, 64: 1.0, 256: 1.0}, "decode": {32: 1.0, 128: 150.0}}]
    text = llm.markdown(meta, ours, theirs)
    assert "Decode reads 100.0 MB of weights a token" in text
    assert "| 2 | 31.5 | 25.0 | 15.0 |" in text


def test_read_bandwidth_is_a_rate():
    """GB/s of a real read: positive and finite (an 8 MB buffer, two threads)."""
    assert 0.1 < llm.read_bandwidth(2, megabytes=8, repeat=1) < 10_000
