"""Tests of the `rlx-run` command line tool, run as the installed console script.

Every run uses one private `RLX_CACHE_DIR` for the whole module, so the small example
(`examples/mlp.mlir`) is compiled once and later runs load it from the disk cache. Errors
must end with `rlx-run: error: ...` on stderr and exit status 1, never a Python traceback.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import rlx_mlir as rlx
from rlx_mlir.binding import Signature
from rlx_mlir.core.abi import entry_function
from rlx_mlir.ir import parse_module
from rlx_mlir.random_inputs import random_arguments

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
MLP = EXAMPLES / "mlp.mlir"
LLAMA = EXAMPLES / "llama_block.mlir"
LIR_PIPELINE = "convert-hir-to-mir,convert-mir-to-lir,lir-plan-arena"

# Parses, fails the verifier (inner dimensions 8 vs 9).
BAD_MATMUL = """\
builtin.module {
  func.func @bad(%a: tensor<4x8xf32> {rlx.name = "a", rlx.role = "input"}, %b: tensor<9x3xf32> {rlx.name = "b", rlx.role = "input"}) -> tensor<4x3xf32> {
    %0 = mir.matmul %a, %b : (tensor<4x8xf32>, tensor<9x3xf32>) -> tensor<4x3xf32>
    func.return %0 : tensor<4x3xf32>
  }
}
"""

MAX_ERROR = re.compile(r"^max abs error: (\S+)", re.MULTILINE)
ARENA = re.compile(r"^compiled \w+ in [\d.]+ ms \(arena (\d+) B", re.MULTILINE)

Run = Callable[..., subprocess.CompletedProcess]


def _tool(name: str) -> str:
    beside = Path(sys.executable).parent / name
    if beside.is_file():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: pip install -e '.[test]'")
    return found


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("rlx-cache")


@pytest.fixture(scope="module")
def rlx_run(cache_dir: Path) -> Run:
    """Run the installed rlx-run with `args` in `cwd`; return the CompletedProcess (text)."""
    exe = _tool("rlx-run")

    def call(*args: str | Path, cwd: Path | None = None,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        environment = {**os.environ, "RLX_CACHE_DIR": str(cache_dir), **(env or {})}
        return subprocess.run([exe, *map(str, args)], cwd=cwd, env=environment,
                              capture_output=True, text=True, timeout=300, check=False)

    return call


@pytest.fixture(scope="module")
def mlp_arrays() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(inputs, params) of examples/mlp.mlir, keyed by argument name."""
    rng = np.random.default_rng(7)
    inputs = {"x": rng.standard_normal((4, 64)).astype(np.float32)}
    params = {
        "w1": (rng.standard_normal((64, 128)) / 8).astype(np.float32),
        "b1": rng.standard_normal(128).astype(np.float32),
        "w2": (rng.standard_normal((128, 10)) / 11).astype(np.float32),
        "b2": rng.standard_normal(10).astype(np.float32),
    }
    return inputs, params


@pytest.fixture(scope="module")
def mlp_npz(tmp_path_factory, mlp_arrays) -> tuple[Path, Path]:
    """(inputs.npz, params.npz) files of `mlp_arrays`."""
    folder = tmp_path_factory.mktemp("npz")
    inputs, params = mlp_arrays
    np.savez(folder / "inputs.npz", **inputs)
    np.savez(folder / "params.npz", **params)
    return folder / "inputs.npz", folder / "params.npz"


@pytest.fixture(scope="module")
def stage_files(tmp_path_factory) -> dict[str, Path]:
    """examples/mlp.mlir lowered by rlx-opt to the lir and the llvm stage."""
    folder = tmp_path_factory.mktemp("stages")
    files = {}
    for stage, pipeline in (("lir", LIR_PIPELINE), ("llvm", "rlx-lower")):
        proc = subprocess.run([_tool("rlx-opt"), str(MLP), "-p", pipeline],
                              capture_output=True, text=True, timeout=300, check=False)
        assert proc.returncode == 0, proc.stderr
        files[stage] = folder / f"mlp_{stage}.mlir"
        files[stage].write_text(proc.stdout)
    return files


