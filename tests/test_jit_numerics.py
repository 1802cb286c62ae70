"""Whole graphs JIT-compiled at every vector width agree with the reference executor.

The per-family files (test_jit_*.py) test each kernel on many shapes; this file checks
that whole pipelines — every op together, fused chains, the examples, several outputs —
compile and match at widths 16 (AVX-512), 8 (RLX_TARGET_CPU=haswell, AVX2) and 4.
"""

from __future__ import annotations

import numpy as np
import pytest
from examples_loader import load_example
from test_graph import every_method_graph

import rlx_mlir as rlx
from rlx_mlir.random_inputs import random_arguments

WIDTHS = {
    "avx512": dict(vector_width=16),
    "haswell": dict(target="haswell"),
    "sse-width-4": dict(vector_width=4),
}


@pytest.fixture(params=list(WIDTHS), ids=list(WIDTHS))
def compile_options(request, monkeypatch, tmp_path):
    monkeypatch.setenv("RLX_CACHE_DIR", str(tmp_path))
    options = dict(WIDTHS[request.param])
    target = options.pop("target", None)
    if target is not None:
        monkeypatch.setenv("RLX_TARGET_CPU", target)
    return options


def check_graph(g: rlx.Graph, options: dict, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    model = rlx.jit(g, **options)
    args = random_arguments(g.to_module(), model.signature.callable_args, seed=1)
    got = model(**args)
    want = rlx.reference(g)(**args)
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        assert a.shape == b.shape and a.dtype == b.dtype, f"output {i}"
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"output {i}")


def test_every_op(compile_options):
    check_graph(every_method_graph(), compile_options, rtol=2e-4, atol=2e-5)


def test_fused_chains_and_several_outputs(compile_options):
    g = rlx.Graph("chains")
    x = g.input("x", (3, 7, 33))
    y = g.input("y", (33,))
    s = g.input("s", ())
    a = g.silu(x) * y + s                       # one fused_elementwise with broadcast leaves
    b = g.gelu_tanh(x - 1.0) / (g.exp(-x) + 2.0)
    c = g.softmax(a, axis=1) + g.rms_norm(b, y)
    d = g.linear(g.reshape(c, (21, 33)), g.param("w", (33, 17)), g.param("bias", (17,)),
                 activation="gelu")
    g.output(d, a, g.reduce_max(b, (0, 2)))
    check_graph(g, compile_options)


@pytest.mark.parametrize("n", [1, 3, 7, 17, 33, 100, 257])
def test_odd_sizes(compile_options, n):
    g = rlx.Graph("odd")
    x = g.input("x", (n, n))
    w = g.param("w", (n, n))
    g.output(g.layer_norm(g.tanh(x @ w) + g.sigmoid(x), g.param("g", (n,)), g.param("b", (n,))),
             g.reduce_sum(x, 0, keepdim=True))
    check_graph(g, compile_options)


def test_examples(compile_options):
    mlp = load_example("mlp").build_mlp()
    check_graph(mlp, compile_options)
    block = load_example("llama_block").build_llama_block(seq=5, d_model=64, num_heads=4,
                                                          num_kv_heads=2, head_dim=16, d_ff=96)
    check_graph(block, compile_options, rtol=2e-4, atol=5e-5)
