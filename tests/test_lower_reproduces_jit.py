"""`rlx-lower` reproduces a `jit` build: `model.options.pipeline()` writes every pipeline
option (arena, vector width, bound params, max-dims, profile, target, fusion policy) as
`rlx-lower{...}`, and `rlx-opt -p` with it on `model.mlir("hir")` prints exactly
`model.mlir("llvm")`. The target is an option resolved by the driver (RLX_TARGET_CPU or
the host), never read by a pass: convert-lir-to-llvm takes its `target` option, else the
module's `rlx.target`, else the generic x86-64.
"""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from examples_loader import load_example
from test_jit_dequant import blocks
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.printer import Printer

import rlx_mlir as rlx
from rlx_mlir.core.errors import OptionError
from rlx_mlir.core.target import GENERIC_TARGET, TARGET_ATTR, TARGET_ENV
from rlx_mlir.ir import make_context, parse_module
from rlx_mlir.pipeline import PipelineOptions, lower, make_pass
from rlx_mlir.tools.rlx_opt import run

RNG = np.random.default_rng(18)


def _rlx_opt(tmp_path: Path, text: str, *args: str) -> tuple[int, str, str]:
    """rlx-opt run in-process on `text`: (status, stdout, stderr)."""
    path = tmp_path / "input.mlir"
    path.write_text(text)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = run([str(path), *args])
    return status, out.getvalue(), err.getvalue()


def _text(module: ModuleOp) -> str:
    out = io.StringIO()
    Printer(stream=out).print_op(module)
    return out.getvalue()


def _lowered_by_rlx_opt(tmp_path: Path, hir: str, options: PipelineOptions) -> str:
    status, out, err = _rlx_opt(tmp_path, hir, "-p", options.pipeline())
    assert status == 0, err
    return out.rstrip("\n")  # the driver ends its output with a newline


def _assert_reproduced(tmp_path: Path, model) -> None:
    options = model.options
    assert options.target, "the driver resolves the target into the options"
    assert PipelineOptions.from_pipeline(options.pipeline()) == options
    assert _lowered_by_rlx_opt(tmp_path, model.mlir("hir"), options) == model.mlir("llvm").rstrip("\n")


def _mlp():
    return load_example("mlp").build_mlp(), {}


def _symbolic():
    g = rlx.Graph("rows")
    x = g.input("x", ("S", 24))
    gamma = g.param("gamma", (24,))
    w = g.param("w", (24, 40))
    g.output(g.softmax(g.matmul(g.rms_norm(g.silu(x), gamma), w), axis=-1))
    return g, {"max_dims": {"S": 96}}


def _dequant():
    w = np.ascontiguousarray(blocks("q8_0", 40, 96))
    g = rlx.Graph("gemv")
    x = g.input("x", (3, 96))
    weight = g.param("w", w.shape, "ui8")
    g.output(g.dequant_matmul(x, weight, "q8_0"),
             g.dequant_matmul(x, weight, "q8_0", activations="q8"))
    return g, {"params": {"w": w}}


def _packed():
    g = rlx.Graph("ffn")
    x = g.input("x", (2, 5, 48))
    w, v = g.param("w", (48, 70)), g.param("v", (70, 150))
    g.output(g.matmul(g.gelu(g.matmul(x, w)), v))
    params = {"w": RNG.standard_normal((48, 70)).astype(np.float32),
              "v": RNG.standard_normal((70, 150)).astype(np.float32)}
    return g, {"params": params, "alignment": 128, "strategy": "naive"}


def _no_fusion():
    return load_example("mlp").build_mlp(), {"fusion": rlx.FusionPolicy.none()}


GRAPHS = {"mlp": _mlp, "symbolic": _symbolic, "dequant": _dequant, "packed": _packed,
          "no-fusion": _no_fusion}


@pytest.mark.parametrize("name", GRAPHS)
def test_rlx_lower_reproduces_jit(tmp_path, name):
    graph, kwargs = GRAPHS[name]()
    model = rlx.jit(graph, threads=1, **kwargs)
    if name == "symbolic":
        assert model.options.max_dims == "S=96"
    if name == "packed":
        assert model.options.packed_params == ("v", "w")
        assert "packed_rhs" in model.mlir("lir")
    if name == "no-fusion":
        assert "matmul_epilogue=false" in model.options.pipeline()
        assert "fused" not in model.mlir("mir")
    _assert_reproduced(tmp_path, model)


def test_rlx_lower_reproduces_the_profiled_build(tmp_path):
    graph, kwargs = _dequant()
    model = rlx.jit(graph, threads=1, **kwargs)
    _assert_reproduced(tmp_path, model)
    # The instrumented build `model.profile` compiles: the same options, profile=True.
    profiled = replace(model.options, profile=True)
    hir = model.mlir("hir")
    want = lower(parse_module(hir), "llvm", profiled, ctx=make_context())
    assert _lowered_by_rlx_opt(tmp_path, hir, profiled) == _text(want).rstrip("\n")


