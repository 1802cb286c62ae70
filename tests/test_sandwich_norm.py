"""mir-fuse's normed residual: Gemma 3's sandwich norm `s = h + rms_norm(p, g1)`, then
`rms_norm(s, g2)` into a q8 shared-input product, becomes that product's prologue (each
row's sum formed in the kernel, one part writing it out as the op's last result), so no
serial kernel and one barrier fewer stand between the products of a layer.

The kernels must give the bits of the unfused build (`FusionPolicy(q8_edges=False)`):
the prologue is `lir.rms_norm`'s row code and the same f32 add.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_q8_edges import _params, fused_and_apart
from xdsl.parser import Parser
from xdsl.utils.exceptions import VerifyException

import rlx_mlir as rlx
from rlx_mlir.core import quants
from rlx_mlir.core import reference_kernels as K
from rlx_mlir.ir import make_context

RNG = np.random.default_rng(11)
K_DIM, F_DIM = 256, 512


def _sandwich_block(scheme: str, *, early_use: bool = False) -> rlx.Graph:
    """Gemma 3's FFN half-layer: s = h + rms_norm(p, g1); y = s + rms_norm(down(gelu_tanh(
    gate(n)) · up(n)), g3) with n = rms_norm(s, gamma), every product `scheme` with q8
    activations. `early_use`: s is also read (scaled, an output) before gate/up."""
    g = rlx.Graph("sandwich")
    h, p = g.input("h", ("S", K_DIM)), g.input("p", ("S", K_DIM))
    g1, gamma, g3 = (g.param(name, (K_DIM,), "f32") for name in ("g1", "gamma", "g3"))
    block = quants.quant_type(scheme)

    def raw(name: str, rows: int, cols: int) -> rlx.Value:
        return g.param(name, (rows, cols // block.block_size * block.type_size), "ui8")

    s = g.add(h, g.rms_norm(p, g1, eps=1e-6))
    early = g.mul(s, 2.0) if early_use else None
    n = g.rms_norm(s, gamma, eps=1e-6)
    gate, up = (g.dequant_matmul(n, raw(name, F_DIM, K_DIM), scheme, activations="q8")
                for name in ("gate", "up"))
    down = g.dequant_matmul(g.mul(g.gelu_tanh(gate), up), raw("down", K_DIM, F_DIM), scheme,
                            activations="q8")
    y = g.add(s, g.rms_norm(down, g3, eps=1e-6))
    g.output(*(y,) if early is None else (y, early))
    return g


def _sandwich_params(scheme: str) -> dict[str, np.ndarray]:
    params = _params(scheme)
    for name in ("g1", "g3"):
        params[name] = RNG.uniform(0.5, 1.5, K_DIM).astype(np.float32)
    return params


@pytest.mark.parametrize(("scheme", "threads"), [("q4_1", 2), ("q8_0", 3), ("q4_k", 2),
                                                 ("q6_k", 1), ("iq4_nl", 2)])
def test_the_sum_in_the_prologue_gives_the_unfused_bits(scheme, threads):
    """The VNNI kernel (q4_1, q8_0), the K-quants' (q4_k, q6_k) and the emulation
    (iq4_nl), split over 1-3 threads, at 1, 3 and 17 rows: the fused build keeps one
    rms_norm and one add kernel of three and two (the last), and gives the unfused
    build's bits."""
    g = _sandwich_block(scheme)
    params = _sandwich_params(scheme)
    fused, apart = fused_and_apart(g, params, threads)
    lir_text = fused.mlir("lir")
    # what stays: the last norm and add (no shared product after them)
    assert "residual(" in lir_text and lir_text.count("lir.rms_norm") == 1
    assert lir_text.count("lir.elementwise add") == 1 and "lir.fused_elementwise" not in lir_text
    assert apart.mlir("lir").count("lir.rms_norm") == 3
    assert apart.mlir("lir").count("lir.elementwise add") == 2
    reference = rlx.reference(g, params=params)
    for m in (1, 3, 17):
        h, p = (RNG.standard_normal((m, K_DIM)).astype(np.float32) for _ in range(2))
        got, want = fused(h=h, p=p), reference(h=h, p=p)
        np.testing.assert_array_equal(got, apart(h=h, p=p), err_msg=f"{scheme} M={m}")
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=5e-3 * np.abs(want).max())


