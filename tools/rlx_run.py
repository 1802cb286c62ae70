"""rlx-run: JIT-compile a module (at any stage) and run it on numpy data.

    rlx-run model.mlir --random --check --bench 20
    rlx-run model.mlir --inputs x.npz --params w.npz -o out.npz

npz keys are argument names. `--random` fills every argument not given with
reproducible data valid for its role; `--check` compares with the numpy reference
executor and prints `max abs error: <x>`; `--bench N` prints timing over N runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rlx_mlir.core.errors import RlxError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlx-run", description=__doc__.splitlines()[0])
    parser.add_argument("file", help="module text (.mlir) at the hir, mir, lir or llvm stage")
    parser.add_argument("--inputs", type=Path, help="npz file of inputs, keyed by argument name")
    parser.add_argument("--params", type=Path, help="npz file of params, keyed by argument name")
    parser.add_argument("--random", action="store_true", help="fill arguments not given with random data")
    parser.add_argument("--seed", type=int, default=0, help="seed of --random (default 0)")
    parser.add_argument("--check", action="store_true", help="compare with the reference executor")
    parser.add_argument("--bench", type=int, metavar="N", default=0, help="time N runs")
    parser.add_argument("-o", "--output", type=Path, help="write the outputs to this npz file")
    parser.add_argument("--time-passes", action="store_true", help="print the time of each pass and of LLVM")
    parser.add_argument("--tolerance", type=float, default=1e-4,
                        help="--check fails (exit 1) when the max abs error exceeds this times "
                             "max(1, largest |reference value|) (default 1e-4)")
    return parser


def _load_npz(path: Path | None) -> dict[str, np.ndarray]:
    if path is None:
        return {}
    try:
        data = np.load(path)
        if not isinstance(data, np.lib.npyio.NpzFile):  # a .npy file loads as one array
            raise ValueError("not an npz archive (write it with numpy.savez)")
        with data:
            return {key: data[key] for key in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise RlxError(f"cannot read npz file {str(path)!r}: {err}") from err


def run(argv: Sequence[str] | None = None) -> int:
    """Run rlx-run on `argv`; return the exit status."""
    args = _parser().parse_args(argv)
    import rlx_mlir as rlx
    from rlx_mlir.ir import parse_module
    from rlx_mlir.pipeline import stage_of
    from rlx_mlir.random_inputs import random_arguments

    try:
        text = Path(args.file).read_text()
    except OSError as err:
        raise RlxError(f"cannot read {args.file!r}: {err.strerror}") from err
    except UnicodeDecodeError as err:
        raise RlxError(f"cannot read {args.file!r}: not UTF-8 text ({err.reason})") from err
    start = time.perf_counter()
    model = rlx.compile_mlir(text, time_passes=args.time_passes)
    print(f"compiled {model.signature.name} in {(time.perf_counter() - start) * 1e3:.1f} ms "
          f"(arena {model.arena_bytes} B, naive {model.naive_bytes} B)")
    # compile_mlir parsed the text already, so this cannot fail.
    module = parse_module(text) if args.check or args.random else None
    if args.check and stage_of(module) == "llvm":
        raise RlxError("--check needs a module at the hir, mir or lir stage (llvm has no reference)")
    given = {**_load_npz(args.inputs), **_load_npz(args.params)}
    wanted = [a for a in model.signature.callable_args if a.name not in given]
    if wanted and args.random:
        given.update(random_arguments(module, wanted, args.seed))
    outputs = model(**given)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    for spec, value in zip(model.outputs, outputs, strict=True):
        print(f"{spec.name}: {spec.dtype}{list(spec.shape)} mean {value.mean():.6g} "
              f"std {value.std():.6g}")
    if args.output is not None:
        try:
            np.savez(args.output, **{spec.name: v for spec, v in zip(model.outputs, outputs, strict=True)})
        except OSError as err:
            raise RlxError(f"cannot write {str(args.output)!r}: {err.strerror}") from err
    status = 0
    if args.check:
        expected = rlx.reference(module)(**given)
        expected = expected if isinstance(expected, tuple) else (expected,)
        error = max(float(np.max(np.abs(o.astype(np.float64) - e))) for o, e in zip(outputs, expected, strict=True))
        scale = max(1.0, *(float(np.max(np.abs(e))) for e in expected))
        print(f"max abs error: {error:.3g} (largest reference magnitude {scale:.3g})")
        if not error <= args.tolerance * scale:
            print(f"rlx-run: error: max abs error {error:.3g} exceeds the tolerance "
                  f"{args.tolerance:g} x {scale:.3g}", file=sys.stderr)
            status = 1
    if args.bench > 0:
        _bench(model, given, args.bench)
    return status


def _bench(model, arrays: dict[str, np.ndarray], runs: int) -> None:
    model(**arrays)  # warm-up
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        model(**arrays)
        times.append(time.perf_counter() - start)
    times.sort()
    print(f"bench: {runs} runs, median {times[len(times) // 2] * 1e3:.3f} ms, "
          f"min {times[0] * 1e3:.3f} ms")


def main() -> None:
    try:
        try:
            status = run()
        except RlxError as err:
            print(f"rlx-run: error: {err}", file=sys.stderr)
            status = 1
        sys.stdout.flush()  # a closed pipe (`| head`) shows here, not at interpreter exit
    except BrokenPipeError:
        # The reader went away: send the rest of the output nowhere and stop quietly.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        status = 1
    sys.exit(status)


if __name__ == "__main__":  # pragma: no cover
    main()
