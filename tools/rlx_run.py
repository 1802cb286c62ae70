"""rlx-run: JIT-compile a module (at any stage) and run it on numpy data.

    rlx-run model.mlir --random --check --bench 20
    rlx-run model.mlir --inputs x.npz --params w.npz -o out.npz --threads 2
    rlx-run dynamic.mlir --random --dims S=7 --check

A module with symbolic dims (`tensor<?x64xf32>` with `rlx.dims = ["S", 64]`) compiles
once; `--dims S=7` gives the symbols' sizes for `--random` (arrays from `--inputs` bind
them by their shapes).

npz keys are argument names. `--params` are bound at compile time (as `jit(params=...)`:
weights lir-pack-weights marked packed are packed once), `--inputs` are passed at every
call. `--random` fills every argument not given with reproducible data valid for its
role (random params are bound at compile time too). `--check` compares with the numpy
reference executor and prints `max abs error: <x>` (NaN and ±inf must sit at the same
places in both; the error is over the finite values). `--bench N` prints timing over
N runs. `--profile [N]` prints the per-kernel profile of N calls (an instrumented build;
`--trace F` writes its Chrome trace), `--arena-svg F` the arena plan as a picture,
`--summary` op counts per stage, kernels, arena, threads and target.

The compile line `compiled NAME in T ms (arena A B, naive N B)` gives the planned
arena (`model.arena_bytes`: every intermediate buffer placed by lir-plan-arena, reusing
the bytes of dead ones) and `naive` (`model.naive_bytes`: the sum of every intermediate
buffer, as without reuse); inputs, params and outputs are the caller's and count in
neither.
"""

from __future__ import annotations

import argparse
import sys
import time
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rlx_mlir.core.abi import ROLE_PARAM
from rlx_mlir.core.errors import RlxError
from rlx_mlir.tools.exit_status import run_tool


