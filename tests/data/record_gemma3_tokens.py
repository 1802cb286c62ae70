"""Record llama.cpp's tokenization of Gemma 3's vocabulary into gemma3_tokens.json.

How the expected ids were produced (run again to refresh them):

1. Build llama.cpp's `llama-tokenize` from the llama-cpp-python 0.3.36 sources (see
   record_llama_cpp_tokens.py for the recipe).
2. `python tests/data/record_gemma3_tokens.py path/to/llama-tokenize`

Every text goes through `llama-tokenize -m gemma-3-270m-q4_k_m.gguf -f TEXT --no-escape --ids`
on the file `rlx.models.fetch("gemma3-270m")` returns (BOS as the file says: added;
special tokens parsed for the SPECIAL cases, `--no-parse-special` for the others).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from record_llama_cpp_tokens import llama_tokenize  # noqa: E402

from rlx_mlir.models import fetch  # noqa: E402

TEXTS = [
    "The capital of France is",
    "Hello, world!",
    " leading space",
    "  two leading spaces and trailing  ",
    "line one\nline two\n\nafter a blank line\n\n\n",
    "\ttab\tseparated\tvalues\n",
    "Numbers: 0 7 42 1234567890 3.14159 -2e10",
    "def f(x):\n    return x ** 2  # square\n",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "Emoji: 😀🚀👍🏽 and flags 🇫🇷",
    "Привет, мир! Как дела?",
    "日本語のテキストと中文混合",
    "مرحبا بالعالم",
    "Ünïcödé àccénts — “quotes” … ‘single’",
    "<start_of_turn>user\nnot special here<end_of_turn>",
    "https://example.com/path?query=1&other=two#frag",
    "ALL CAPS AND MiXeD CaSe wOrDs",
    "a" * 40 + " " + "ab" * 15,
    "\u200b zero width \u00a0 no-break space",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 math letters ∑∫√∞",
    "",
]
"""Plain texts (special=False)."""

SPECIAL = [
    "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n",
    "<bos><start_of_turn>user\nHi<end_of_turn>\n",
    "text then <eos> and <pad>",
]
"""Texts with control tokens (special=True)."""


def main() -> None:
    binary = sys.argv[1]
    model = fetch("gemma3-270m")
    cases = []
    with tempfile.TemporaryDirectory():
        for text in TEXTS:
            cases.append({"text": text, "special": False,
                          "ids": llama_tokenize(binary, model, text, False)})
        for text in SPECIAL:
            cases.append({"text": text, "special": True,
                          "ids": llama_tokenize(binary, model, text, True)})
    out = {"note": __doc__.strip(), "llama_cpp": "llama-cpp-python 0.3.36 (vendor/llama.cpp)",
           "cases": cases}
    (HERE / "gemma3_tokens.json").write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n")


if __name__ == "__main__":
    main()