def test_the_sum_at_avx2(monkeypatch):
    """The same at haswell's W = 8 (`vpmaddubsw` int8 kernels), 2 threads."""
    monkeypatch.setenv("RLX_TARGET_CPU", "haswell")
    g = _sandwich_block("q4_1")
    params = _sandwich_params("q4_1")
    fused, apart = fused_and_apart(g, params, 2)
    assert fused.options.target == "haswell" and "residual(" in fused.mlir("lir")
    for m in (1, 5):
        h, p = (RNG.standard_normal((m, K_DIM)).astype(np.float32) for _ in range(2))
        np.testing.assert_array_equal(fused(h=h, p=p), apart(h=h, p=p))


def test_a_use_of_the_sum_before_the_product_keeps_it_apart():
    """s read before the gate/up product: the sum must exist there, so the add stays."""
    g = _sandwich_block("q4_1", early_use=True)
    params = _sandwich_params("q4_1")
    model = rlx.jit(g, params=params, threads=2)
    assert "residual(" not in model.mlir("mir")
    h, p = (RNG.standard_normal((2, K_DIM)).astype(np.float32) for _ in range(2))
    want = rlx.reference(g, params=params)(h=h, p=p)
    for got, expected in zip(model(h=h, p=p), want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-3, atol=5e-3 * np.abs(expected).max())


def test_the_reference_kernel_returns_the_sum_last():
    """`shared_input_matmul(..., residual=h)` is the products of rms_norm(h + rms_norm(p))
    and that sum."""
    p, h = (RNG.standard_normal((3, 64)).astype(np.float32) for _ in range(2))
    g1, g2 = (RNG.uniform(0.5, 1.5, 64).astype(np.float32) for _ in range(2))
    wa, wb = (np.asarray(_params("q8_0")["gate"])[:8, :68] for _ in range(2))
    *products, summed = K.shared_input_matmul(p, [wa, wb], "q8_0", "q8", norm_weight=g2,
                                              norm_eps=1e-6, residual=h, residual_norm_weight=g1,
                                              residual_eps=1e-6)
    np.testing.assert_array_equal(summed, K.add(h, K.rms_norm(p, g1, eps=1e-6)))
    normed = K.rms_norm(summed, g2, eps=1e-6)
    for got, w in zip(products, (wa, wb), strict=True):
        np.testing.assert_array_equal(got, K.dequant_matmul(normed, w, "q8_0", "q8"))
    with pytest.raises(rlx.RlxError, match="residual: needs"):
        K.shared_input_matmul(p, [wa, wb], "q8_0", "q8", residual=h, residual_norm_weight=g1)


_OP = ("%a, %b, %s = mir.shared_input_matmul %p, %w, %w {edge} scheme q8_0 activations q8 : "
       "(tensor<2x64xf32>, tensor<8x68xui8>, tensor<8x68xui8>) -> "
       "(tensor<2x8xf32>, tensor<2x8xf32>, tensor<{sum}xf32>)")


@pytest.mark.parametrize(("edge", "sum_shape", "message"), [
    ("residual(%h, %g : tensor<2x64xf32>, tensor<64xf32>) eps 1.0e-06", "2x64",
     "a residual needs a norm_weight"),
    ("residual(%h, %g : tensor<2x64xf32>, tensor<64xf32>) eps 1.0e-06 norm(%g : tensor<64xf32>)"
     " eps 1.0e-06", "2x32", "expected shape"),
])
def test_the_fused_op_verifies(edge, sum_shape, message):
    text = (f"func.func @f(%p: tensor<2x64xf32>, %h: tensor<2x64xf32>, %g: tensor<64xf32>, "
            f"%w: tensor<8x68xui8>) {{\n  {_OP.format(edge=edge, sum=sum_shape)}\n"
            f"  func.return\n}}")
    module = Parser(make_context(), text).parse_module()
    with pytest.raises(VerifyException, match=message):
        module.verify()
