"""mir-fuse (and the mir canonicalization it runs after): op structure and numerics.

Graphs are built with `rlx_mlir.Graph`, the pass runs on `g.to_module()`, and the
reference executor runs the module before and after on the same random inputs (it runs a
fused_elementwise body once on whole arrays).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np
import pytest
from xdsl.dialects import arith
from xdsl.dialects import math as mathd
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.transforms.canonicalize import CanonicalizePass
from xdsl.transforms.common_subexpression_elimination import CommonSubexpressionElimination

import rlx_mlir as rlx
from rlx_mlir.dialects import mir
from rlx_mlir.ir import make_context
from rlx_mlir.passes.convert_hir_to_mir import ConvertHirToMirPass
from rlx_mlir.passes.mir_fuse import MirFusePass
from rlx_mlir.reference import run_module

RTOL = 1e-5
ATOL = 1e-6

UNARY = (
    "neg",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "tanh",
    "sigmoid",
    "silu",
    "gelu",
    "gelu_tanh",
    "relu",
    "abs",
    "softplus",
)
BINARY = ("add", "sub", "mul", "div", "maximum", "minimum", "pow")
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh")
POSITIVE_DOMAIN = {"log", "sqrt", "rsqrt"}


# ----------------------------------------------------------------------------- helpers


def fuse(module: ModuleOp, **options: bool) -> ModuleOp:
    MirFusePass(**options).apply(make_context(), module)
    module.verify()
    return module


def body_ops(module: ModuleOp) -> list[Operation]:
    """The ops of the graph function, without the return."""
    fn = next(op for op in module.ops)
    return [op for op in fn.body.block.ops if op.name != "func.return"]


def op_names(module: ModuleOp) -> list[str]:
    return [op.name for op in body_ops(module)]


def random_inputs(g: rlx.Graph, rng: np.random.Generator, positive: bool = False) -> dict:
    module = g.to_module()
    fn = next(op for op in module.ops)
    arrays = {}
    for arg, attrs in zip(fn.body.block.args, fn.arg_attrs, strict=True):
        name = attrs.data["rlx.name"].data
        shape = arg.type.get_shape()
        data = rng.standard_normal(shape).astype(np.float32)
        arrays[name] = np.abs(data) + 0.5 if positive else data
    return arrays


def assert_same_numerics(g: rlx.Graph, fused: ModuleOp, seed: int = 0, positive: bool = False):
    arrays = random_inputs(g, np.random.default_rng(seed), positive)
    before = run_module(g.to_module(), arrays)
    after = run_module(fused, arrays)
    assert len(before) == len(after)
    for b, a in zip(before, after, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)


def fused_elementwise_ops(module: ModuleOp) -> list[mir.FusedElementwiseOp]:
    return [op for op in body_ops(module) if isinstance(op, mir.FusedElementwiseOp)]


# ----------------------------------------------------------------------------- matmul epilogues


def linear_graph(activation: str | None, bias: str | None = "right") -> rlx.Graph:
    g = rlx.Graph("lin")
    x = g.input("x", (3, 4, 8))
    w = g.param("w", (8, 16))
    y = g.matmul(x, w)
    if bias is not None:
        b = g.param("b", (16,))
        y = y + b if bias == "right" else b + y
    if activation is not None:
        y = getattr(g, activation)(y)
    g.output(y)
    return g


@pytest.mark.parametrize("bias", ["right", "left"])
def test_matmul_bias(bias: str):
    g = linear_graph(None, bias)
    fused = fuse(g.to_module())
    (op,) = body_ops(fused)
    assert isinstance(op, mir.FusedMatmulOp)
    assert op.bias is not None and op.activation is None
    assert_same_numerics(g, fused)


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("bias", ["right", "left", None])
def test_matmul_bias_activation(activation: str, bias: str | None):
    g = linear_graph(activation, bias)
    fused = fuse(g.to_module())
    (op,) = body_ops(fused)
    assert isinstance(op, mir.FusedMatmulOp)
    assert (op.bias is not None) == (bias is not None)
    assert op.activation is not None and op.activation.data.value == activation
    assert_same_numerics(g, fused)


def test_matmul_with_two_uses_is_not_fused():
    g = rlx.Graph("two_uses")
    x = g.input("x", (4, 8))
    w = g.param("w", (8, 16))
    b = g.param("b", (16,))
    m = g.matmul(x, w)
    g.output(g.relu(m + b), m)
    fused = fuse(g.to_module())
    assert op_names(fused) == ["mir.matmul", "mir.fused_elementwise"]
    assert_same_numerics(g, fused)


def test_second_activation_stays_after_the_fused_matmul():
    g = rlx.Graph("two_acts")
    x = g.input("x", (4, 8))
    w = g.param("w", (8, 16))
    g.output(g.gelu(g.tanh(g.matmul(x, w))))
    fused = fuse(g.to_module())
    assert op_names(fused) == ["mir.fused_matmul", "mir.gelu"]
    assert_same_numerics(g, fused)


def test_residual_is_not_a_bias():
    g = rlx.Graph("residual")
    x = g.input("x", (4, 8))
    w = g.param("w", (8, 8))
    g.output(g.matmul(x, w) + x)
    fused = fuse(g.to_module())
    assert op_names(fused) == ["mir.matmul", "mir.add"]


# ----------------------------------------------------------------------------- elementwise trees


@pytest.mark.parametrize("name", UNARY)
def test_each_unary_body(name: str):
    g = rlx.Graph(f"unary_{name}")
    x = g.input("x", (4, 8))
    y = getattr(g, name)(x)
    g.output(y * 2.0 + x)
    fused = fuse(g.to_module())
    (op,) = body_ops(fused)
    assert isinstance(op, mir.FusedElementwiseOp)
    assert len(op.inputs) == 1  # x once; 2.0 is an arith.constant in the body
    assert_same_numerics(g, fused, positive=name in POSITIVE_DOMAIN)


@pytest.mark.parametrize("name", BINARY)
def test_each_binary_body_with_broadcast(name: str):
    g = rlx.Graph(f"binary_{name}")
    a = g.input("a", (4, 8))
    b = g.input("b", (8,))
    c = g.input("c", (4, 1))
    y = getattr(g, name)(a, b)
    g.output(g.exp(getattr(g, name)(c, y) * 0.25))
    fused = fuse(g.to_module())
    (op,) = body_ops(fused)
    assert isinstance(op, mir.FusedElementwiseOp)
    assert [v.type.get_shape() for v in op.inputs] == [(4, 1), (4, 8), (8,)]
    assert_same_numerics(g, fused, positive=True)


def test_all_unary_ops_in_one_chain():
    g = rlx.Graph("chain")
    x = g.input("x", (2, 16))
    y = x
    for name in UNARY:
        y = getattr(g, name)(y)
    g.output(y)
    fused = fuse(g.to_module())
    (op,) = body_ops(fused)
    assert isinstance(op, mir.FusedElementwiseOp)
    kinds = Counter(type(o) for o in op.body.block.ops)
    # exp: exp, sigmoid, silu's sigmoid, softplus; tanh: tanh, gelu_tanh; erf: gelu
    assert kinds[mathd.ErfOp] == 1 and kinds[mathd.TanhOp] == 2 and kinds[mathd.ExpOp] == 4
    # select: relu (x < 0 ? 0 : x) and softplus's log1p; max: softplus
    assert kinds[arith.SelectOp] == 2 and kinds[arith.MaximumfOp] == 1
    assert_same_numerics(g, fused, positive=True)


def test_shared_leaf_is_one_input():
    g = rlx.Graph("dedup")
    x = g.input("x", (8,))
    y = g.input("y", (8,))
    g.output((x * x + x) / (y - x))
    fused = fuse(g.to_module())
    (op,) = fused_elementwise_ops(fused)
    assert len(op.inputs) == 2
    assert len(op.body.block.args) == 2
    assert_same_numerics(g, fused)


def test_rank0_and_splat_constants_are_absorbed():
    g = rlx.Graph("consts")
    x = g.input("x", (4, 8))
    ones = g.constant(np.ones((8,), np.float32))
    g.output(g.sqrt(x * x + ones) * 3.0 - 1.0)
    fused = fuse(g.to_module())
    assert op_names(fused) == ["mir.fused_elementwise"]  # the constant ops are gone
    (op,) = fused_elementwise_ops(fused)
    assert len(op.inputs) == 1
    constants = [o for o in op.body.block.ops if isinstance(o, arith.ConstantOp)]
    assert sorted(c.value.value.data for c in constants) == [1.0, 3.0]
    assert_same_numerics(g, fused)


def test_single_op_is_not_fused():
    g = rlx.Graph("single")
    x = g.input("x", (8,))
    g.output(g.exp(x), g.neg(x))
    fused = fuse(g.to_module())
    assert op_names(fused) == ["mir.exp", "mir.neg"]


def test_multi_use_value_splits_trees():
    g = rlx.Graph("split")
    x = g.input("x", (8,))
    t = g.tanh(x + 1.0)
    g.output(g.abs(g.exp(t) - t), t)
    fused = fuse(g.to_module())
    ops = fused_elementwise_ops(fused)
    assert len(ops) == 2
    assert ops[1].inputs[0] is ops[0].result
    assert_same_numerics(g, fused)


def rms_norm_graph() -> rlx.Graph:
    g = rlx.Graph("rms")
    x = g.input("x", (4, 16))
    gamma = g.param("gamma", (16,))
    r = g.rsqrt(g.reduce_mean(x * x, -1, keepdim=True) + 1e-5)
    g.output(x * r * gamma)
    return g


def test_smaller_inner_values_stay_out_by_default():
    g = rms_norm_graph()
    fused = fuse(g.to_module())
    assert op_names(fused) == [
        "mir.mul",
        "mir.reduce",
        "mir.fused_elementwise",
        "mir.fused_elementwise",
    ]
    assert_same_numerics(g, fused)


def test_fuse_broadcast_option():
    g = rms_norm_graph()
    fused = fuse(g.to_module(), fuse_broadcast=True)
    assert op_names(fused) == ["mir.mul", "mir.reduce", "mir.fused_elementwise"]
    (op,) = fused_elementwise_ops(fused)
    assert [v.type.get_shape() for v in op.inputs] == [(4, 16), (4, 1), (16,)]
    assert_same_numerics(g, fused)


def test_fusion_is_idempotent():
    g = rlx.Graph("twice")
    x = g.input("x", (4, 8))
    w = g.param("w", (8, 8))
    b = g.param("b", (8,))
    h = g.gelu(g.matmul(x, w) + b)
    g.output(g.silu(h * 0.5 + x) - x)
    once = fuse(g.to_module())
    text = str(once)
    assert str(fuse(once)) == text
    assert op_names(once) == ["mir.fused_matmul", "mir.fused_elementwise"]


def test_existing_fused_elementwise_joins_a_tree():
    g = rlx.Graph("refuse")
    x = g.input("x", (8,))
    g.output(g.exp(x + 1.0))
    module = fuse(g.to_module())
    # Put one more op after the fused op and fuse again: the body is inlined.
    (fused_op,) = fused_elementwise_ops(module)
    neg = mir.NegOp(fused_op.result)
    fused_op.parent_block().insert_op_after(neg, fused_op)
    ret = fused_op.parent_block().last_op
    ret.operands = [neg.result]
    module.verify()
    refused = fuse(module)
    (op,) = body_ops(refused)
    assert isinstance(op, mir.FusedElementwiseOp)
    arrays = {"x": np.linspace(-2, 2, 8, dtype=np.float32)}
    (out,) = run_module(refused, arrays)
    np.testing.assert_allclose(out, -np.exp(arrays["x"] + 1.0), rtol=RTOL, atol=ATOL)


# ----------------------------------------------------------------------------- pipelines


def canonicalize_cse(module: ModuleOp) -> ModuleOp:
    ctx = make_context()
    CanonicalizePass().apply(ctx, module)
    CommonSubexpressionElimination().apply(ctx, module)
    module.verify()
    return module


def test_canonicalize_then_fuse():
    g = rlx.Graph("canon")
    x = g.input("x", (4, 6))
    w = g.param("w", (6, 8))
    b = g.param("b", (8,))
    scale = g.exp(g.constant(np.float32(0.5)))  # folds to a constant
    t = g.transpose(g.transpose(x, (1, 0)), (1, 0))  # cancels
    r = g.reshape(g.reshape(t, (24,)), (4, 6))  # cancels
    y = g.relu(g.matmul(r, w) + b)
    g.output(y * scale + 1.0)
    module = canonicalize_cse(g.to_module())
    assert Counter(op_names(module)) == Counter(
        ["mir.constant", "mir.matmul", "mir.add", "mir.relu", "mir.mul", "mir.constant", "mir.add"]
    )
    fused = fuse(module)
    assert op_names(fused) == ["mir.fused_matmul", "mir.fused_elementwise"]
    assert_same_numerics(g, fused)


def _llama_graph() -> tuple[rlx.Graph, Callable[[np.random.Generator], dict]]:
    g = rlx.Graph("llama")
    s, d, heads, kv, hd, ff = 4, 16, 2, 1, 8, 24
    x = g.input("x", (s, d))
    cos = g.input("cos", (s, hd // 2))
    sin = g.input("sin", (s, hd // 2))
    p = {
        n: g.param(n, shape)
        for n, shape in {
            "ln1_g": (d,),
            "q_w": (d, heads * hd),
            "k_w": (d, kv * hd),
            "v_w": (d, kv * hd),
            "o_w": (heads * hd, d),
            "ln2_g": (d,),
            "gate_w": (d, ff),
            "up_w": (d, ff),
            "down_w": (ff, d),
        }.items()
    }
    y = g.llama_decoder_block(
        x,
        p["ln1_g"],
        None,
        p["q_w"],
        p["k_w"],
        p["v_w"],
        p["o_w"],
        p["ln2_g"],
        None,
        p["gate_w"],
        p["up_w"],
        p["down_w"],
        cos,
        sin,
        num_heads=heads,
        head_dim=hd,
        num_kv_heads=kv,
    )
    g.output(y)
    return g


def test_llama_block_after_hir_to_mir():
    g = _llama_graph()
    module = g.to_module()
    ConvertHirToMirPass().apply(make_context(), module)
    before = Counter(op_names(module))
    apart = Counter(op_names(fuse(module.clone(), shared_input=False)))
    assert sum(apart.values()) == sum(before.values()) - 1
    fused = fuse(module)
    after = Counter(op_names(fused))
    # shared-input: q/k/v (three matmuls of the normed x) become one op
    assert sum(after.values()) == sum(before.values()) - 3
    assert after["mir.fused_matmul"] == 1 and "mir.silu" not in after
    assert after["mir.shared_input_matmul"] == 1
    assert_same_numerics(g, fused)
