"""The reference executor gives the same numbers after every stage of the pipeline:
hir, mir, canonicalized, fused, lir, planned lir (greedy and naive) — for every example
and for a graph that uses every builder method; and the pipeline's options reach rlx-lower
and read back exactly from the `rlx-lower{...}` text they write."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from examples_loader import load_example
from test_graph import every_method_graph

import rlx_mlir as rlx
from rlx_mlir.core.errors import OptionError
from rlx_mlir.core.fusion import FusionPolicy
from rlx_mlir.ir import make_context
from rlx_mlir.passes.pipeline_stages import PASS_OPTIONS
from rlx_mlir.pipeline import PipelineOptions, make_pass
from rlx_mlir.random_inputs import random_arguments
from rlx_mlir.reference import run_module

STAGES = [
    ("mir", ["convert-hir-to-mir"]),
    ("canonicalized", ["canonicalize", "cse"]),
    ("fused", ["mir-fuse"]),
    ("lir", ["mir-inline-functions", "convert-mir-to-lir"]),
    ("planned", ["lir-plan-arena"]),
]


def graphs() -> dict[str, rlx.Graph]:
    return {
        "every_method": every_method_graph(),
        "mlp": load_example("mlp").build_mlp(),
        "llama_block": load_example("llama_block").build_llama_block(
            seq=6, d_model=64, num_heads=4, num_kv_heads=2, head_dim=16, d_ff=96),
    }


@pytest.mark.parametrize("name", ["every_method", "mlp", "llama_block"])
def test_every_stage_agrees(name):
    graph = graphs()[name]
    module = graph.to_module()
    specs = rlx.reference(module).signature.callable_args
    arrays = random_arguments(module, specs, seed=5)
    expected = run_module(module, arrays)
    ctx = make_context()
    for stage, passes in STAGES:
        for pass_name in passes:
            make_pass(pass_name, PipelineOptions()).apply(ctx, module)
        module.verify()
        got = run_module(module, arrays)
        assert len(got) == len(expected), stage
        for i, (a, b) in enumerate(zip(got, expected, strict=True)):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6,
                                       err_msg=f"{name}: output {i} after the {stage} stage")
    naive = graph.to_module()
    for pass_name in ["convert-hir-to-mir", "canonicalize", "cse", "mir-fuse", "mir-inline-functions",
                      "convert-mir-to-lir"]:
        make_pass(pass_name, PipelineOptions()).apply(ctx, naive)
    make_pass("lir-plan-arena", PipelineOptions(strategy="naive")).apply(ctx, naive)
    for a, b in zip(run_module(naive, arrays), expected, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, err_msg=f"{name}: naive plan")


def test_rlx_lower_takes_every_pipeline_option():
    """A new PipelineOptions field must reach rlx-lower (else rlx-lower cannot reproduce a
    jit build that sets it), under the MLIR-style name of the pass it configures."""
    lower_options = PASS_OPTIONS["rlx-lower"]
    # the fusion policy's fields are options one by one (`fusion.elementwise`, ...)
    leaves = [f"fusion.{p.name}" if f.name == "fusion" else f.name
              for f in dataclasses.fields(PipelineOptions)
              for p in (dataclasses.fields(FusionPolicy) if f.name == "fusion" else [f])]
    assert sorted(lower_options.values()) == sorted(leaves)
    for pass_name, fields in PASS_OPTIONS.items():
        if pass_name != "rlx-lower":
            for field, source in fields.items():
                assert lower_options[field] == source, (pass_name, field)


@pytest.mark.parametrize("options", [
    PipelineOptions(),
    PipelineOptions(alignment=128, strategy="naive", vector_width=8, packed_params=("v", "w"),
                    max_dims="S=2048,T=512", profile=True,
                    target="skylake-avx512:+avx512f,-avx512vnni,+sse4.1",
                    fusion=FusionPolicy(matmul_epilogue=False, elementwise=False, broadcast=True,
                                        shared_input=False)),
    PipelineOptions(fusion=FusionPolicy.none()),
], ids=["defaults", "every-option", "no-fusion"])
def test_pipeline_options_round_trip(options):
    text = options.pipeline()
    assert text.startswith("rlx-lower")
    assert PipelineOptions.from_pipeline(text) == options
    assert make_pass("rlx-lower", options).options == options


@pytest.mark.parametrize("text, message", [
    ("rlx-lower{", "expected 'rlx-lower{option=value ...}'"),
    ("cse", "expected the rlx-lower pass, got 'cse'"),
    ("rlx-lower{nope=1}", 'rlx-lower: Provided arguments ["nope"] not found'),
    ("rlx-lower{alignment=3}", "alignment: expected a power of two >= 1, got 3"),
    ("rlx-lower{elementwise=maybe}", "Incompatible types"),
])
def test_a_bad_pipeline_text_is_an_option_error(text, message):
    with pytest.raises(OptionError, match=re.escape(message)):
        PipelineOptions.from_pipeline(text)