def _count(minimum: int):
    """An argparse type: an int >= minimum (argparse reports anything else, exit 2)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}")
        return value

    return parse


def _dims(text: str) -> dict[str, int]:
    """`S=7,T=9` -> {"S": 7, "T": 9}."""
    sizes = {}
    for entry in filter(None, (e.strip() for e in text.split(","))):
        name, _, value = entry.partition("=")
        if not name.strip().isidentifier() or not value.strip().isdigit() or int(value) < 1:
            raise argparse.ArgumentTypeError(f"expected SYMBOL=SIZE with a size >= 1, got {entry!r}")
        sizes[name.strip()] = int(value)
    return sizes


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlx-run", description=__doc__.splitlines()[0],
        epilog="The compile line prints the planned arena and, as naive, the sum of every "
               "intermediate buffer without reuse (model.arena_bytes, model.naive_bytes).")
    parser.add_argument("file", help="module text (.mlir) at the hir, mir, lir or llvm stage")
    parser.add_argument("--inputs", type=Path, help="npz file of inputs, keyed by argument name")
    parser.add_argument("--params", type=Path,
                        help="npz file of params, keyed by argument name (bound at compile time)")
    parser.add_argument("--random", action="store_true", help="fill arguments not given with random data")
    parser.add_argument("--seed", type=int, default=0, help="seed of --random (default 0)")
    parser.add_argument("--dims", type=_dims, action="append", default=[], metavar="S=N[,T=M]",
                        help="sizes of the symbols for --random (repeatable)")
    parser.add_argument("--check", action="store_true", help="compare with the reference executor")
    parser.add_argument("--bench", type=_count(1), metavar="N", help="time N runs (N >= 1)")
    parser.add_argument("--threads", type=_count(1), metavar="N",
                        help="threads a call may use (default: all cores, capped by RLX_NUM_THREADS)")
    parser.add_argument("-o", "--output", type=Path, help="write the outputs to this npz file")
    parser.add_argument("--time-passes", action="store_true", help="print the time of each pass and of LLVM")
    parser.add_argument("--profile", nargs="?", const=20, type=_count(1), metavar="N",
                        help="print the per-kernel profile of N calls (default 20) from an "
                             "instrumented build")
    parser.add_argument("--trace", type=Path, metavar="F",
                        help="with --profile: write the Chrome trace-event JSON (Perfetto) to F")
    parser.add_argument("--arena-svg", type=Path, metavar="F", help="write the arena plan as an SVG to F")
    parser.add_argument("--summary", action="store_true",
                        help="print op counts per stage, kernels, arena, threads and target")
    parser.add_argument("--tolerance", type=float, default=1e-4,
                        help="--check fails (exit 1) when the max abs error exceeds this times "
                             "max(1, largest finite |reference value|) (default 1e-4)")
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
    from rlx_mlir.binding import Signature
    from rlx_mlir.core.abi import entry_function, name_arguments
    from rlx_mlir.ir import module_text
    from rlx_mlir.pipeline import stage_of
    from rlx_mlir.random_inputs import random_arguments

    module = _read_module(args.file)
    name_arguments(module)  # as compile_mlir does: defaults, or a diagnostic before compiling
    if args.check and stage_of(module) == "llvm":
        raise RlxError("--check needs a module at the hir, mir or lir stage (llvm has no reference)")
    signature = Signature.of(entry_function(module))
    given = {**_load_npz(args.inputs), **_load_npz(args.params)}
    wanted = [a for a in signature.callable_args if a.name not in given]
    if wanted and args.random:
        dims = {name: size for entry in args.dims for name, size in entry.items()}
        given.update(random_arguments(module, wanted, args.seed, dims))
    # Every param with a value is bound at compile time (packed if lir-pack-weights says
    # so); the rest goes to the call, which reports missing and unknown names.
    param_names = {a.name for a in signature.args if a.role == ROLE_PARAM}
    params = {name: value for name, value in given.items() if name in param_names}
    call_args = {name: value for name, value in given.items() if name not in param_names}
    start = time.perf_counter()
    # with the ops' locations: the profile's origins are the user's scope names
    model = rlx.compile_mlir(module_text(module, debuginfo=True), params, threads=args.threads,
                             time_passes=args.time_passes)
    print(f"compiled {model.signature.name} in {(time.perf_counter() - start) * 1e3:.1f} ms "
          f"(arena {model.arena_bytes} B, naive {model.naive_bytes} B)")
    outputs = model(**call_args)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    for spec, value in zip(model.outputs, outputs, strict=True):
        print(f"{spec.name}: {spec.dtype}{list(value.shape)} mean {value.mean():.6g} "
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
        status = _check(model.outputs, outputs, expected, args.tolerance)
    if args.bench:
        _bench(model, call_args, args.bench)
    _inspect(model, call_args, args)
    return status


def _inspect(model, call_args: dict[str, np.ndarray], args: argparse.Namespace) -> None:
    """--summary, --arena-svg, --profile and --trace."""
    if args.trace is not None and not args.profile:
        raise RlxError("--trace needs --profile")
    if args.summary:
        print(model.summary())
    if args.arena_svg is not None:
        model.arena_svg(args.arena_svg)
        print(f"arena plan written to {args.arena_svg}")
    if args.profile:
        profile = model.profile(repeat=args.profile, **call_args)
        print(profile.to_markdown())
        if args.trace is not None:
            profile.trace(args.trace)
            print(f"trace written to {args.trace} (open it in https://ui.perfetto.dev)")


def _read_module(path: str):
    """Parse and verify the module in `path`: errors carry `path:line:col`."""
    from rlx_mlir.ir import EMPTY_INPUT, is_empty_text, parse_module

    try:
        text = Path(path).read_text()
    except OSError as err:
        raise RlxError(f"cannot read {path!r}: {err.strerror}") from err
    except UnicodeDecodeError as err:
        raise RlxError(f"cannot read {path!r}: not UTF-8 text ({err.reason})") from err
    if is_empty_text(text):
        raise RlxError(f"{path}: {EMPTY_INPUT} (no module to run)")
    try:
        return parse_module(text, path)
    except Exception as err:  # xDSL's ParseError / VerifyException carry the location
        raise RlxError(f"the module does not parse or verify:\n{err}") from err


def _check(specs, outputs, expected, tolerance: float) -> int:
    """Print the max abs error over the finite values; 1 when NaN or ±inf positions
    differ or the error exceeds the tolerance (relative to the largest finite value)."""
    status = 0
    error, scale = 0.0, 1.0
    for spec, got, want in zip(specs, outputs, expected, strict=True):
        got, want = got.astype(np.float64), np.asarray(want, dtype=np.float64)
        mismatch = _special_mismatch(got, want)
        if mismatch is not None:
            print(f"rlx-run: error: {spec.name}: {mismatch}", file=sys.stderr)
            status = 1
        finite = np.isfinite(got) & np.isfinite(want)
        if finite.any():
            error = max(error, float(np.max(np.abs(got[finite] - want[finite]))))
            scale = max(scale, float(np.max(np.abs(want[finite]))))
    print(f"max abs error: {error:.3g} (largest reference magnitude {scale:.3g})")
    if not error <= tolerance * scale:
        print(f"rlx-run: error: max abs error {error:.3g} exceeds the tolerance "
              f"{tolerance:g} x {scale:.3g}", file=sys.stderr)
        status = 1
    return status


def _special_mismatch(got: np.ndarray, want: np.ndarray) -> str | None:
    """Where NaN or ±inf differ between output and reference (the first place), or None."""
    special = ~np.isfinite(got) | ~np.isfinite(want)
    same = (np.isnan(got) & np.isnan(want)) | (got == want)
    bad = np.flatnonzero(special & ~same)
    if not bad.size:
        return None
    where = ", ".join(str(int(i)) for i in np.unravel_index(bad[0], got.shape))
    return (f"[{where}] is {got.flat[bad[0]]} but the reference has {want.flat[bad[0]]} "
            f"(NaN and inf must sit at the same places; {bad.size} such places)")


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
    run_tool("rlx-run", run)


if __name__ == "__main__":  # pragma: no cover
    main()
