"""The reference executor: every hir/mir op dispatches to its kernel with the right
operands and properties; calls bind and check arguments; lir runs on real buffers."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.parser import Parser

import rlx_mlir as rlx
from rlx_mlir.core import reference_kernels as K
from rlx_mlir.ir import make_context
from rlx_mlir.reference import run_module

RNG = np.random.default_rng(7)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(int(np.prod(shape))).astype(np.float32).reshape(shape)


def check(build, expected, *arrays: np.ndarray) -> None:
    """Build a one-op graph over inputs a0, a1, ... and compare with `expected(*arrays)`."""
    g = rlx.Graph("op")
    values = [g.input(f"a{i}", a.shape, {"f": "f32", "i": "i64", "u": "ui8"}[a.dtype.kind])
              for i, a in enumerate(arrays)]
    g.output(build(g, *values))
    got = rlx.reference(g)(*arrays)
    want = expected(*arrays)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


BINARY = [("add", "add"), ("sub", "sub"), ("mul", "mul"), ("div", "div"),
          ("maximum", "max"), ("minimum", "min"), ("pow", "pow")]


@pytest.mark.parametrize("method, kernel", BINARY)
@pytest.mark.parametrize("shapes", [((3, 5), (3, 5)), ((4, 1), (7,)), ((), (2, 3))])
def test_binary(method, kernel, shapes):
    a, b = np.abs(rand(*shapes[0])) + 0.5, rand(*shapes[1])
    check(lambda g, x, y: getattr(g, method)(x, y), K.ELEMENTWISE[kernel], a, b)


@pytest.mark.parametrize("name", K.UNARY_OPS)
@pytest.mark.parametrize("shape", [(), (17,), (2, 1, 3)])
def test_unary(name, shape):
    x = np.abs(rand(*shape)) + 0.1 if name in ("log", "sqrt", "rsqrt") else rand(*shape)
    method = {"absolute": "abs"}.get(name, name)
    check(lambda g, v: getattr(g, method)(v), K.ELEMENTWISE[name], x)


@pytest.mark.parametrize(
    "build, expected, shapes",
    [
        (lambda g, a, b: a @ b, K.matmul, [(3, 4), (4, 5)]),
        (lambda g, a, b: a @ b, K.matmul, [(2, 3, 4), (4,)]),
        (lambda g, x, w, b: g.linear(x, w, b, activation="gelu"),
         lambda x, w, b: K.linear(x, w, b, "gelu"), [(3, 4), (4, 5), (5,)]),
        (lambda g, x: g.reduce_sum(x, (0, 2), keepdim=True), lambda x: K.reduce(x, "sum", (0, 2), True), [(2, 3, 4)]),
        (lambda g, x: g.reduce_max(x, -1), lambda x: K.reduce(x, "max", -1), [(2, 3)]),
        (lambda g, x: g.reduce_min(x, 0), lambda x: K.reduce(x, "min", 0), [(5,)]),
        (lambda g, x: g.reduce_mean(x, (0, 1)), lambda x: K.reduce(x, "mean", (0, 1)), [(2, 3)]),
        (lambda g, x: g.softmax(x, 0), lambda x: K.softmax(x, 0), [(4, 3)]),
        (lambda g, x, ga, b: g.rms_norm(x, ga, b, eps=1e-3),
         lambda x, ga, b: K.rms_norm(x, ga, b, 1e-3), [(3, 8), (8,), (8,)]),
        (lambda g, x, r, ga: g.residual_rms_norm(x, r, ga),
         K.residual_rms_norm, [(3, 8), (3, 8), (8,)]),
        (lambda g, x, ga, b: g.layer_norm(x, ga, b), K.layer_norm, [(2, 3, 8), (8,), (8,)]),
        (lambda g, x, c, s: g.rope(x, c, s, head_dim=6, n_rot=4, style="interleaved"),
         lambda x, c, s: K.rope(x, c, s, 6, 4, "interleaved"), [(5, 12), (5, 2), (5, 2)]),
        (lambda g, q, k, v: g.attention(q, k, v, num_heads=4, head_dim=3, num_kv_heads=2, mask_kind="causal", scale=0.3),
         lambda q, k, v: K.attention(q, k, v, num_heads=4, head_dim=3, num_kv_heads=2, mask_kind="causal", scale=0.3),
         [(2, 3, 12), (2, 5, 6), (2, 5, 6)]),
        (lambda g, x, u, ga, d: g.swiglu_ffn(x, u, ga, d), K.swiglu_ffn, [(3, 4), (4, 6), (4, 6), (6, 4)]),
        (lambda g, x: g.reshape(x, (-1, 2)), lambda x: x.reshape(-1, 2), [(2, 3, 4)]),
        (lambda g, x: g.transpose(x, (2, 0, 1)), lambda x: x.transpose(2, 0, 1), [(2, 3, 4)]),
        (lambda g, x: g.narrow(x, 1, 1, 2), lambda x: x[:, 1:3], [(2, 4)]),
        (lambda g, a, b: g.concat([a, b, a], 0), lambda a, b: np.concatenate([a, b, a]), [(2, 3), (1, 3)]),
        (lambda g, x: g.broadcast_to(x, (2, 3, 4)), lambda x: np.broadcast_to(x, (2, 3, 4)), [(3, 1)]),
        (lambda g, x, w, p: g.depthwise_conv1d_causal(x, w, p), K.depthwise_conv1d_causal, [(2, 5, 3), (3, 3), (2, 2, 3)]),
        (lambda g, x, w: g.depthwise_conv1d_causal(x, w), K.depthwise_conv1d_causal, [(1, 4, 2), (2, 2)]),
    ],
)
def test_ops(build, expected, shapes):
    check(build, expected, *(rand(*s) for s in shapes))


def test_constant_gather_embedding():
    table = rand(7, 3)
    ids = np.array([[0, 6], [3, 3]], dtype=np.int64)
    check(lambda g, t, i: g.gather(t, i, axis=0) + g.constant(np.ones(3, np.float32)),
          lambda t, i: np.take(t, i, axis=0) + 1, table, ids)
    check(lambda g, t, i: g.embedding(t, i), K.embedding, table, ids)


@pytest.mark.parametrize("scheme", ["q8_0", "q4_0"])
def test_dequant_matmul(scheme):
    w = K.QUANTIZE[scheme](rand(5, 64))
    check(lambda g, x, wq: g.dequant_matmul(x, wq, scheme),
          lambda x, wq: K.dequant_matmul(x, wq, scheme), rand(3, 64), w)


def test_llama_block_matches_kernel():
    from test_graph import _llama

    g = rlx.Graph("llama")
    y = _llama(g)
    g.output(y)
    ref = rlx.reference(g)
    arrays = {a.name: rand(*a.shape) for a in ref.signature.callable_args}
    expected = K.llama_decoder_block(
        **{k: arrays[k] for k in ("x", "ln1_g", "q_w", "k_w", "v_w", "o_w", "ln2_g", "gate_w",
                                  "up_w", "down_w", "cos", "sin")},
        ln1_b=None, ln2_b=None, num_heads=4, head_dim=8, num_kv_heads=2)
    np.testing.assert_allclose(ref(**arrays), expected, rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------------------- calling convention


@pytest.fixture
def model():
    g = rlx.Graph("m")
    x = g.input("x", (2, 3))
    ids = g.input("ids", (2,), dtype="i32")
    w = g.param("w", (3, 4))
    g.output(g.gather(x @ w, ids), x)
    return rlx.reference(g)


def test_positional_keyword_and_bound_params(model):
    x, w = rand(2, 3), rand(3, 4)
    ids = np.array([1, 0], dtype=np.int32)
    y1, x_out = model(x, ids, w)
    y2, _ = model(ids=ids, x=x, w=w)
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_allclose(y1, (x @ w)[[1, 0]], rtol=1e-6)
    assert x_out is not x and np.array_equal(x_out, x)
    bound = rlx.reference(model.module, params={"w": w})
    np.testing.assert_array_equal(bound(x, ids)[0], y1)


def test_conversions(model):
    x64 = np.asfortranarray(np.random.default_rng(1).standard_normal((2, 3)))
    ids64 = np.array([1, 0], dtype=np.int64)
    y, _ = model(x64, ids64, rand(3, 4))
    assert y.dtype == np.float32 and y.flags.c_contiguous


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(x=rand(2, 4)), r"input 'x' \(f32\[2, 3\]\): expected shape \[2, 3\], got \[2, 4\]"),
        (dict(x=rand(3)), "expected shape"),
        (dict(ids=np.array([0.0, 1.0])), "expected dtype i32 .* got float64"),
        (dict(ids=np.array([0, 2**40])), r"values must fit in i32"),
        (dict(bogus=1), "unknown argument 'bogus' .*arguments: x, ids, w"),
        (dict(x=np.array(["a"] * 6).reshape(2, 3)), "expected dtype f32"),
    ],
)
def test_bad_arguments(model, kwargs, words):
    call = dict(x=rand(2, 3), ids=np.array([0, 1], np.int32), w=rand(3, 4))
    call.update(kwargs)
    with pytest.raises(rlx.ArgumentError, match=words):
        model(**call)


def test_missing_and_extra_positional(model):
    with pytest.raises(rlx.ArgumentError, match="missing argument.*: ids, w"):
        model(rand(2, 3))
    with pytest.raises(rlx.ArgumentError, match="at most 3 positional"):
        model(rand(2, 3), np.zeros(2, np.int32), rand(3, 4), 5)
    with pytest.raises(rlx.ArgumentError, match="both by position and by keyword"):
        model(rand(2, 3), x=rand(2, 3))
    with pytest.raises(rlx.ArgumentError, match="out of range"):
        model(rand(2, 3), np.array([0, 2], np.int32), rand(3, 4))


# ---------------------------------------------------------------------------- lir on real buffers

LIR_TEMPLATE = """
func.func @f(%x: memref<8xf32> {{rlx.name = "x", rlx.role = "input"}},
             %out: memref<8xf32> {{rlx.name = "out0", rlx.role = "output"}}) {{
  %arena = lir.arena size 64 alignment 32 strategy "greedy-by-size" : memref<64xi8>
  %a = lir.slot %arena[0] live [1, 3] : memref<64xi8> -> memref<8xf32>
  %b = lir.slot %arena[{b_offset}] live [2, 3] : memref<64xi8> -> memref<8xf32>
  lir.elementwise exp ins(%x : memref<8xf32>) outs(%a : memref<8xf32>)
  lir.elementwise neg ins(%x : memref<8xf32>) outs(%b : memref<8xf32>)
  lir.elementwise add ins(%a, %b : memref<8xf32>, memref<8xf32>) outs(%out : memref<8xf32>)
  func.return
}}
"""


def _lir(b_offset: int):
    text = LIR_TEMPLATE.format(b_offset=b_offset)
    return Parser(make_context(), text).parse_module()  # not verified: the bad plan must run


def test_lir_runs_on_the_planned_arena():
    x = rand(8)
    (good,) = run_module(_lir(32), {"x": x})
    np.testing.assert_allclose(good, np.exp(x) - x, rtol=1e-6)
    _lir(32).verify()


def test_overlapping_plan_gives_wrong_numbers():
    x = rand(8)
    bad_module = _lir(0)
    with pytest.raises(Exception, match="overlap"):
        bad_module.verify()
    (bad,) = run_module(bad_module, {"x": x})
    assert not np.allclose(bad, np.exp(x) - x)


@pytest.mark.parametrize(
    "predicate, expected",
    [("olt", [1, 0, 0]), ("ult", [1, 0, 1]), ("oge", [0, 1, 0]), ("uge", [0, 1, 1]),
     ("one", [1, 0, 0]), ("ueq", [0, 1, 1]), ("uno", [0, 0, 1]), ("ord", [1, 1, 0])],
)
def test_fused_body_comparisons_follow_ieee_nan_rules(predicate, expected):
    text = f"""
    func.func @f(%a: tensor<3xf32> {{rlx.name = "a", rlx.role = "input"}},
                 %b: tensor<3xf32> {{rlx.name = "b", rlx.role = "input"}}) -> tensor<3xf32> {{
      %r = mir.fused_elementwise ins(%a, %b : tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32> {{
      ^bb0(%x: f32, %y: f32):
        %c = arith.cmpf {predicate}, %x, %y : f32
        %one = arith.constant 1.0 : f32
        %zero = arith.constant 0.0 : f32
        %s = arith.select %c, %one, %zero : f32
        mir.yield %s : f32
      }}
      func.return %r : tensor<3xf32>
    }}"""
    a = np.array([1.0, 2.0, np.nan], np.float32)
    b = np.array([2.0, 2.0, 1.0], np.float32)
    np.testing.assert_array_equal(rlx.reference(text)(a, b), np.array(expected, np.float32))