def _ok(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "Traceback" not in proc.stderr
    return proc.stdout


def _error(proc: subprocess.CompletedProcess, message: str) -> None:
    """Exit 1 with `rlx-run: error: ...` matching `message` on stderr and no traceback."""
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 1, f"exit {proc.returncode}\nstderr:\n{proc.stderr}"
    assert re.search(r"rlx-run: error: .*" + message, proc.stderr, re.DOTALL), proc.stderr


def _max_error(stdout: str) -> float:
    found = MAX_ERROR.search(stdout)
    assert found is not None, stdout
    return float(found.group(1))


def _reference(path: Path, arrays: dict[str, np.ndarray]) -> np.ndarray:
    return rlx.reference(parse_module(path.read_text()))(**arrays)


# ----------------------------------------------------------------------------- runs


def test_llama_block_random_check_bench(rlx_run):
    out = _ok(rlx_run(LLAMA, "--random", "--check", "--bench", "3"))
    assert re.search(r"^compiled llama_block in [\d.]+ ms \(arena \d+ B, naive \d+ B\)$", out, re.MULTILINE)
    assert re.search(r"^out0: f32\[32, 512\] mean \S+ std \S+$", out, re.MULTILINE)
    assert _max_error(out) < 1e-3
    assert re.search(r"^bench: 3 runs, median [\d.]+ ms, min [\d.]+ ms$", out, re.MULTILINE), out


def test_mlp_inputs_params_and_output_npz(rlx_run, mlp_arrays, mlp_npz, tmp_path):
    inputs, params = mlp_npz
    _ok(rlx_run(MLP, "--inputs", inputs, "--params", params, "-o", "out.npz", cwd=tmp_path))
    with np.load(tmp_path / "out.npz") as data:
        assert data.files == ["out0"]
        got = data["out0"]
    assert got.shape == (4, 10) and got.dtype == np.float32
    expected = _reference(MLP, {**mlp_arrays[0], **mlp_arrays[1]})
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def _random_run(rlx_run, tmp_path: Path, name: str, *args: str | Path) -> np.ndarray:
    _ok(rlx_run(*args, "--random", "-o", name, cwd=tmp_path))
    with np.load(tmp_path / name) as data:
        return data["out0"]


def test_random_is_reproducible(rlx_run, tmp_path):
    first = _random_run(rlx_run, tmp_path, "a.npz", MLP, "--seed", "5")
    again = _random_run(rlx_run, tmp_path, "b.npz", MLP, "--seed", "5")
    other = _random_run(rlx_run, tmp_path, "c.npz", MLP, "--seed", "6")
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


def test_random_fills_only_the_arguments_not_given(rlx_run, mlp_arrays, mlp_npz, tmp_path):
    inputs, _ = mlp_npz
    got = _random_run(rlx_run, tmp_path, "out.npz", MLP, "--inputs", inputs, "--seed", "3")
    module = parse_module(MLP.read_text())
    params = [a for a in Signature.of(entry_function(module)).args if a.role == "param"]
    arrays = {**mlp_arrays[0], **random_arguments(module, params, 3)}
    np.testing.assert_allclose(got, _reference(MLP, arrays), rtol=1e-5, atol=1e-6)


def test_lir_stage_module_runs_and_checks(rlx_run, stage_files, tmp_path):
    hir = _random_run(rlx_run, tmp_path, "hir.npz", MLP)
    out = _ok(rlx_run(stage_files["lir"], "--random", "--check", "-o", "lir.npz", cwd=tmp_path))
    assert _max_error(out) < 1e-5
    with np.load(tmp_path / "lir.npz") as data:
        np.testing.assert_array_equal(data["out0"], hir)


def test_llvm_stage_module_runs(rlx_run, stage_files, mlp_arrays, mlp_npz, tmp_path):
    hir_arena = ARENA.search(_ok(rlx_run(MLP, "--random")))
    inputs, params = mlp_npz
    out = _ok(rlx_run(stage_files["llvm"], "--inputs", inputs, "--params", params, "-o", "out.npz",
                      cwd=tmp_path))
    llvm_arena = ARENA.search(out)
    assert hir_arena is not None and llvm_arena is not None
    assert llvm_arena.group(1) == hir_arena.group(1)  # the same planned arena
    with np.load(tmp_path / "out.npz") as data:
        expected = _reference(MLP, {**mlp_arrays[0], **mlp_arrays[1]})
        np.testing.assert_allclose(data["out0"], expected, rtol=1e-5, atol=1e-6)


def test_llvm_stage_module_runs_with_random(rlx_run, stage_files, tmp_path):
    hir = _random_run(rlx_run, tmp_path, "hir.npz", MLP)
    # The same random data; the hir run binds its params at compile time, so its matmuls
    # read packed weights (lir-pack-weights) and may round differently from the llvm
    # module lowered without packing.
    llvm = _random_run(rlx_run, tmp_path, "llvm.npz", stage_files["llvm"])
    np.testing.assert_allclose(llvm, hir, rtol=1e-5, atol=1e-6)


def test_check_on_an_llvm_stage_module_is_an_error(rlx_run, stage_files):
    proc = rlx_run(stage_files["llvm"], "--random", "--check")
    _error(proc, r"--check needs a module at the hir, mir or lir stage")


def test_time_passes_prints_each_pass(rlx_run):
    out = _ok(rlx_run(MLP, "--random", "--time-passes"))
    for name in ("convert-hir-to-mir", "mir-fuse", "convert-mir-to-lir", "lir-plan-arena",
                 "convert-lir-to-llvm", "llvm: O3", "llvm: codegen", "total"):
        assert re.search(rf"^{re.escape(name)}\s+\d+\.\d+", out, re.MULTILINE), (name, out)


@pytest.mark.parametrize("unbuffered", ["1", ""])
def test_closed_stdout_pipe_is_not_a_traceback(cache_dir, unbuffered):
    """`rlx-run ... | head -1`: the reader is gone before rlx-run prints."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = unbuffered
    env["RLX_CACHE_DIR"] = str(cache_dir)
    proc = subprocess.Popen([_tool("rlx-run"), str(MLP), "--random"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    proc.wait(timeout=300)
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    assert proc.returncode == 1


# ----------------------------------------------------------------------------- errors


def test_missing_module_file(rlx_run, tmp_path):
    _error(rlx_run(tmp_path / "nope.mlir"), r"cannot read .*nope\.mlir.*No such file")


def test_module_file_that_is_not_text(rlx_run, tmp_path):
    (tmp_path / "bin.mlir").write_bytes(b"\xff\xfe\x00\x81")
    _error(rlx_run(tmp_path / "bin.mlir"), "not UTF-8 text")


@pytest.mark.parametrize("text, message", [
    ("builtin.module { func.func @f( }", r"does not parse or verify.*:1:\d+"),
    (BAD_MATMUL, r"does not parse or verify.*matmul inner dimensions differ"),
    ("", r"bad\.mlir: the input is empty"),
    ("// only a comment\n\n", r"bad\.mlir: the input is empty"),
], ids=["syntax", "verifier", "empty", "comment-only"])
def test_malformed_module_text(rlx_run, tmp_path, text, message):
    (tmp_path / "bad.mlir").write_text(text)
    _error(rlx_run(tmp_path / "bad.mlir", "--random"), message)


def _write_npz(path: Path, kind: str) -> None:
    if kind == "garbage":
        path.write_bytes(b"this is not a zip archive\n")
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "truncated":
        np.savez(path, x=np.zeros((4, 64), np.float32))
        path.write_bytes(path.read_bytes()[:100])
    elif kind == "npy":
        with path.open("wb") as f:
            np.save(f, np.zeros((4, 64), np.float32))
    elif kind == "directory":
        path.mkdir()


@pytest.mark.parametrize("kind", ["garbage", "empty", "truncated", "npy", "directory", "missing"])
def test_unreadable_npz(rlx_run, tmp_path, kind):
    path = tmp_path / "in.npz"
    _write_npz(path, kind)
    _error(rlx_run(MLP, "--inputs", path, "--random"), r"cannot read npz file .*in\.npz")


def test_wrong_shaped_array(rlx_run, tmp_path):
    np.savez(tmp_path / "in.npz", x=np.zeros((3, 64), np.float32))
    _error(rlx_run(MLP, "--inputs", tmp_path / "in.npz", "--random"),
           r"input 'x' .*expected shape \[4, 64\], got \[3, 64\]")


def test_missing_argument_without_random(rlx_run, mlp_npz):
    inputs, _ = mlp_npz
    _error(rlx_run(MLP), r"missing argument\(s\): x, w1, b1, w2, b2")
    _error(rlx_run(MLP, "--inputs", inputs), r"missing argument\(s\): w1, b1, w2, b2$")


def test_unknown_argument_name_in_npz(rlx_run, tmp_path):
    np.savez(tmp_path / "p.npz", w3=np.zeros((2, 2), np.float32))
    _error(rlx_run(MLP, "--params", tmp_path / "p.npz", "--random"),
           r"unknown argument 'w3' \(arguments: x, w1, b1, w2, b2\)")


def test_unwritable_output(rlx_run, tmp_path):
    _error(rlx_run(MLP, "--random", "-o", tmp_path / "no" / "such" / "out.npz"), r"cannot write .*out\.npz")


def test_unknown_target_cpu(rlx_run):
    _error(rlx_run(MLP, "--random", env={"RLX_TARGET_CPU": "pentium-9000"}),
           "RLX_TARGET_CPU: expected one of")


# ----------------------------------------------------------------------------- issue 14

from unnamed_modules import UNNAMED, UNNAMED_LIR  # noqa: E402

# log of negatives is NaN and log(0) is -inf, in the compiled kernel and the reference.
LOG = """\
builtin.module {
  func.func @logs(%x: tensor<2x8xf32> {rlx.name = "x", rlx.role = "input"}) -> (tensor<2x8xf32> {rlx.name = "logx"}) {
    %0 = mir.log %x : tensor<2x8xf32>
    func.return %0 : tensor<2x8xf32>
  }
}
"""


def test_14_1_unnamed_arguments_run_with_default_names(rlx_run, tmp_path):
    (tmp_path / "unnamed.mlir").write_text(UNNAMED)
    out = _ok(rlx_run(tmp_path / "unnamed.mlir", "--random", "--check"))
    assert _max_error(out) < 1e-5
    np.savez(tmp_path / "in.npz", x=np.ones((4, 8), np.float32), arg1=np.ones((8, 3), np.float32))
    _ok(rlx_run(tmp_path / "unnamed.mlir", "--inputs", tmp_path / "in.npz", "-o", tmp_path / "o.npz"))
    with np.load(tmp_path / "o.npz") as data:
        np.testing.assert_allclose(data["out0"], np.full((4, 3), 8.0))


def test_14_1_unnamed_lir_arguments_are_a_diagnostic(rlx_run, tmp_path):
    (tmp_path / "unnamed_lir.mlir").write_text(UNNAMED_LIR)
    _error(rlx_run(tmp_path / "unnamed_lir.mlir", "--random"), r"@f: argument 0 has no rlx\.role")


def test_14_6_check_accepts_nan_and_inf_at_the_same_places(rlx_run, tmp_path):
    (tmp_path / "log.mlir").write_text(LOG)
    x = np.linspace(-2.0, 3.0, 16, dtype=np.float32).reshape(2, 8)
    x[0, 3] = 0.0
    np.savez(tmp_path / "x.npz", x=x)
    out = _ok(rlx_run(tmp_path / "log.mlir", "--inputs", tmp_path / "x.npz", "--check"))
    assert _max_error(out) < 1e-5
    assert re.search(r"^logx: f32\[2, 8\]", out, re.MULTILINE)  # named output (finding 13)


def test_14_6_check_reports_nan_at_other_places():
    from rlx_mlir.tools.rlx_run import _special_mismatch

    got = np.array([1.0, np.nan, -np.inf, 2.0])
    assert _special_mismatch(got, got.copy()) is None
    message = _special_mismatch(got, np.array([1.0, np.nan, np.inf, 2.0]))
    assert message is not None and message.startswith("[2] is -inf but the reference has inf")
    assert _special_mismatch(got, np.array([1.0, 0.5, -np.inf, 2.0])).startswith("[1] is nan")


def test_14_10_locations_name_the_file(rlx_run, tmp_path):
    (tmp_path / "broken.mlir").write_text("builtin.module {\n  func.func @f( }\n")
    _error(rlx_run(tmp_path / "broken.mlir"), r"broken\.mlir:2:\d+")
    proc = rlx_run(tmp_path / "broken.mlir")
    assert "<string>" not in proc.stderr


def _packed_mlp(tmp_path: Path) -> Path:
    proc = subprocess.run(
        [_tool("rlx-opt"), str(MLP), "-p",
         LIR_PIPELINE + ",lir-pack-weights{params=w1,w2}"],
        capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    assert 'rlx.layout = "packed_rhs"' in proc.stdout
    path = tmp_path / "mlp_packed.mlir"
    path.write_text(proc.stdout)
    return path


def test_14_11_params_are_bound_at_compile_time(rlx_run, mlp_arrays, mlp_npz, tmp_path):
    packed = _packed_mlp(tmp_path)
    inputs, params = mlp_npz
    _ok(rlx_run(packed, "--inputs", inputs, "--params", params, "-o", tmp_path / "o.npz"))
    with np.load(tmp_path / "o.npz") as data:
        expected = _reference(MLP, {**mlp_arrays[0], **mlp_arrays[1]})
        np.testing.assert_allclose(data["out0"], expected, rtol=1e-5, atol=1e-6)
    assert _max_error(_ok(rlx_run(packed, "--random", "--check"))) < 1e-5


def test_14_11_threads_option(rlx_run, tmp_path):
    out = _ok(rlx_run(LLAMA, "--random", "--threads", "2", "-o", tmp_path / "t2.npz"))
    _ok(rlx_run(LLAMA, "--random", "--threads", "1", "-o", tmp_path / "t1.npz"))
    assert "compiled llama_block" in out
    with np.load(tmp_path / "t1.npz") as one, np.load(tmp_path / "t2.npz") as two:
        np.testing.assert_allclose(one["out0"], two["out0"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("args, message", [
    (["--bench", "-3"], r"argument --bench: expected an integer >= 1, got '-3'"),
    (["--bench", "x"], r"argument --bench: expected an integer >= 1, got 'x'"),
    (["--threads", "0"], r"argument --threads: expected an integer >= 1, got '0'"),
], ids=["bench-negative", "bench-word", "threads-zero"])
def test_14_11_bad_counts_are_usage_errors(rlx_run, args, message):
    proc = rlx_run(MLP, "--random", *args)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert re.search(message, proc.stderr), proc.stderr


def test_14_14_help_documents_naive_bytes(rlx_run):
    out = _ok(rlx_run("--help"))
    assert "naive" in out and "without reuse" in out