def test_rlx_lower_reproduces_a_build_for_rlx_target_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv(TARGET_ENV, "haswell")
    graph, kwargs = _dequant()
    model = rlx.jit(graph, threads=1, **kwargs)
    assert model.options.target == "haswell"
    llvm = model.mlir("llvm")
    assert "vector<8xf32>" in llvm and "vector<16xf32>" not in llvm
    assert f'{TARGET_ATTR} = "haswell"' in llvm
    _assert_reproduced(tmp_path, model)  # rlx-opt records haswell too: the option wins anyway
    monkeypatch.delenv(TARGET_ENV)
    _assert_reproduced(tmp_path, model)  # and without the variable, on any host


def _lir_module() -> str:
    graph, _ = _mlp()
    module = graph.to_module()
    lower(module, "lir", PipelineOptions(), ctx=make_context())
    return _text(module)


def test_convert_lir_to_llvm_reads_no_host(monkeypatch):
    """Option, else `rlx.target`, else the generic x86-64 (4 lanes), whatever the host or
    RLX_TARGET_CPU say."""
    lir_text = _lir_module()

    def lowered(attribute: str = "", **options) -> str:
        module = parse_module(lir_text)
        if attribute:
            module.attributes[TARGET_ATTR] = StringAttr(attribute)
        make_pass("convert-lir-to-llvm", PipelineOptions(**options)).apply(make_context(), module)
        return _text(module)

    generic = lowered()
    assert "vector<4xf32>" in generic and f'{TARGET_ATTR} = "{GENERIC_TARGET}"' in generic
    monkeypatch.setenv(TARGET_ENV, "skylake-avx512")
    assert lowered() == generic
    from_attribute = lowered("haswell")
    assert "vector<8xf32>" in from_attribute and f'{TARGET_ATTR} = "haswell"' in from_attribute
    assert lowered("haswell", target="skylake-avx512") == lowered(target="skylake-avx512")
    assert "vector<16xf32>" in lowered(target="skylake-avx512")
    assert "vector<8xf32>" in lowered(target="skylake-avx512", vector_width=8)


@pytest.mark.parametrize("options, message", [
    (dict(target="pentium-9000"), "target: expected one of"),
    (dict(target="haswell:avx2"), "target: expected 'cpu' or 'cpu:+feature,-feature'"),
    (dict(vector_width=7), "vector_width: expected 0 (the target's), 4, 8 or 16, got 7"),
    (dict(profile=1), "profile: expected true or false"),
    (dict(packed_params=("w", "")), "params: expected a tuple of param names"),
])
def test_bad_options_say_what_was_expected(options, message):
    with pytest.raises(OptionError, match=re.escape(message)):
        PipelineOptions(**options)


@pytest.mark.parametrize("pipeline, message", [
    ('rlx-lower{target="pentium-9000"}', "target: expected one of"),
    ("rlx-lower{vector-width=7}", "vector_width: expected 0 (the target's), 4, 8 or 16, got 7"),
    ("rlx-lower{profile=maybe}", "Incompatible types: given ('maybe',), expected <class 'bool'>"),
    ('convert-lir-to-llvm{target="haswell:avx2"}', "target: expected 'cpu' or"),
])
def test_bad_rlx_lower_option_is_a_one_line_error(tmp_path, pipeline, message):
    exe = Path(sys.executable).parent / "rlx-opt"
    path = tmp_path / "mlp.mlir"
    path.write_text(_mlp()[0].to_mlir())
    proc = subprocess.run([str(exe), str(path), "-p", pipeline], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 1, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("rlx-opt: error: ") and message in proc.stderr, proc.stderr
    assert len(proc.stderr.splitlines()) == 1, proc.stderr


def test_rlx_opt_records_the_target(tmp_path, monkeypatch):
    """`--target-cpu`, else RLX_TARGET_CPU, is recorded on the module as `rlx.target` (the
    passes read it unless given the option); with neither, nothing is recorded."""
    lir_text = _lir_module()
    monkeypatch.delenv(TARGET_ENV, raising=False)
    status, out, err = _rlx_opt(tmp_path, lir_text, "-p", "convert-lir-to-llvm")
    assert status == 0, err
    assert f'{TARGET_ATTR} = "{GENERIC_TARGET}"' in out and "vector<4xf32>" in out
    status, out, err = _rlx_opt(tmp_path, lir_text, "--target-cpu", "haswell", "-p", "convert-lir-to-llvm")
    assert status == 0, err
    assert f'{TARGET_ATTR} = "haswell"' in out and "vector<8xf32>" in out
    monkeypatch.setenv(TARGET_ENV, "skylake-avx512")
    status, out, err = _rlx_opt(tmp_path, lir_text, "-p", "convert-lir-to-llvm")
    assert status == 0, err
    assert f'{TARGET_ATTR} = "skylake-avx512"' in out and "vector<16xf32>" in out
    status, out, err = _rlx_opt(tmp_path, lir_text, "-p", 'convert-lir-to-llvm{target="haswell"}')
    assert status == 0, err
    assert f'{TARGET_ATTR} = "haswell"' in out  # the option wins over the recorded target
    status, out, err = _rlx_opt(tmp_path, lir_text, "--target-cpu", "pentium-9000")
    assert status == 1 and err.startswith("rlx-opt: error: --target-cpu: expected one of"), err
