"""mir-fuse's q8 edges: an rms_norm fused into the q8 shared-input product after it (the
kernel's prologue normalizes each row before quantizing it), a gated linear unit
act(gate) * up fused into the q8 gate/up product (its epilogue) and a residual add fused
into the q8 dequant_matmul before it (its epilogue), in the ops, the reference and the
kernels.

The kernels must give the bits of the unfused build (`FusionPolicy(q8_edges=False)`):
the prologue is `lir.rms_norm`'s row code, the glu the fused_elementwise body's code and
the residual the same f32 add, so a fused model decodes the same tokens.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_interleaved_weights import _tame
from test_jit_dequant import blocks
from xdsl.utils.exceptions import VerifyException

import rlx_mlir as rlx
from rlx_mlir.core import quants
from rlx_mlir.core import reference_kernels as K
from rlx_mlir.core.errors import RlxError
from rlx_mlir.ir import make_context
from rlx_mlir.passes.mir_fuse import MirFusePass

RNG = np.random.default_rng(7)
K_DIM, F_DIM = 256, 512
"""x's width (a whole K-quant superblock) and the FFN's."""


def _ffn_block(scheme: str) -> rlx.Graph:
    """h[S, K] + down(silu(gate(n)) · up(n)) with n = rms_norm(h): a llama FFN with its
    residual, every product `scheme` with q8 activations."""
    g = rlx.Graph("ffn_block")
    h = g.input("h", ("S", K_DIM))
    gamma = g.param("gamma", (K_DIM,), "f32")
    block = quants.quant_type(scheme)

    def raw(name: str, rows: int, cols: int) -> rlx.Value:
        return g.param(name, (rows, cols // block.block_size * block.type_size), "ui8")

    n = g.rms_norm(h, gamma, eps=1e-6)
    gate, up = (g.dequant_matmul(n, raw(name, F_DIM, K_DIM), scheme, activations="q8")
                for name in ("gate", "up"))
    down = g.dequant_matmul(g.mul(g.silu(gate), up), raw("down", K_DIM, F_DIM), scheme,
                            activations="q8")
    g.output(g.add(h, down))
    return g


def _params(scheme: str) -> dict[str, np.ndarray]:
    params = {"gamma": RNG.uniform(0.5, 1.5, K_DIM).astype(np.float32)}
    for name, rows, cols in (("gate", F_DIM, K_DIM), ("up", F_DIM, K_DIM), ("down", K_DIM, F_DIM)):
        weights = blocks(scheme, rows, cols)
        # the 32-value schemes with small scales, so the FFN's values stay moderate
        params[name] = _tame(weights, scheme) if block_of_32(scheme) else weights
    return params


def fused_and_apart(g: rlx.Graph, params: dict[str, np.ndarray], threads: int
                    ) -> tuple[rlx.CompiledGraph, rlx.CompiledGraph]:
    """The default build of `g` and the one without the q8 edges (`q8_edges=False`)."""
    return (rlx.jit(g, params=params, threads=threads),
            rlx.jit(g, params=params, threads=threads, fusion=rlx.FusionPolicy(q8_edges=False)))


def block_of_32(scheme: str) -> bool:
    return scheme in ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0")


@pytest.mark.parametrize(("scheme", "threads"), [("q4_1", 2), ("q8_0", 1), ("q4_k", 2),
                                                 ("q6_k", 1), ("iq4_nl", 2)])
def test_fused_edges_give_the_unfused_bits(scheme, threads):
    """The VNNI kernel (q4_1, q8_0), the K-quants' (q4_k, q6_k) and the emulation
    (iq4_nl), split over threads or not, at 1, 3 and 17 rows (one row, a column tile of
    rows and more): fused and unfused builds agree bit for bit, and both the reference."""
    g = _ffn_block(scheme)
    params = _params(scheme)
    fused, apart = fused_and_apart(g, params, threads)
    lir_text = fused.mlir("lir")
    assert "norm(" in lir_text and "lir.rms_norm" not in lir_text
    assert "glu silu" in lir_text and "lir.fused_elementwise" not in lir_text
    assert "lir.elementwise add" not in lir_text
    assert "lir.rms_norm" in apart.mlir("lir") and "lir.fused_elementwise" in apart.mlir("lir")
    reference = rlx.reference(g, params=params)
    for m in (1, 3, 17):
        h = RNG.standard_normal((m, K_DIM)).astype(np.float32)
        got, want = fused(h), reference(h)
        np.testing.assert_array_equal(got, apart(h), err_msg=f"{scheme} M={m}")
        # a q8 rounding flip of an activation (the reference normalizes in f64) moves an
        # output by a quant step times a weight row: within 0.5 % of the largest output
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=5e-3 * np.abs(want).max())


def test_fused_edges_at_avx2(monkeypatch):
    """The same at haswell's W = 8 (`vpmaddubsw` int8 kernels)."""
    monkeypatch.setenv("RLX_TARGET_CPU", "haswell")
    g = _ffn_block("q4_1")
    params = _params("q4_1")
    fused, apart = fused_and_apart(g, params, 2)
    assert fused.options.target == "haswell"
    for m in (1, 5):
        h = RNG.standard_normal((m, K_DIM)).astype(np.float32)
        np.testing.assert_array_equal(fused(h), apart(h))


