"""convert-mir-to-lir: structure (no tensor left, outputs are arguments, kernels write
into them) and numerics (the reference executor gives the same values before and after,
and after lir-plan-arena too).

Graphs are built with `rlx_mlir.Graph` (hir blocks go through convert-hir-to-mir, some
cases through mir-fuse) or written as mir text. The reference executor fills every lir
buffer with NaN/-1 poison before it is written, so a kernel reading an unwritten buffer, or
an output some kernel forgot to write, shows up as a mismatch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from xdsl.dialects import func
from xdsl.dialects.builtin import MemRefType, ModuleOp, StringAttr, TensorType
from xdsl.ir import Attribute, Operation, SSAValue

import rlx_mlir as rlx
from rlx_mlir.core import reference_kernels as rk
from rlx_mlir.core.dtypes import element_name
from rlx_mlir.dialects import lir, mir
from rlx_mlir.dialects.rlx import ElementwiseFn
from rlx_mlir.ir import make_context, parse_module
from rlx_mlir.passes import get_all_passes
from rlx_mlir.passes.convert_mir_to_lir import (
    ELEMENTWISE_FNS,
    KERNELS,
    OWN_PATTERNS,
    ConvertMirToLirPass,
)
from rlx_mlir.passes.lir_plan_arena import LirPlanArenaPass

RTOL = 1e-5
ATOL = 1e-6
NUMPY = {"f32": np.float32, "i32": np.int32, "i64": np.int64, "ui8": np.uint8}


@dataclass
class Case:
    """A module (mir, or hir lowered on the way) and values for its arguments."""

    module: Callable[[], ModuleOp]
    inputs: dict[str, np.ndarray]


# ----------------------------------------------------------------------------- building


class Builder:
    """Declares graph arguments and draws random values for them at the same time."""

    def __init__(self, name: str, seed: int = 0):
        self.g = rlx.Graph(name)
        self.rng = np.random.default_rng(seed)
        self.values: dict[str, np.ndarray] = {}

    def f32(self, name: str, shape: tuple[int, ...], role: str = "input", low: float = -1.0):
        arr = self.rng.uniform(low, 1.0, shape).astype(np.float32)
        return self.bind(name, arr, role)

    def bind(self, name: str, arr: np.ndarray, role: str = "input"):
        dtype = {"float32": "f32", "int32": "i32", "int64": "i64", "uint8": "ui8"}[str(arr.dtype)]
        self.values[name] = arr
        declare = self.g.input if role == "input" else self.g.param
        return declare(name, arr.shape, dtype)

    def case(self, *outputs: rlx.Value, fuse: bool = False) -> Case:
        self.g.output(*outputs)
        graph = self.g

        def build() -> ModuleOp:
            module = graph.to_module()
            lower_to_mir(module, fuse)
            return module

        return Case(build, self.values)


def lower_to_mir(module: ModuleOp, fuse: bool = False) -> None:
    passes = get_all_passes()
    ctx = make_context()
    passes["convert-hir-to-mir"]()().apply(ctx, module)
    if fuse and "mir-fuse" in passes:
        passes["mir-fuse"]()().apply(ctx, module)
    module.verify()


def text_case(text: str, inputs: dict[str, np.ndarray]) -> Case:
    return Case(lambda: parse_module(text), inputs)


def rand(seed: int, *shape: int, low: float = -1.0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(low, 1.0, shape).astype(np.float32)


# ----------------------------------------------------------------------------- cases


def mlp() -> Case:
    b = Builder("mlp")
    x = b.f32("x", (4, 16))
    h = b.g.linear(x, b.f32("w1", (16, 32), "param"), b.f32("b1", (32,), "param"), "gelu")
    return b.case(b.g.softmax(h @ b.f32("w2", (32, 8), "param")))


def elementwise(fuse: bool) -> Case:
    b = Builder("elementwise")
    x = b.f32("x", (3, 8), low=0.1)
    y = b.f32("y", (8,), low=0.1)
    g = b.g
    v = g.add(x, y)
    for fn in ("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "silu", "gelu", "gelu_tanh"):
        v = getattr(g, fn)(v)
    w = g.pow(g.abs(g.neg(g.relu(g.sub(v, y)))), g.div(x, y))
    return b.case(g.maximum(g.minimum(w, x), g.mul(v, 0.5)), fuse=fuse)


def fused_matmul() -> Case:
    b = Builder("fused_matmul")
    x = b.f32("x", (2, 3, 16))
    y = b.g.linear(x, b.f32("w", (16, 8), "param"), b.f32("bias", (8,), "param"), "silu")
    return b.case(b.g.tanh(y * 2.0 + 1.0), fuse=True)


def reductions_norms() -> Case:
    b = Builder("norms")
    x = b.f32("x", (2, 4, 8))
    gamma, beta = b.f32("gamma", (8,), "param"), b.f32("beta", (8,), "param")
    g = b.g
    n = g.layer_norm(g.rms_norm(x, gamma, beta), gamma, beta)
    s = g.softmax(n, axis=1)
    return b.case(
        g.reduce_sum(s, (0, 2)),
        g.reduce_max(s, -1, keepdim=True),
        g.reduce_mean(s, (0, 1, 2)),
        g.reduce_min(n, 1),
        g.residual_rms_norm(x, n, gamma),
    )


def llama(mask_kind: str) -> Case:
    b = Builder("llama")
    s, dm, h, hkv, d, f = 5, 32, 4, 2, 8, 48

    def p(name: str, shape: tuple[int, ...]) -> rlx.Value:
        return b.f32(name, shape, "param")

    x = b.f32("x", (2, s, dm))
    mask = b.f32("mask", (s, s)) if mask_kind == "bias" else None
    y = b.g.llama_decoder_block(
        x,
        p("ln1_g", (dm,)),
        None,
        p("q_w", (dm, h * d)),
        p("k_w", (dm, hkv * d)),
        p("v_w", (dm, hkv * d)),
        p("o_w", (h * d, dm)),
        p("ln2_g", (dm,)),
        None,
        p("gate_w", (dm, f)),
        p("up_w", (dm, f)),
        p("down_w", (f, dm)),
        p("cos", (s, d // 2)),
        p("sin", (s, d // 2)),
        mask,
        num_heads=h,
        head_dim=d,
        num_kv_heads=hkv,
        eps=1e-5,
        mask_kind=mask_kind,
        rope_style="interleaved" if mask_kind == "bias" else "half",
    )
    return b.case(y, fuse=mask_kind == "bias")


def data_movement() -> Case:
    b = Builder("data_movement")
    x = b.f32("x", (1, 6, 8))
    t = b.f32("table", (10, 4), "param")
    ids = b.bind("ids", np.array([[1, 9, 0], [3, 3, 7]], np.int64))
    g = b.g
    e = g.exp(x)
    r = g.reshape(e, (6, 8))
    head = g.narrow(r, 0, 1, 3)  # contiguous: a view
    cols = g.narrow(r, 1, 2, 3)  # strided: the lir.narrow kernel
    cat = g.concat([head, g.reshape(g.narrow(e, 1, 4, 2), (2, 8)), g.constant(np.ones((1, 8)))], 0)
    tr = g.transpose(cat, (1, 0))
    bc = g.broadcast_to(g.narrow(cols, 1, 0, 1), (2, 6, 5))
    return b.case(tr, bc, g.gather(t, ids), g.embedding(t, ids), cat)


def dequant_conv() -> Case:
    b = Builder("dequant_conv")
    x = b.f32("x", (3, 64))
    w8 = b.bind(
        "w8", rk.QUANTIZE["q8_0"](b.rng.standard_normal((5, 64)).astype(np.float32)), "param"
    )
    w4 = b.bind(
        "w4", rk.QUANTIZE["q4_0"](b.rng.standard_normal((5, 64)).astype(np.float32)), "param"
    )
    g = b.g
    y = g.dequant_matmul(x, w8, "q8_0") + g.dequant_matmul(x, w4, "q4_0")
    seq = g.reshape(y, (1, 3, 5))
    conv = g.depthwise_conv1d_causal(seq, b.f32("k", (3, 5), "param"))
    return b.case(conv, g.depthwise_conv1d_causal(seq, b.f32("k1", (1, 5), "param")))


def outputs_alias() -> Case:
    """Returned input, a value returned twice, a returned view of an input, a returned
    reshape of a single-use value, a returned narrow, a returned value used later."""
    b = Builder("outputs")
    x = b.f32("x", (4, 6))
    g = b.g
    t = g.tanh(x)
    s = g.sigmoid(t)
    return b.case(
        x,
        t,
        t,
        g.reshape(x, (24,)),
        g.reshape(g.exp(x), (2, 12)),
        g.narrow(s, 0, 1, 2),
        s,
        g.narrow(s, 1, 1, 2),
    )


INTEGERS_TEXT = """
func.func @integers(%a: tensor<2x3xi32>, %c: tensor<3xi32>) -> tensor<2x3xi32> {
  %s = mir.add %a, %c : (tensor<2x3xi32>, tensor<3xi32>) -> tensor<2x3xi32>
  %p = mir.mul %a, %c : (tensor<2x3xi32>, tensor<3xi32>) -> tensor<2x3xi32>
  %m = mir.max %s, %p : (tensor<2x3xi32>, tensor<2x3xi32>) -> tensor<2x3xi32>
  %n = mir.neg %m : tensor<2x3xi32>
  %y = mir.abs %n : tensor<2x3xi32>
  func.return %y : tensor<2x3xi32>
}
"""

FUSED_TEXT = """
func.func @fused(%x: tensor<4x8xf32>, %c: tensor<f32>) -> (tensor<4x8xf32>, tensor<32xf32>) {
  %y = mir.fused_elementwise ins(%x, %c : tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32> {
  ^bb0(%a: f32, %s: f32):
    %m = arith.mulf %a, %s : f32
    %r = math.tanh %m : f32
    mir.yield %r : f32
  }
  %f = mir.reshape %y : tensor<4x8xf32> -> tensor<32xf32>
  %z = mir.exp %f : tensor<32xf32>
  %w = mir.reshape %z : tensor<32xf32> -> tensor<4x8xf32>
  %n = mir.narrow %w axis 0 start 1 length 2 : tensor<4x8xf32> -> tensor<2x8xf32>
  %q = mir.reshape %n : tensor<2x8xf32> -> tensor<16xf32>
  %v = mir.concat %q, %q axis 0 : (tensor<16xf32>, tensor<16xf32>) -> tensor<32xf32>
  func.return %y, %v : tensor<4x8xf32>, tensor<32xf32>
}
"""

CASES: dict[str, Callable[[], Case]] = {
    "mlp": mlp,
    "elementwise": lambda: elementwise(False),
    "elementwise-fused": lambda: elementwise(True),
    "fused_matmul": fused_matmul,
    "reductions-norms": reductions_norms,
    "llama-causal": lambda: llama("causal"),
    "llama-bias-fused": lambda: llama("bias"),
    "data_movement": data_movement,
    "dequant-conv": dequant_conv,
    "outputs-alias": outputs_alias,
    "integers": lambda: text_case(
        INTEGERS_TEXT,
        {"a": np.array([[1, -2, 3], [4, 5, -6]], np.int32), "c": np.array([7, -8, 9], np.int32)},
    ),
    "fused-text": lambda: text_case(FUSED_TEXT, {"x": rand(1, 4, 8), "c": rand(2)}),
}


# ----------------------------------------------------------------------------- helpers


def bufferize(module: ModuleOp) -> ModuleOp:
    ConvertMirToLirPass().apply(make_context(), module)
    module.verify()
    return module


def the_function(module: ModuleOp) -> func.FuncOp:
    (fn,) = [op for op in module.ops if isinstance(op, func.FuncOp)]
    return fn


def types_in(attr: Attribute) -> list[Attribute]:
    """`attr` and every attribute nested in its parameters."""
    found = [attr]
    params = getattr(attr, "parameters", None)
    if params is None:
        params = getattr(attr, "data", ())
    if isinstance(params, tuple | list):
        for p in params:
            if isinstance(p, Attribute):
                found += types_in(p)
    elif isinstance(params, dict):
        for p in params.values():
            if isinstance(p, Attribute):
                found += types_in(p)
    return found


def tensor_types(module: ModuleOp) -> list[str]:
    """Every tensor type in the module: values, block arguments, properties, attributes."""
    found: list[str] = []
    for op in module.walk():
        values: list[SSAValue] = [*op.operands, *op.results]
        for region in op.regions:
            for block in region.blocks:
                values += block.args
        attrs = [v.type for v in values]
        attrs += [a for a in op.properties.values() if a is not None]
        attrs += list(op.attributes.values())
        found += [
            f"{op.name}: {t}" for a in attrs for t in types_in(a) if isinstance(t, TensorType)
        ]
    return found


def kernel_out(op: Operation) -> SSAValue | None:
    return op.operands[-1] if isinstance(op, lir.KernelOp) else None


def base_buffer(value: SSAValue) -> SSAValue:
    while isinstance(value.owner, lir.ViewOp):
        value = value.owner.source
    return value


def run(module: ModuleOp, inputs: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    from rlx_mlir.reference import run_module

    return run_module(module, inputs)


# ----------------------------------------------------------------------------- structure


@pytest.mark.parametrize("name", list(CASES))
def test_structure(name: str) -> None:
    case = CASES[name]()
    before = case.module()
    result_types = the_function(before).function_type.outputs.data
    arg_count = len(the_function(before).args)
    module = bufferize(case.module())
    fn = the_function(module)

    assert tensor_types(module) == []
    assert "tensor" not in str(module)
    assert not [op.name for op in module.walk() if op.dialect_name() == "mir"]

    # Outputs are trailing memref arguments named out<i>; the function returns nothing.
    assert fn.function_type.outputs.data == ()
    assert fn.res_attrs is None
    outputs = fn.args[arg_count:]
    assert len(outputs) == len(result_types)
    assert fn.arg_attrs is not None
    for i, (out, ty) in enumerate(zip(outputs, result_types, strict=True)):
        assert isinstance(ty, TensorType)
        assert out.type == MemRefType(ty.get_element_type(), ty.get_shape())
        attrs = fn.arg_attrs.data[arg_count + i].data
        assert attrs["rlx.name"] == StringAttr(f"out{i}")
        assert attrs["rlx.role"] == StringAttr("output")
    for i in range(arg_count):
        assert fn.arg_attrs.data[i] == (the_function(before).arg_attrs or fn.arg_attrs).data[i]
    ret = fn.body.block.last_op
    assert isinstance(ret, func.ReturnOp) and not ret.arguments

    # Every output is written exactly once: by a kernel (possibly through a view).
    writes = [base_buffer(out) for op in fn.walk() if (out := kernel_out(op)) is not None]
    for out in outputs:
        assert writes.count(out) == 1, (out.name_hint, str(fn))
    # A fresh alloc for every other kernel, right before it (or before its view); a kernel
    # with several outs (lir.shared_input_matmul) has its allocs in a row before it.
    for op in fn.body.block.ops:
        if isinstance(op, lir.AllocOp):
            assert op.result.uses, "an alloc nobody writes"
            kernel = op.next_op
            while isinstance(kernel, lir.AllocOp):
                kernel = kernel.next_op
            assert isinstance(kernel, lir.KernelOp)
            outs = kernel.operands[-1:] if kernel is op.next_op else kernel.operands
            assert op.result in outs


@pytest.mark.parametrize("name", list(CASES))
def test_numerics_before_and_after(name: str) -> None:
    case = CASES[name]()
    module = case.module()
    declared = [
        (tuple(t.get_shape()), NUMPY[element_name(t.get_element_type())])
        for t in the_function(module).function_type.outputs.data
    ]
    before = run(module, case.inputs)
    after = run(bufferize(case.module()), case.inputs)
    assert len(before) == len(after) == len(declared)
    for b, a, (shape, dtype) in zip(before, after, declared, strict=True):
        # The declared types (the reference's mir kernels compute integers as float32).
        assert a.shape == shape and a.dtype == dtype
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("strategy", ["greedy-by-size", "naive"])
@pytest.mark.parametrize("name", list(CASES))
def test_numerics_after_arena(name: str, strategy: str) -> None:
    case = CASES[name]()
    before = run(case.module(), case.inputs)
    module = bufferize(case.module())
    LirPlanArenaPass(strategy=strategy).apply(make_context(), module)
    module.verify()
    assert not [op for op in module.walk() if isinstance(op, lir.AllocOp)]
    after = run(module, case.inputs)
    for b, a in zip(before, after, strict=True):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)


def test_outputs_alias_structure() -> None:
    """Copies exactly where an output cannot be written by its producer."""
    module = bufferize(CASES["outputs-alias"]().module())
    fn = the_function(module)
    x, out = fn.args[0], fn.args[1:]
    copies = [(op.input, op.out) for op in fn.body.block.ops if isinstance(op, lir.CopyOp)]
    # out0 = x (an input); out2 = t, already written to out1; out3 = a view of x;
    # out5 = a contiguous narrow of s, already written to out6: a view of out6.
    assert [o for _, o in copies] == [out[0], out[2], out[3], out[5]]
    assert copies[0][0] is x and copies[1][0] is out[1]
    assert base_buffer(copies[2][0]) is x and base_buffer(copies[3][0]) is out[6]
    # exp(x) reshaped and returned: exp writes into a view of out4, no copy.
    exp = next(op for op in fn.walk() if isinstance(op, lir.ElementwiseOp) and op.fn.data == "exp")
    assert isinstance(exp.out.owner, lir.ViewOp) and exp.out.owner.source is out[4]
    # The strided narrow writes out7 itself; sigmoid(t) reads out1 and writes out6.
    narrow = next(op for op in fn.walk() if isinstance(op, lir.NarrowOp))
    assert narrow.out is out[7] and narrow.input is out[6]
    assert not [op for op in fn.walk() if isinstance(op, lir.AllocOp)]


def test_contiguous_narrow_and_reshape_are_views() -> None:
    module = bufferize(CASES["data_movement"]().module())
    fn = the_function(module)
    narrows = [op for op in fn.walk() if isinstance(op, lir.NarrowOp)]
    # The two narrows of the last axis copy; the three contiguous ones and the reshapes
    # are views of the exp buffer (flattened: no view of a view).
    assert [(op.axis.value.data, op.start.value.data) for op in narrows] == [(1, 2), (1, 0)]
    views = [op for op in fn.walk() if isinstance(op, lir.ViewOp)]
    exp_buffer = next(op for op in fn.walk() if isinstance(op, lir.ElementwiseOp)).out
    assert [op.offset.value.data for op in views] == [0, 8, 32]
    assert all(op.source is exp_buffer for op in views)


def test_every_mir_op_has_a_pattern() -> None:
    """Every mir op is lowered: elementwise, by its twin kernel or by a pattern of its own
    (the tables come from the op registry; tests/test_registry.py checks them per op)."""
    handled = set(ELEMENTWISE_FNS) | set(KERNELS) | set(OWN_PATTERNS) | {mir.YieldOp}
    assert set(mir.MIR.operations) == handled
    assert set(ELEMENTWISE_FNS.values()) == set(ElementwiseFn)


def test_already_bufferized_is_unchanged() -> None:
    text = """
    func.func @f(%x: memref<3xf32>, %o: memref<3xf32>) {
      lir.elementwise exp ins(%x : memref<3xf32>) outs(%o : memref<3xf32>)
      func.return
    }
    """
    module = parse_module(text)
    before = str(module)
    assert str(bufferize(module)) == before


def test_pass_is_registered() -> None:
    assert get_all_passes()["convert-mir-to-lir"]() is ConvertMirToLirPass
    assert ConvertMirToLirPass.name == "convert-mir-to-lir"
