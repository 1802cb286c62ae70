"""rlx-generate: generate text with a GGUF language model.

    rlx-generate smollm2-135m-instruct -p "The capital of France is" -n 32
    rlx-generate model.gguf -p "Write a haiku about compilers." --chat --temp 0.7 --seed 1

The text streams to stdout as it is produced; then stderr gets `prompt: N tokens, X tok/s`
and `generation: M tokens, Y tok/s`. MODEL is a .gguf file or a known model's name
(fetched once into $RLX_CACHE_DIR/models). Bad input is a one-line error and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rlx_mlir.tools.exit_status import run_tool

EXIT_BAD_INPUT = 2


def _number(kind: type, minimum: float, maximum: float | None = None):
    """An argparse type: a `kind` in [minimum, maximum] (argparse reports anything else)."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or value < minimum or (maximum is not None and value > maximum):
            bound = f"in [{minimum}, {maximum}]" if maximum is not None else f">= {minimum}"
            raise argparse.ArgumentTypeError(f"expected a number {bound}, got {text!r}")
        return value

    return parse


class _OneLineErrors(argparse.ArgumentParser):
    """argparse whose usage errors are one line (no usage dump), exit status 2."""

    def error(self, message: str):
        print(f"{self.prog}: error: {message} (see --help)", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)


def _parser() -> argparse.ArgumentParser:
    parser = _OneLineErrors(prog="rlx-generate", description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a .gguf file or a known model name "
                                      "(e.g. smollm2-135m-instruct)")
    parser.add_argument("-p", "--prompt", required=True, help="the prompt (or the user "
                                                              "message with --chat)")
    parser.add_argument("-n", "--max-new-tokens", type=_number(int, 0), default=64,
                        help="tokens to generate at most (default 64)")
    parser.add_argument("--temp", type=_number(float, 0.0), default=0.0,
                        help="sampling temperature; 0 is greedy (default)")
    parser.add_argument("--top-k", type=int, default=40, help="keep the k most likely tokens "
                                                               "(0: all; default 40)")
    parser.add_argument("--top-p", type=_number(float, 1e-9, 1.0), default=0.95,
                        help="nucleus sampling mass (default 0.95)")
    parser.add_argument("--seed", type=_number(int, 0), default=None,
                        help="seed of the sampler (default: not reproducible)")
    parser.add_argument("--threads", type=_number(int, 1), default=None,
                        help="threads (default: all cores, capped by RLX_NUM_THREADS)")
    parser.add_argument("--max-seq", type=_number(int, 1), default=2048,
                        help="KV cache rows: prompt + generated tokens (default 2048)")
    parser.add_argument("--chat", action="store_true",
                        help="format the prompt as a user message with the file's chat template")
    return parser


def run(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from rlx_mlir.models import load_gguf

    model = load_gguf(args.model, max_seq=args.max_seq, threads=args.threads)

    def write(piece: str) -> None:
        sys.stdout.write(piece)
        sys.stdout.flush()

    options = dict(max_new_tokens=args.max_new_tokens, temperature=args.temp, top_k=args.top_k,
                   top_p=args.top_p, seed=args.seed, stream=write)
    if args.chat:
        model.chat([{"role": "user", "content": args.prompt}], **options)
    else:
        write(args.prompt)
        model.generate(args.prompt, **options)
    write("\n")
    stats = model.stats
    print(f"prompt: {stats.prompt_tokens} tokens, {stats.prompt_tokens_per_second:.1f} tok/s",
          file=sys.stderr)
    print(f"generation: {stats.generated_tokens} tokens, "
          f"{stats.generated_tokens_per_second:.1f} tok/s", file=sys.stderr)
    return 0


def main() -> None:
    run_tool("rlx-generate", run, EXIT_BAD_INPUT)


if __name__ == "__main__":  # pragma: no cover
    main()
