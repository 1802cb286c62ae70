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