def _glu_block(scheme: str, n: int, act: str, order: str) -> rlx.Graph:
    """down(act(gate(x)) · up(x)) of q8 products, N = n for gate and up, the mul's
    operands in `order` ("gate·up" or "up·gate")."""
    g = rlx.Graph("glu")
    x = g.input("x", ("S", 64))
    block = quants.quant_type(scheme)
    gate, up = (g.dequant_matmul(x, g.param(name, (n, 64 // block.block_size * block.type_size),
                                            "ui8"), scheme, activations="q8")
                for name in ("gate", "up"))
    gated = getattr(g, act)(gate)
    glu = g.mul(gated, up) if order == "gate·up" else g.mul(up, gated)
    w_down = g.param("down", (16, n // block.block_size * block.type_size), "ui8")
    g.output(g.dequant_matmul(glu, w_down, scheme, activations="q8"))
    return g


@pytest.mark.parametrize(("scheme", "n", "act", "order", "threads"), [
    ("q4_0", 96, "silu", "gate·up", 2),       # 96: 6 vectors of 16, not a whole column tile
    ("q8_0", 160, "gelu_tanh", "up·gate", 1),  # GeGLU, the mul's operands swapped
    ("q4_1", 32, "silu", "up·gate", 2),        # fewer columns than the parts' panels
])
def test_glu_gives_the_unfused_bits(scheme, n, act, order, threads):
    """A glu of N columns that are not whole tiles, any activation, either operand
    order: the fused build gives the unfused build's bits (its fused_elementwise), and
    its tiles pair the columns of gate and up however the parts split them."""
    g = _glu_block(scheme, n, act, order)
    params = {name: _tame(blocks(scheme, rows, cols), scheme)
              for name, rows, cols in (("gate", n, 64), ("up", n, 64), ("down", 16, n))}
    fused, apart = fused_and_apart(g, params, threads)
    assert f"glu {act}" in fused.mlir("lir") and "lir.fused_elementwise" not in fused.mlir("lir")
    reference = rlx.reference(g, params=params)
    for m in (1, 2, 19):
        x = RNG.standard_normal((m, 64)).astype(np.float32)
        got, want = fused(x), reference(x)
        np.testing.assert_array_equal(got, apart(x), err_msg=f"{scheme} {act} M={m}")
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=5e-3 * np.abs(want).max())


def test_glu_needs_the_pair_alone():
    """No glu where the gate is read elsewhere too, or the two products are not one
    shared input's: the activation and mul stay (as a fused_elementwise)."""
    module = _module(
        "func.func @f(%x: tensor<2x64xf32>, %w: tensor<8x36xui8>, %v: tensor<8x36xui8>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {\n"
        "  %g, %u = mir.shared_input_matmul %x, %w, %v scheme q4_0 activations q8 : (tensor<2x64xf32>, tensor<8x36xui8>, tensor<8x36xui8>) -> (tensor<2x8xf32>, tensor<2x8xf32>)\n"
        "  %a = mir.silu %g : tensor<2x8xf32>\n"
        "  %y = mir.mul %a, %u : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>\n"
        "  func.return %y, %g : tensor<2x8xf32>, tensor<2x8xf32>\n}")
    MirFusePass().apply(make_context(), module)
    text = str(module)
    assert "glu" not in text and "mir.fused_elementwise" in text


def test_glu_keeps_the_up_product():
    """The up product stays the second result (here read by the function's return too);
    the gate weight goes first whichever product the activation read."""
    module = _module(
        "func.func @f(%x: tensor<2x64xf32>, %w: tensor<8x36xui8>, %v: tensor<8x36xui8>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {\n"
        "  %u, %g = mir.shared_input_matmul %x, %v, %w scheme q4_0 activations q8 : (tensor<2x64xf32>, tensor<8x36xui8>, tensor<8x36xui8>) -> (tensor<2x8xf32>, tensor<2x8xf32>)\n"
        "  %a = mir.silu %g : tensor<2x8xf32>\n"
        "  %y = mir.mul %u, %a : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>\n"
        "  func.return %y, %u : tensor<2x8xf32>, tensor<2x8xf32>\n}")
    MirFusePass().apply(make_context(), module)
    text = str(module)
    assert "%y, %u = mir.shared_input_matmul %x, %w, %v scheme q4_0 activations q8 glu silu" in text
    assert "mir.silu" not in text and "mir.mul" not in text
    assert "func.return %y, %u" in text


def test_reference_kernels_compose():
    """The reference of each fused op is the composition it replaces."""
    x = RNG.standard_normal((3, 64)).astype(np.float32)
    w1, w2 = blocks("q4_0", 8, 64), blocks("q4_0", 16, 64)
    gamma = RNG.uniform(0.5, 1.5, 64).astype(np.float32)
    normed = K.rms_norm(x, gamma, eps=1e-6)
    got = K.shared_input_matmul(x, [w1, w2], "q4_0", "q8", norm_weight=gamma, norm_eps=1e-6)
    for a, w in zip(got, (w1, w2), strict=True):
        np.testing.assert_array_equal(a, K.dequant_matmul(normed, w, "q4_0", "q8"))
    residual = RNG.standard_normal((3, 8)).astype(np.float32)
    np.testing.assert_array_equal(K.dequant_matmul(x, w1, "q4_0", "q8", residual=residual),
                                  residual + K.dequant_matmul(x, w1, "q4_0", "q8"))
    with pytest.raises(RlxError, match="residual: needs activations 'q8'"):
        K.dequant_matmul(x, w1, "q4_0", residual=residual)
    with pytest.raises(RlxError, match=r"residual: expected shape \[3, 8\]"):
        K.dequant_matmul(x, w1, "q4_0", "q8", residual=residual[:, :4])
    with pytest.raises(RlxError, match=r"norm_weight: expected shape \[64\]"):
        K.shared_input_matmul(x, [w1, w2], "q4_0", "q8", norm_weight=gamma[:32])
    w3 = blocks("q4_0", 8, 64)
    gated, up = K.shared_input_matmul(x, [w1, w3], "q4_0", "q8", glu="silu")
    np.testing.assert_array_equal(up, K.dequant_matmul(x, w3, "q4_0", "q8"))
    np.testing.assert_allclose(gated, K.silu(K.dequant_matmul(x, w1, "q4_0", "q8")) * up,
                               rtol=1e-6, atol=1e-6)
    with pytest.raises(RlxError, match="glu: needs activations 'q8' and two weights of one N"):
        K.shared_input_matmul(x, [w1, w2], "q4_0", "q8", glu="silu")


def _module(body: str):
    from xdsl.parser import Parser
    return Parser(make_context(), body).parse_module()


@pytest.mark.parametrize(("op", "message"), [
    ("%y = mir.dequant_matmul %x, %w residual %r scheme q4_0 : (tensor<2x64xf32>, "
     "tensor<8x36xui8>, tensor<2x8xf32>) -> tensor<2x8xf32>", "a residual needs activations q8"),
    ("%y = mir.dequant_matmul %x, %w residual %x scheme q4_0 activations q8 : (tensor<2x64xf32>, "
     "tensor<8x36xui8>, tensor<2x64xf32>) -> tensor<2x8xf32>", r"residual: expected shape \[2, 8\]"),
    ("%a, %b = mir.shared_input_matmul %x, %w, %w norm(%g : tensor<64xf32>) eps 1.0e-05 scheme "
     "q4_0 : (tensor<2x64xf32>, tensor<8x36xui8>, tensor<8x36xui8>) -> (tensor<2x8xf32>, "
     "tensor<2x8xf32>)", "a norm_weight needs activations q8"),
    ("%a, %b = mir.shared_input_matmul %x, %w, %w norm(%r : tensor<2x8xf32>) eps 1.0e-05 scheme "
     "q4_0 activations q8 : (tensor<2x64xf32>, tensor<8x36xui8>, tensor<8x36xui8>) -> "
     "(tensor<2x8xf32>, tensor<2x8xf32>)", r"norm_weight: expected shape \[64\]"),
    ("%a, %b = mir.shared_input_matmul %x, %w, %w scheme q4_0 glu silu : (tensor<2x64xf32>, "
     "tensor<8x36xui8>, tensor<8x36xui8>) -> (tensor<2x8xf32>, tensor<2x8xf32>)",
     "glu needs activations q8"),
    ("%a, %b, %c = mir.shared_input_matmul %x, %w, %w, %w scheme q4_0 activations q8 glu silu : "
     "(tensor<2x64xf32>, tensor<8x36xui8>, tensor<8x36xui8>, tensor<8x36xui8>) -> "
     "(tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>)", "glu needs exactly two weights"),
    ("%a, %b = mir.shared_input_matmul %x, %w, %v scheme q4_0 activations q8 glu silu : "
     "(tensor<2x64xf32>, tensor<8x36xui8>, tensor<16x36xui8>) -> (tensor<2x8xf32>, "
     "tensor<2x16xf32>)", r"same N \(act\(p_0\) \* p_1\), got N = \[8, 16\]"),
])
def test_the_fused_ops_verify(op, message):
    module = _module(
        "func.func @f(%x: tensor<2x64xf32>, %w: tensor<8x36xui8>, %r: tensor<2x8xf32>, "
        f"%g: tensor<64xf32>, %v: tensor<16x36xui8>) {{\n  {op}\n  func.return\n}}")
    with pytest.raises(VerifyException, match=message):
        module.verify()


def test_the_residual_may_be_either_operand():
    """add(product, r) fuses as add(r, product) does."""
    module = _module(
        "func.func @f(%x: tensor<2x64xf32>, %w: tensor<8x36xui8>, %r: tensor<2x8xf32>) -> tensor<2x8xf32> {\n"
        "  %p = mir.dequant_matmul %x, %w scheme q4_0 activations q8 : (tensor<2x64xf32>, tensor<8x36xui8>) -> tensor<2x8xf32>\n"
        "  %y = mir.add %p, %r : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>\n"
        "  func.return %y : tensor<2x8xf32>\n}")
    MirFusePass().apply(make_context(), module)
    text = str(module)
    assert "residual %r" in text and "mir.add" not in text


def test_gradients_of_the_fused_ops():
    """autodiff runs before mir-fuse, but a fused op built by hand differentiates: the
    residual takes the cotangent as it is; a fused rms_norm is refused by name."""
    from rlx_mlir.dialects import mir

    w = K.quantize_q8_0(RNG.standard_normal((8, 64)).astype(np.float32))
    x_np = RNG.standard_normal((3, 64)).astype(np.float32)
    r_np = RNG.standard_normal((3, 8)).astype(np.float32)
    ct = RNG.standard_normal((3, 8)).astype(np.float32)
    g = rlx.Graph("fused")
    x, r = g.input("x", (3, 64)), g.input("r", (3, 8))
    q = g.param("q", w.shape, "ui8")
    fused = mir.DequantMatmulOp(x.ssa, q.ssa, residual=r.ssa, scheme="q8_0", activations="q8")
    g.add_op(fused)
    y = rlx.Value(g, fused.result, (3, 8), "f32")
    loss = g.reduce_sum(y * g.constant(ct), (0, 1))
    g.output(loss)
    grads = rlx.reference(rlx.grad(g, loss, ["x", "r"]))(x=x_np, r=r_np, q=w)
    np.testing.assert_allclose(grads[1], ct @ K.dequantize_q8_0(w), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(grads[2], ct)

    h = g.input("h", (3, 64))
    gamma = g.param("gamma", (64,), "f32")
    shared = mir.SharedInputMatmulOp(h.ssa, [q.ssa, q.ssa], norm_weight=gamma.ssa,
                                     scheme="q8_0", activations="q8", norm_eps=1e-5)
    g.add_op(shared)
    out = rlx.Value(g, shared.products[0], (3, 8), "f32")
    with pytest.raises(RlxError, match="fused rms_norm .* has no gradient rule"):
        rlx.grad(g, g.reduce_sum(out, (0, 1)), ["h"])
    gated = mir.SharedInputMatmulOp(h.ssa, [q.ssa, q.ssa], scheme="q8_0", activations="q8",
                                    glu="silu")
    g.add_op(gated)
    out = rlx.Value(g, gated.products[0], (3, 8), "f32")
    with pytest.raises(RlxError, match=r"fused gated linear unit \(glu\) has no gradient rule"):
        rlx.grad(g, g.reduce_sum(out, (0, 1)), ["h"])
