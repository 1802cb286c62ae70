"""lir-parallelize and the pipeline around it: the stages run through xDSL's PassPipeline
(timings and snapshots per stage), rlx-lower runs the same passes, a module lowered
without lir-parallelize is serial, and a parallelized module computes the same numbers."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects import llvm
from xdsl.utils.exceptions import PassFailedException

import rlx_mlir as rlx
from rlx_mlir.core.abi import PARALLEL, WORKER_SUFFIX
from rlx_mlir.dialects import lir
from rlx_mlir.ir import make_context, parse_module
from rlx_mlir.passes.lir_parallelize import PARALLEL_MIN_WORK, LirParallelizePass, estimate_work
from rlx_mlir.passes.pipeline_stages import STAGE_PASSES, make_pass, stage_plan
from rlx_mlir.pipeline import Timings, lower
from rlx_mlir.reference import run_module


def big_graph(rows: int = 512) -> rlx.Graph:
    g = rlx.Graph("big")
    x = g.input("x", (rows, 512))
    g.output(g.exp(x) * 2.0)
    return g


def test_lower_runs_every_pass_once_and_snapshots_every_stage():
    timings, stages = Timings(), []
    lower(big_graph().to_module(), "llvm", timings=timings,
          snapshot=lambda stage, module: stages.append(stage))
    assert stages == ["hir", "mir", "lir", "llvm"]
    assert [name for name, _ in timings.entries] == [
        name for stage in ("mir", "lir", "llvm") for name in STAGE_PASSES[stage]]
    assert all(seconds >= 0 for _, seconds in timings.entries)


def test_the_lir_stage_is_before_parallelize_and_llvm_has_the_worker():
    stages = {}
    lower(big_graph().to_module(), snapshot=lambda stage, m: stages.__setitem__(stage, m.clone()))
    assert not any(isinstance(op, lir.BarrierOp) for op in stages["lir"].walk())
    names = [op.sym_name.data for op in stages["llvm"].ops if isinstance(op, llvm.FuncOp)]
    assert "big" + WORKER_SUFFIX in names and "rlx_barrier" in names


def test_rlx_lower_runs_the_same_passes_as_lower():
    via_pass = big_graph().to_module()
    make_pass("rlx-lower").apply(make_context(), via_pass)
    via_api = lower(big_graph().to_module())
    assert str(via_pass) == str(via_api)


def test_an_lir_input_is_planned_and_packed_first():
    g = rlx.Graph("mm")
    x, w = g.input("x", (8, 16)), g.param("w", (16, 4))
    g.output(g.exp(x) @ w)  # exp's result is an intermediate buffer: an lir.alloc
    module = g.to_module()
    for name in STAGE_PASSES["mir"] + ("convert-mir-to-lir",):
        make_pass(name).apply(make_context(), module)
    assert stage_plan(module) == [
        ("llvm", ("lir-plan-arena", "lir-pack-weights", *STAGE_PASSES["llvm"]))]
    make_pass("lir-plan-arena").apply(make_context(), module)
    assert stage_plan(module) == [("llvm", ("lir-pack-weights", *STAGE_PASSES["llvm"]))]


def lir_module(rows: int) -> object:
    module = big_graph(rows).to_module()
    lower(module, "lir")
    return module


def test_marks_follow_the_work_estimate():
    module = lir_module(512)
    LirParallelizePass().apply(make_context(), module)
    kernels = [op for op in module.walk() if isinstance(op, lir.KernelOp)]
    assert kernels and all(estimate_work(op) >= PARALLEL_MIN_WORK for op in kernels)
    assert all(PARALLEL in op.attributes for op in kernels)
    barriers = [op for op in module.walk() if isinstance(op, lir.BarrierOp)]
    assert len(barriers) == len(kernels)  # between the kernels, and a final one

    small = lir_module(4)
    LirParallelizePass().apply(make_context(), small)
    assert not any(PARALLEL in op.attributes or isinstance(op, lir.BarrierOp)
                   for op in small.walk())


def test_a_parallelized_module_computes_the_same_numbers():
    x = np.random.default_rng(0).standard_normal((512, 512)).astype(np.float32)
    module = lir_module(512)
    (expected,) = run_module(module, {"x": x})
    LirParallelizePass().apply(make_context(), module)
    (got,) = run_module(module, {"x": x})
    np.testing.assert_array_equal(got, expected)


def test_a_marked_kernel_without_a_partitioned_builder_is_refused():
    module = parse_module("""
    func.func @g(%t: memref<10x8xf32> {rlx.name = "t", rlx.role = "param"},
                 %ids: memref<4xi32> {rlx.name = "ids", rlx.role = "input"},
                 %out: memref<4x8xf32> {rlx.name = "out", rlx.role = "output"}) {
      lir.gather ins(%t, %ids : memref<10x8xf32>, memref<4xi32>) outs(%out : memref<4x8xf32>) axis 0 {rlx.parallel}
      lir.barrier
      func.return
    }""")
    with pytest.raises(PassFailedException, match="lir.gather' is marked rlx.parallel"):
        make_pass("convert-lir-to-llvm").apply(make_context(), module)
