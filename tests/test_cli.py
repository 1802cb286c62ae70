"""Tests of the `rlx-opt` command line tool.

Most cases run the installed console script as a subprocess (the way lit and users run it);
a few call `rlx_mlir.tools.rlx_opt.run` in-process to check exit statuses cheaply. Only
upstream dialects (builtin, func, arith, test) are used here.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rlx_mlir.tools.rlx_opt import run

# A function with a common subexpression (two identical addi).
ARITH_FUNC = """\
func.func @f(%a: i32) -> i32 {
  %0 = arith.addi %a, %a : i32
  %1 = arith.addi %a, %a : i32
  %2 = arith.muli %0, %1 : i32
  func.return %2 : i32
}
"""

# A function whose addi of two constants canonicalizes to one constant.
FOLD_FUNC = """\
func.func @g() -> i32 {
  %c1 = arith.constant 1 : i32
  %c2 = arith.constant 2 : i32
  %s = arith.addi %c1, %c2 : i32
  func.return %s : i32
}
"""

# Parses (generic form) but fails the verifier: addi operands of different types.
MISMATCH = """\
%0 = "test.op"() : () -> i32
%1 = "test.op"() : () -> i64
%2 = "arith.addi"(%0, %1) : (i32, i64) -> i32
"""

LOCATION = re.compile(r"\.mlir:\d+:\d+")


def _find_rlx_opt() -> str:
    beside = Path(sys.executable).parent / "rlx-opt"
    if beside.is_file():
        return str(beside)
    found = shutil.which("rlx-opt")
    if found is None:
        pytest.fail("rlx-opt is not installed: pip install -e '.[test]'")
    return found


@pytest.fixture(scope="module")
def rlx_opt():
    """Run the installed rlx-opt with `args` (and `stdin` bytes); return the CompletedProcess."""
    exe = _find_rlx_opt()

    def call(*args: str, stdin: bytes | str = b"") -> subprocess.CompletedProcess[str]:
        data = stdin.encode() if isinstance(stdin, str) else stdin
        proc = subprocess.run(
            [exe, *args], input=data, capture_output=True, timeout=120, check=False
        )
        return subprocess.CompletedProcess(
            proc.args,
            proc.returncode,
            proc.stdout.decode("utf-8", "replace"),
            proc.stderr.decode("utf-8", "replace"),
        )

    return call


def _write(tmp_path: Path, text: str | bytes, name: str = "input.mlir") -> str:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return str(path)


def _assert_ok(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr


def _assert_diagnostic(proc: subprocess.CompletedProcess[str]) -> str:
    """Exit 1 with exactly one `rlx-opt: error:` diagnostic and no traceback; return stderr."""
    err = proc.stderr
    assert proc.returncode == 1, (proc.returncode, proc.stdout, err)
    assert "Traceback" not in err, err
    assert err.startswith("rlx-opt: error: "), err
    assert err.count("rlx-opt: error:") == 1, err
    return err


# --- input and output ------------------------------------------------------------------


def test_file_input(rlx_opt, tmp_path):
    proc = rlx_opt(_write(tmp_path, ARITH_FUNC))
    _assert_ok(proc)
    assert proc.stdout.startswith("builtin.module {")
    assert "func.func @f(%a: i32) -> i32 {" in proc.stdout
    assert proc.stdout.count("arith.addi") == 2  # no -p: nothing is rewritten
    assert proc.stderr == ""


@pytest.mark.parametrize("args", [["-"], []], ids=["dash", "no-argument"])
def test_stdin_input(rlx_opt, args):
    proc = rlx_opt(*args, stdin=ARITH_FUNC)
    _assert_ok(proc)
    assert "func.func @f" in proc.stdout
    assert proc.stdout.count("arith.addi") == 2


def test_output_file(rlx_opt, tmp_path):
    out = tmp_path / "out.mlir"
    proc = rlx_opt(_write(tmp_path, ARITH_FUNC), "-o", str(out))
    _assert_ok(proc)
    assert proc.stdout == ""
    text = out.read_text()
    assert text.startswith("builtin.module {")
    assert "arith.muli" in text


# --- passes and printing -------------------------------------------------------------------


def test_cse(rlx_opt, tmp_path):
    proc = rlx_opt(_write(tmp_path, ARITH_FUNC), "-p", "cse")
    _assert_ok(proc)
    assert proc.stdout.count("arith.addi") == 1
    assert re.search(r"arith\.muli (%\w+), \1 : i32", proc.stdout), proc.stdout


def test_canonicalize(rlx_opt, tmp_path):
    proc = rlx_opt(_write(tmp_path, FOLD_FUNC), "--passes", "canonicalize")
    _assert_ok(proc)
    assert "arith.addi" not in proc.stdout
    assert "arith.constant 3 : i32" in proc.stdout


def test_print_op_generic(rlx_opt, tmp_path):
    proc = rlx_opt(_write(tmp_path, FOLD_FUNC), "--print-op-generic")
    _assert_ok(proc)
    assert proc.stdout.startswith('"builtin.module"() ({')
    assert '"func.func"()' in proc.stdout
    assert '"arith.addi"(%c1, %c2)' in proc.stdout


def test_split_input_file(rlx_opt, tmp_path):
    text = '"test.op"() {n = 1 : i64} : () -> ()\n// -----\n"test.op"() {n = 2 : i64} : () -> ()\n'
    proc = rlx_opt(_write(tmp_path, text), "--split-input-file")
    _assert_ok(proc)
    chunks = proc.stdout.split("// -----\n")
    assert len(chunks) == 2, proc.stdout
    assert "n = 1" in chunks[0] and "n = 2" not in chunks[0]
    assert "n = 2" in chunks[1] and chunks[1].startswith("builtin.module {")


# --- errors ----------------------------------------------------------------------------


def test_unknown_pass(rlx_opt, tmp_path):
    proc = rlx_opt(_write(tmp_path, ARITH_FUNC), "-p", "no-such-pass")
    err = _assert_diagnostic(proc)
    assert "no-such-pass" in err
    assert "known passes:" in err
    assert "canonicalize" in err and "cse" in err
    assert proc.stdout == ""


# Each case: (input text or bytes, or None for a missing file; extra args;
#             regexes the stderr must match; whether a `file:line:col` location is required).
MALFORMED = {
    "unterminated-region": (
        'func.func @f() {\n  "test.op"() : () -> ()\n',
        [],
        [r"expected an operation or '}' closing the region, got end of input"],
        True,
    ),
    "unknown-op": (
        '"foo.bar"() : () -> ()\n',
        [],
        [r"foo\.bar is not registered"],
        True,
    ),
    "bad-type": (
        '"test.op"() : () -> tensor<3xfoo>\n',
        [],
        [r"Expected shape type"],
        True,
    ),
    "verifier-type-mismatch": (
        MISMATCH,
        [],
        [r"operand 'rhs'", r"expected from variable 'T', but got i64", r"arith\.addi"],
        False,
    ),
    "missing-file": (
        None,
        [],
        [r"cannot read or write '.*does-not-exist\.mlir': No such file or directory"],
        False,
    ),
    "bad-pass-option": (
        ARITH_FUNC,
        ["-p", "cse{nope=1}"],
        [r"invalid pass pipeline 'cse\{nope=1\}': Provided arguments \[\"nope\"\] not found"],
        False,
    ),
    "bad-pipeline-syntax": (
        ARITH_FUNC,
        ["-p", "cse{"],
        [r"invalid pass pipeline 'cse\{'", r"Expected argument name"],
        False,
    ),
    "empty-input": (
        "",
        [],
        [r"expected an operation, got end of input \(the input is empty\)"],
        True,
    ),
    "binary-garbage": (
        b"\x00\xff\xfe\x89PNG\r\n\x1a\n\x01\x02",
        [],
        [r"expected UTF-8 text, got byte 0xff"],
        True,
    ),
}


@pytest.mark.parametrize("case", list(MALFORMED), ids=list(MALFORMED))
def test_malformed_input(rlx_opt, tmp_path, case):
    text, args, patterns, located = MALFORMED[case]
    if text is None:
        path = str(tmp_path / "does-not-exist.mlir")
    else:
        path = _write(tmp_path, text)
    proc = rlx_opt(path, *args)
    err = _assert_diagnostic(proc)
    for pattern in patterns:
        assert re.search(pattern, err), (pattern, err)
    if located:
        assert LOCATION.search(err), err
    # One diagnostic, not a pile of them: the first line carries the message or location.
    assert err.splitlines()[0].strip() != "rlx-opt: error:", err


def test_verify_diagnostics(rlx_opt, tmp_path):
    proc = rlx_opt(_write(tmp_path, MISMATCH), "--verify-diagnostics")
    _assert_ok(proc)
    assert "attribute i32 expected from variable 'T', but got i64" in proc.stdout
    assert "Operation does not verify" in proc.stdout


def test_version(rlx_opt):
    proc = rlx_opt("--version")
    _assert_ok(proc)
    assert re.fullmatch(r"rlx-opt \(xDSL \d+\.\d+\.\d+\S*\)\n", proc.stdout), proc.stdout


def test_help(rlx_opt):
    proc = rlx_opt("--help")
    _assert_ok(proc)
    assert proc.stdout.startswith("usage: rlx-opt")
    for flag in ("--split-input-file", "--verify-diagnostics", "--print-op-generic", "-p"):
        assert flag in proc.stdout


# --- in-process `run` --------------------------------------------------------------------


def test_run_ok(tmp_path, capsys):
    assert run([_write(tmp_path, FOLD_FUNC), "-p", "canonicalize,cse"]) == 0
    out = capsys.readouterr()
    assert "arith.constant 3 : i32" in out.out
    assert out.err == ""


@pytest.mark.parametrize(
    "argv, text, status",
    [
        (["--version"], None, 0),
        (["--help"], None, 0),
        (["--no-such-flag"], None, 2),  # argparse usage error
        (["-p", "nope"], ARITH_FUNC, 1),
        (["-p", ",,"], ARITH_FUNC, 1),
        ([], '"test.op"() : () -> (\n', 1),
        ([], b"\xc3\x28", 1),
        ([], MISMATCH, 1),
        (["--verify-diagnostics"], MISMATCH, 0),
        (["--split-input-file"], '"test.op"() : () -> ()\n// -----\n"nope"\n', 1),
    ],
    ids=[
        "version",
        "help",
        "bad-flag",
        "unknown-pass",
        "bad-pipeline",
        "parse-error",
        "bad-utf8",
        "verifier",
        "verify-diagnostics",
        "split-second-chunk-bad",
    ],
)
def test_run_status(tmp_path, capsys, argv, text, status):
    if text is not None:
        argv = [_write(tmp_path, text), *argv]
    assert run(argv) == status
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if status == 1:
        assert err.startswith("rlx-opt: error: ")


def test_run_split_input_location(tmp_path, capsys):
    # The location of an error in a later chunk counts lines from the start of the file.
    text = '"test.op"() : () -> ()\n// -----\n"test.op"() : () -> ()\n\xff\n'.encode("latin-1")
    assert run([_write(tmp_path, text), "--split-input-file"]) == 1
    assert re.search(r"input\.mlir:4:1: expected UTF-8 text", capsys.readouterr().err)


# --- issue 14: help, did-you-mean, MLIR option commas, empty input, pass order ---------

MLP = Path(__file__).resolve().parent.parent / "examples" / "mlp.mlir"


def test_help_lists_rlx_passes_with_options_first(rlx_opt):
    proc = rlx_opt("--help")
    _assert_ok(proc)
    out = proc.stdout
    rlx_at, xdsl_at = out.index("rlx passes"), out.index("xDSL passes")
    assert rlx_at < out.index("\n  --split-input-file") < xdsl_at  # before the flags
    assert 'lir-plan-arena{alignment=64 strategy=greedy-by-size inplace=true max-dims=""}' in out
    assert "convert-lir-to-llvm{vector-width=0 " in out
    assert "x86-set-arch" not in out[:xdsl_at]  # the -p help no longer lists every xDSL pass


def test_unknown_pass_did_you_mean(rlx_opt, tmp_path):
    proc = rlx_opt(_write(tmp_path, ARITH_FUNC), "-p", "cse,lir-plan-arean")
    err = _assert_diagnostic(proc)
    assert "unknown pass 'lir-plan-arean': did you mean lir-plan-arena?" in err
    assert re.search(r"known passes: convert-hir-to-mir, .*rlx-lower \(rlx\); canonicalize, cse", err)
    assert "x86-set-arch" not in err  # not all ~140 passes


def test_mlir_comma_separated_pass_options(rlx_opt):
    lir = "convert-hir-to-mir,convert-mir-to-lir,lir-plan-arena"
    with_commas = rlx_opt(str(MLP), "-p", lir + "{alignment=128,strategy=naive}")
    with_spaces = rlx_opt(str(MLP), "-p", lir + "{alignment=128 strategy=naive}")
    _assert_ok(with_commas)
    _assert_ok(with_spaces)
    assert "alignment 128 strategy naive" in with_commas.stdout
    assert with_commas.stdout == with_spaces.stdout


def test_mlir_option_commas_keep_list_values():
    from rlx_mlir.tools.rlx_opt import mlir_option_commas

    assert mlir_option_commas("a{x=1,y=2},b{l=1,2,3,z=4},c") == "a{x=1 y=2},b{l=1,2,3 z=4},c"


def test_mlir_option_commas_keep_quoted_strings():
    from rlx_mlir.tools.rlx_opt import mlir_option_commas

    written = 'rlx-lower{max-dims="S=2,T=3",target="haswell:+avx2,-fma",strategy=naive}'
    assert mlir_option_commas(written) == (
        'rlx-lower{max-dims="S=2,T=3" target="haswell:+avx2,-fma" strategy=naive}')


@pytest.mark.parametrize("text", ["", "\n  \n", "// a comment only\n"], ids=["empty", "blank", "comment"])
def test_empty_input_says_so(rlx_opt, tmp_path, text):
    err = _assert_diagnostic(rlx_opt(_write(tmp_path, text)))
    assert "(the input is empty)" in err


@pytest.mark.parametrize("pipeline, message", [
    ("convert-mir-to-lir", r"convert-mir-to-lir: the module still has hir ops \(hir\.linear\); "
                           r"run convert-hir-to-mir first"),
    ("convert-hir-to-mir,convert-mir-to-lir,convert-lir-to-llvm",
     r"convert-lir-to-llvm: the module still has lir\.alloc ops; run lir-plan-arena first"),
], ids=["mir-to-lir-on-hir", "llvm-before-plan"])
def test_pass_out_of_order(rlx_opt, pipeline, message):
    err = _assert_diagnostic(rlx_opt(str(MLP), "-p", pipeline))
    assert re.search(message, err), err
    assert "does not verify" not in err


def test_bad_rlx_lower_option_lists_the_valid_values(rlx_opt):
    err = _assert_diagnostic(rlx_opt(str(MLP), "-p", "rlx-lower{strategy=best}"))
    assert "strategy: expected one of 'greedy-by-size', 'naive', got 'best'" in err
