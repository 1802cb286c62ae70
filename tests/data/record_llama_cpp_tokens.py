"""Record llama.cpp's tokenization of tricky strings into smollm2_tokens.json.

How the expected ids were produced (run again to refresh them):

1. Build llama.cpp's `llama-tokenize` from the sources vendored in the llama-cpp-python 0.3.36
   sdist (`pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36`, untar, in
   vendor/llama.cpp: `cmake -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF
   -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF && cmake --build build --target
   llama-tokenize`).
2. `python tests/data/record_llama_cpp_tokens.py path/to/llama-tokenize`

Each vocabulary is written to a vocab-only GGUF file (the SmolLM2 file's metadata without its
tensors) and every text goes through `llama-tokenize -f FILE --no-escape --ids` (BOS as the
vocabulary says; llama-tokenize parses special tokens by default, `--no-parse-special` gives
the special=False cases). Vocabularies (see VOCABULARIES in tests/test_tokenizer.py):
- "smollm2": SmolLM2-135M-Instruct's own (byte-level BPE, pre-tokenizer "smollm");
- "smollm2-as-<pre>": the same tokens and merges with tokenizer.ggml.pre set to <pre>, which
  exercises llama.cpp's regexes for that pre-tokenizer on a realistic vocabulary;
- "spm-from-smollm2": a SentencePiece-style ("llama") vocabulary derived from SmolLM2's
  tokens (spm_metadata in tests/test_tokenizer.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import gguf
import numpy as np

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))

from test_tokenizer import RECORDED_TEXTS, SPECIAL_TEXTS, VOCABULARIES  # noqa: E402

from rlx_mlir.models import fetch, read_gguf  # noqa: E402


def write_vocab_only(metadata: dict, path: Path) -> None:
    writer = gguf.GGUFWriter(path, metadata["general.architecture"])
    for key, value in metadata.items():
        if key in ("general.architecture", "llama.vocab_size") or key.startswith("GGUF."):
            continue
        if isinstance(value, np.ndarray):
            value = value.tolist()
        if isinstance(value, list) and value and isinstance(value[0], float):
            writer.add_array(key, value)
        elif key == "tokenizer.ggml.token_type":
            writer.add_token_types(value)
        elif isinstance(value, bool):
            writer.add_bool(key, value)
        elif isinstance(value, int):
            writer.add_uint32(key, value)
        elif isinstance(value, float):
            writer.add_float32(key, value)
        else:
            writer.add_key_value(key, value, gguf.GGUFValueType.get_type(value),
                                 sub_type=gguf.GGUFValueType.STRING
                                 if isinstance(value, list) else None)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()


def llama_tokenize(binary: str, model: Path, text: str, special: bool) -> list[int]:
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as handle:
        handle.write(text.encode())
    command = [binary, "-m", str(model), "-f", handle.name, "--no-escape", "--ids",
               "--log-disable"]
    if not special:
        command.append("--no-parse-special")
    try:
        result = subprocess.run(command, capture_output=True, text=True, check=True)
    finally:
        os.unlink(handle.name)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    binary = sys.argv[1]
    with read_gguf(fetch("smollm2-135m-instruct")) as file:
        base = dict(file.metadata)
    cases = []
    with tempfile.TemporaryDirectory() as scratch:
        for name, make in VOCABULARIES.items():
            model = Path(scratch) / f"{name}.gguf"
            write_vocab_only(make(base), model)
            for text in RECORDED_TEXTS:
                cases.append({"vocab": name, "text": text, "special": False,
                              "ids": llama_tokenize(binary, model, text, False)})
            for text in SPECIAL_TEXTS:
                cases.append({"vocab": name, "text": text, "special": True,
                              "ids": llama_tokenize(binary, model, text, True)})
    out = {"note": __doc__.strip(), "llama_cpp": "llama-cpp-python 0.3.36 (vendor/llama.cpp)",
           "cases": cases}
    (HERE / "smollm2_tokens.json").write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n")
    print(f"recorded {len(cases)} cases")


if __name__ == "__main__":
    main()
