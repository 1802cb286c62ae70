"""mir-fuse's q8 edges around the attention: a rope of a q8 shared-input product fused
into the product's epilogue (each tile rotated as it is stored) and a KV-cache insert of
a product fused into it (the kernel writes the product's rows into the cache in place,
at the position), in the ops, the reference, the interpreter and the kernels.

With both, nothing stands between the q/k/v product and the attention, so the gather
and release barriers around the serial rope and insert kernels go (lir-parallelize).
The kernels must give the bits of the unfused build (`FusionPolicy(q8_edges=False)`):
the rotation is `lir.rope`'s (`rotate_pair`) and the rows are the product's.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_interleaved_weights import _tame
from test_jit_dequant import blocks
from test_q8_edges import _module, block_of_32
from xdsl.utils.exceptions import VerifyException

import rlx_mlir as rlx
from rlx_mlir.core import quants
from rlx_mlir.core import reference_kernels as K
from rlx_mlir.core.errors import RlxError
from rlx_mlir.dialects import lir, mir
from rlx_mlir.ir import make_context
from rlx_mlir.passes.lir_parallelize import LirParallelizePass
from rlx_mlir.passes.mir_fuse import MirFusePass

RNG = np.random.default_rng(11)
CAPACITY = 24


def _attention_block(scheme: str, k_dim: int, heads: int, kv_heads: int, head_dim: int,
                     n_rot: int, style: str = "interleaved") -> rlx.Graph:
    """q, k, v = x @ w (q8 products of `scheme`), q and k roped, k and v appended to the
    KV caches, causal grouped-query attention over the cache: a llama layer's attention."""
    g = rlx.Graph("attention_block")
    x = g.input("x", ("S", k_dim))
    cos, sin = (g.input(name, ("S", n_rot // 2)) for name in ("cos", "sin"))
    block = quants.quant_type(scheme)

    def product(name: str, rows: int) -> rlx.Value:
        w = g.param(name, (rows, k_dim // block.block_size * block.type_size), "ui8")
        return g.dequant_matmul(x, w, scheme, activations="q8")

    q, k, v = (product(name, n * head_dim) for name, n in (("wq", heads), ("wk", kv_heads),
                                                          ("wv", kv_heads)))
    q, k = (g.rope(t, cos, sin, head_dim, n_rot, style) for t in (q, k))
    caches = [g.state(name, (CAPACITY, kv_heads * head_dim)) for name in ("k", "v")]
    keys, values = (g.cache_append(c, t) for c, t in zip(caches, (k, v), strict=True))
    g.output(g.attention(q, keys, values, num_heads=heads, head_dim=head_dim,
                         num_kv_heads=kv_heads, mask_kind="causal"))
    return g


def _params(scheme: str, k_dim: int, rows: dict[str, int]) -> dict[str, np.ndarray]:
    params = {}
    for name, n in rows.items():
        weights = blocks(scheme, n, k_dim)
        params[name] = _tame(weights, scheme) if block_of_32(scheme) else weights
    return params


def _tables(n_rot: int) -> tuple[np.ndarray, np.ndarray]:
    angles = np.arange(CAPACITY)[:, None] / 100 ** (np.arange(n_rot // 2) / (n_rot // 2))
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


CASES = [
    # scheme, threads, K, heads, kv heads, head_dim, n_rot
    ("q4_1", 2, 64, 4, 2, 16, 16),   # the VNNI kernel, grouped-query
    ("q8_0", 1, 64, 3, 3, 8, 8),     # N = 24: heads smaller than a tile, a tail tile
    ("q4_k", 2, 256, 2, 1, 32, 16),  # the K-quants' kernel, half of each head rotated
    ("q6_k", 1, 256, 2, 2, 16, 16),
    ("iq4_nl", 2, 64, 2, 1, 32, 32),  # the emulation
]


def _compare(scheme, threads, k_dim, heads, kv_heads, head_dim, n_rot) -> None:
    g = _attention_block(scheme, k_dim, heads, kv_heads, head_dim, n_rot)
    params = _params(scheme, k_dim, {"wq": heads * head_dim, "wk": kv_heads * head_dim,
                                     "wv": kv_heads * head_dim})
    fused = rlx.jit(g, params=params, threads=threads)
    apart = rlx.jit(g, params=params, threads=threads, fusion=rlx.FusionPolicy(q8_edges=False))
    text = fused.mlir("lir")
    assert "lir.rope" not in text and "lir.insert_rows" not in text
    assert "style interleaved outs(" in text and "into [1, 2] at %position" in text
    assert "lir.rope" in apart.mlir("lir") and "lir.insert_rows" in apart.mlir("lir")
    reference = rlx.reference(g, params=params)
    # the fused ops' references: the mir interpreter's and the lir interpreter's
    staged = [rlx.reference(fused.stage_module(name).clone(), params) for name in ("mir", "lir")]
    cos, sin = _tables(n_rot)
    for rows in (17, 1, 1, 3):  # a prefill of two chunks of rows, two decode steps, a chunk
        at = slice(fused.position, fused.position + rows)
        inputs = {"x": RNG.standard_normal((rows, k_dim)).astype(np.float32),
                  "cos": cos[at], "sin": sin[at]}
        got, want = fused(**inputs), reference(**inputs)
        np.testing.assert_array_equal(got, apart(**inputs), err_msg=f"{scheme} S={rows}")
        for name in ("k", "v"):
            np.testing.assert_array_equal(fused.state[name], apart.state[name])
            np.testing.assert_allclose(fused.state[name], reference.state[name], rtol=1e-3,
                                       atol=5e-3 * np.abs(reference.state[name]).max())
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=5e-3 * np.abs(want).max())
        for model in staged:
            np.testing.assert_allclose(model(**inputs), want, rtol=1e-3,
                                       atol=5e-3 * np.abs(want).max())
            np.testing.assert_allclose(model.state["k"], reference.state["k"], rtol=1e-3,
                                       atol=5e-3 * np.abs(reference.state["k"]).max())
    assert fused.position == apart.position == 22
    assert not fused.state["k"][22:].any()  # nothing written past the position


@pytest.mark.parametrize(("scheme", "threads", "k_dim", "heads", "kv_heads", "head_dim",
                          "n_rot"), CASES)
def test_rope_and_inserts_give_the_unfused_bits(scheme, threads, k_dim, heads, kv_heads,
                                                head_dim, n_rot):
    """Every q8 kernel, split over threads or not, over a prefill, decode steps and a
    chunk: the fused build's outputs and caches are the unfused build's bit for bit, and
    the reference's within the q8 tolerance."""
    _compare(scheme, threads, k_dim, heads, kv_heads, head_dim, n_rot)


def test_rope_and_inserts_at_avx2(monkeypatch):
    """The same at haswell's W = 8 (`vpmaddubsw` kernels, 8-column tiles)."""
    monkeypatch.setenv("RLX_TARGET_CPU", "haswell")
    _compare("q4_1", 2, 64, 4, 2, 16, 16)


def test_the_layer_loses_its_serial_kernels():
    """With the edges fused, nothing is left between the q/k/v product and the attention
    (lir-parallelize with every kernel large enough to split): one full barrier between
    them instead of two around the ropes and inserts (which split by rows, one region)."""
    g = _attention_block("q4_1", 64, 4, 2, 16, 16)
    params = _params("q4_1", 64, {"wq": 64, "wk": 32, "wv": 32})
    kinds = {}
    for name, fusion in (("fused", None), ("apart", rlx.FusionPolicy(q8_edges=False))):
        module = rlx.jit(g, params=params, threads=2, fusion=fusion).stage_module("lir").clone()
        LirParallelizePass(min_work=1).apply(make_context(), module)
        kinds[name] = [op.kind.data if op.kind else "full" for op in module.walk()
                       if isinstance(op, lir.BarrierOp)]
    assert kinds["fused"] == ["full", "gather"]  # product | attention | return
    assert kinds["apart"] == ["full", "full", "gather"]  # product | ropes, inserts | attention


def test_half_style_stays_a_kernel():
    """A half-style (NeoX) rope pairs dims n_rot/2 apart, in different tiles: it stays
    `lir.rope`; the inserts of its product (after the rope) stay too, and v's fuses."""
    g = _attention_block("q4_0", 64, 2, 2, 16, 16, style="half")
    params = _params("q4_0", 64, {"wq": 32, "wk": 32, "wv": 32})
    fused = rlx.jit(g, params=params, threads=1)
    text = fused.mlir("lir")
    assert text.count("lir.rope") == 2 and text.count("lir.insert_rows") == 1
    assert "into [2] at %position" in text
    reference = rlx.reference(g, params=params)
    cos, sin = _tables(16)
    x = RNG.standard_normal((3, 64)).astype(np.float32)
    got, want = fused(x=x, cos=cos[:3], sin=sin[:3]), reference(x=x, cos=cos[:3], sin=sin[:3])
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=5e-3 * np.abs(want).max())


SHARED = ("%q, %k = mir.shared_input_matmul %x, %wq, %wk scheme q4_0 activations q8 : "
          "(tensor<?x64xf32>, tensor<16x36xui8>, tensor<16x36xui8>) -> "
          "(tensor<?x16xf32>, tensor<?x16xf32>)\n")
ARGS = ("%x: tensor<?x64xf32>, %wq: tensor<16x36xui8>, %wk: tensor<16x36xui8>, "
        "%c: tensor<?x4xf32>, %s: tensor<?x4xf32>, %cache: tensor<8x16xf32>, %p: index")


def _fused(body: str, results: str) -> str:
    module = _module(f"func.func @f({ARGS}) -> ({results}) {{\n  {SHARED}{body}\n}}")
    MirFusePass().apply(make_context(), module)
    return str(module)


def test_a_product_read_elsewhere_keeps_its_rope():
    """The rope fuses only where its product has no other reader; the insert only where
    the old cache is read by nothing but its `mir.assign`."""
    text = _fused(
        "  %r = mir.rope %k, %c, %s head_dim 8 n_rot 8 style interleaved : (tensor<?x16xf32>, "
        "tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x16xf32>\n"
        "  func.return %r, %k : tensor<?x16xf32>, tensor<?x16xf32>",
        "tensor<?x16xf32>, tensor<?x16xf32>")
    assert "mir.rope" in text and "rope(" not in text
    text = _fused(
        "  %n = mir.insert_rows %k into %cache[%p] : tensor<?x16xf32> into tensor<8x16xf32>\n"
        "  func.return %n, %cache : tensor<8x16xf32>, tensor<8x16xf32>",
        "tensor<8x16xf32>, tensor<8x16xf32>")
    assert "mir.insert_rows" in text and "into(" not in text


def test_the_fused_form_in_mir():
    """rope then insert of one product: the product is rotated and is the updated cache."""
    text = _fused(
        "  %r = mir.rope %k, %c, %s head_dim 8 n_rot 8 style interleaved : (tensor<?x16xf32>, "
        "tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x16xf32>\n"
        "  %n = mir.insert_rows %r into %cache[%p] : tensor<?x16xf32> into tensor<8x16xf32>\n"
        "  func.return %q, %n : tensor<?x16xf32>, tensor<8x16xf32>",
        "tensor<?x16xf32>, tensor<8x16xf32>")
    assert ("%q, %n = mir.shared_input_matmul %x, %wq, %wk rope(%c, %s : tensor<?x4xf32>, "
            "tensor<?x4xf32>) [1] head_dim 8 n_rot 8 style interleaved into(%cache : "
            "tensor<8x16xf32>) [1] at %p scheme q4_0 activations q8") in text
    assert "mir.rope" not in text and "mir.insert_rows" not in text


def test_reference_kernels_compose():
    """The reference of the fused op is rope, then insert_rows, of the products."""
    x = RNG.standard_normal((3, 64)).astype(np.float32)
    wq, wk = blocks("q4_0", 16, 64), blocks("q4_0", 8, 64)
    cos, sin = _tables(8)
    cache = RNG.standard_normal((6, 8)).astype(np.float32)
    q, k = K.shared_input_matmul(x, [wq, wk], "q4_0", "q8")
    got_q, got_cache = K.shared_input_matmul(
        x, [wq, wk], "q4_0", "q8", rope_cos=cos[:3], rope_sin=sin[:3], rope_products=(0, 1),
        rope_head_dim=8, rope_n_rot=8, rope_style="interleaved", caches=[cache], position=2,
        cache_products=(1,))
    np.testing.assert_array_equal(got_q, K.rope(q, cos[:3], sin[:3], 8, 8, "interleaved"))
    want = K.insert_rows(K.rope(k, cos[:3], sin[:3], 8, 8, "interleaved"), cache, 2)
    np.testing.assert_array_equal(got_cache, want)
    with pytest.raises(RlxError, match="do not fit in the cache"):
        K.shared_input_matmul(x, [wq, wk], "q4_0", "q8", caches=[cache], position=4,
                              cache_products=(1,))
    with pytest.raises(RlxError, match="need activations 'q8'"):
        K.shared_input_matmul(x, [wq, wk], "q4_0", rope_cos=cos[:3], rope_sin=sin[:3],
                              rope_products=(0,), rope_head_dim=8, rope_n_rot=8)


ROPE = "rope(%c, %s : tensor<2x4xf32>, tensor<2x4xf32>)"
TYPES = ("(tensor<2x64xf32>, tensor<16x36xui8>, tensor<16x36xui8>) -> "
         "(tensor<2x16xf32>, tensor<2x16xf32>)")


@pytest.mark.parametrize(("edges", "results", "message"), [
    (f"{ROPE} [0] head_dim 8 n_rot 8 style half scheme q4_0 activations q8", TYPES,
     "rope_style: expected interleaved"),
    (f"{ROPE} [0] head_dim 8 n_rot 8 style interleaved scheme q4_0", TYPES,
     "rope needs activations q8"),
    (f"{ROPE} [0, 2] head_dim 8 n_rot 8 style interleaved scheme q4_0 activations q8", TYPES,
     r"rope_products: expected distinct product indices in \[0, 2\), got \[0, 2\]"),
    (f"{ROPE} [0] head_dim 8 n_rot 12 style interleaved scheme q4_0 activations q8", TYPES,
     "n_rot: expected an even value"),
    (f"{ROPE} [0] head_dim 1 n_rot 8 style interleaved scheme q4_0 activations q8", TYPES,
     "rope_head_dim: expected an even value"),
    ("into(%cache : tensor<8x16xf32>) [1] at %p scheme q4_0 activations q8",
     "(tensor<2x64xf32>, tensor<16x36xui8>, tensor<16x36xui8>) -> "
     "(tensor<2x16xf32>, tensor<2x16xf32>)", r"products\[1\]: expected shape \[8, 16\]"),
    ("into(%cache, %cache : tensor<8x16xf32>, tensor<8x16xf32>) [1] at %p scheme q4_0 "
     "activations q8", "(tensor<2x64xf32>, tensor<16x36xui8>, tensor<16x36xui8>) -> "
     "(tensor<2x16xf32>, tensor<8x16xf32>)", "caches: expected one per cache product"),
])
def test_the_fused_op_verifies(edges, results, message):
    module = _module(
        "func.func @f(%x: tensor<2x64xf32>, %wq: tensor<16x36xui8>, %wk: tensor<16x36xui8>, "
        "%c: tensor<2x4xf32>, %s: tensor<2x4xf32>, %cache: tensor<8x16xf32>, %p: index) {\n"
        f"  %a, %b = mir.shared_input_matmul %x, %wq, %wk {edges} : {results}\n"
        "  func.return\n}")
    with pytest.raises(VerifyException, match=message):
        module.verify()


def test_no_gradient_through_the_fused_op():
    """autodiff runs before mir-fuse; the fused form has no rule and says so."""
    g = rlx.Graph("grad")
    h = g.input("h", (3, 64))
    w = g.param("w", (16, 68), "ui8")
    cos, sin = g.input("cos", (3, 4)), g.input("sin", (3, 4))
    roped = mir.SharedInputMatmulOp(h.ssa, [w.ssa, w.ssa], rope_cos=cos.ssa, rope_sin=sin.ssa,
                                    scheme="q8_0", activations="q8", rope_products=[0],
                                    rope_head_dim=8, rope_n_rot=8, rope_style="interleaved")
    g.add_op(roped)
    out = rlx.Value(g, roped.products[0], (3, 16), "f32")
    with pytest.raises(RlxError, match=r"fused rope \(rope_products\) has no gradient rule"):
        rlx.grad(g, g.reduce_sum(out, (0, 1)), ["h"])
