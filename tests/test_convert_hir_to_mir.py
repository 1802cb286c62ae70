"""convert-hir-to-mir: every hir op expands into the mir primitives of SPEC "Semantics".

Each case builds a graph with `rlx_mlir.Graph`, lowers it, checks that no hir op remains,
that the module verifies, that the emitted mir op sequence is the expected one, and (with
the reference executor `rlx_mlir.reference.run_module`) that the module computes the same
values before and after the pass on random inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

import rlx_mlir as rlx
from rlx_mlir.core import reference_kernels as rk
from rlx_mlir.dialects import hir
from rlx_mlir.ir import make_context
from rlx_mlir.passes import get_all_passes
from rlx_mlir.passes.convert_hir_to_mir import ConvertHirToMirPass
from rlx_mlir.reference import run_module

RTOL = 1e-5
ATOL = 1e-5


@dataclass
class Case:
    """A graph, values for its arguments, and the mir ops the pass must emit (in order)."""

    graph: rlx.Graph
    inputs: dict[str, np.ndarray]
    expected: list[str]


class Builder:
    """Declares graph arguments and draws random values for them at the same time."""

    def __init__(self, name: str, seed: int = 0):
        self.g = rlx.Graph(name)
        self.rng = np.random.default_rng(seed)
        self.values: dict[str, np.ndarray] = {}

    def f32(self, name: str, shape: tuple[int, ...], scale: float = 1.0, role: str = "input"):
        arr = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        return self.bind(name, arr, role)

    def bind(self, name: str, arr: np.ndarray, role: str = "input"):
        dtype = {"float32": "f32", "int32": "i32", "int64": "i64", "uint8": "ui8"}[str(arr.dtype)]
        self.values[name] = arr
        declare = self.g.input if role == "input" else self.g.param
        return declare(name, arr.shape, dtype)

    def case(self, out: rlx.Value, expected: list[str]) -> Case:
        self.g.output(out)
        return Case(self.g, self.values, expected)


# ----------------------------------------------------------------------------- cases


def linear(bias: bool, activation: str | None, x_shape: tuple[int, ...] = (2, 3, 16)) -> Case:
    b = Builder("linear")
    x = b.f32("x", x_shape)
    w = b.f32("w", (16, 8), 0.25, "param")
    bb = b.f32("b", (8,), role="param") if bias else None
    y = b.g.linear(x, w, bb, activation=activation)
    expected = ["mir.matmul"] + (["mir.add"] if bias else [])
    expected += [f"mir.{activation}"] if activation else []
    return b.case(y, expected)


def swiglu_ffn() -> Case:
    b = Builder("swiglu")
    x = b.f32("x", (5, 16))
    up = b.f32("up", (16, 24), 0.25, "param")
    gate = b.f32("gate", (16, 24), 0.25, "param")
    down = b.f32("down", (24, 12), 0.25, "param")
    y = b.g.swiglu_ffn(x, up, gate, down)
    return b.case(y, ["mir.matmul", "mir.silu", "mir.matmul", "mir.mul", "mir.matmul"])


def rms_norm(beta: bool) -> Case:
    b = Builder("rms_norm")
    x = b.f32("x", (2, 4, 16))
    gamma = b.f32("gamma", (16,), role="param")
    beta_v = b.f32("beta", (16,), role="param") if beta else None
    y = b.g.rms_norm(x, gamma, beta_v, eps=1e-6 if beta else 1e-5)
    return b.case(y, ["mir.rms_norm"])


def residual_rms_norm(beta: bool) -> Case:
    b = Builder("residual_rms_norm")
    x = b.f32("x", (4, 16))
    r = b.f32("r", (4, 16))
    gamma = b.f32("gamma", (16,), role="param")
    beta_v = b.f32("beta", (16,), role="param") if beta else None
    y = b.g.residual_rms_norm(x, r, gamma, beta_v, eps=1e-4)
    return b.case(y, ["mir.add", "mir.rms_norm"])


def layer_norm() -> Case:
    b = Builder("layer_norm")
    x = b.f32("x", (3, 16), 2.0)
    gamma = b.f32("gamma", (16,), role="param")
    beta = b.f32("beta", (16,), role="param")
    return b.case(b.g.layer_norm(x, gamma, beta, eps=1e-3), ["mir.layer_norm"])


def attention(mask_kind: str, batched: bool = True) -> Case:
    b = Builder("attention")
    lead = (2,) if batched else ()
    s, t, h, hkv, d = 4, 6, 4, 2, 8
    q = b.f32("q", (*lead, s, h * d))
    k = b.f32("k", (*lead, t, hkv * d))
    v = b.f32("v", (*lead, t, hkv * d))
    mask = None
    if mask_kind == "custom":
        keep = (b.rng.random((s, t)) < 0.7).astype(np.float32)
        keep[1] = 0.0  # a row that drops every key yields zeros
        mask = b.bind("mask", keep)
    elif mask_kind == "bias":
        mask = b.f32("mask", (1, h, s, t))
    y = b.g.attention(
        q,
        k,
        v,
        mask,
        num_heads=h,
        head_dim=d,
        num_kv_heads=hkv,
        mask_kind=mask_kind,
        scale=0.3 if mask_kind == "bias" else None,
    )
    return b.case(y, ["mir.attention"])


def rope(style: str, n_rot: int | None, batched: bool = True) -> Case:
    b = Builder("rope")
    lead = (2,) if batched else ()
    x = b.f32("x", (*lead, 5, 3 * 8))
    half = (n_rot or 8) // 2
    cos = b.f32("cos", (5, half), role="param")
    sin = b.f32("sin", (5, half), role="param")
    return b.case(b.g.rope(x, cos, sin, 8, n_rot, style), ["mir.rope"])


LLAMA_OPS = [
    "mir.rms_norm",
    "mir.matmul",
    "mir.matmul",
    "mir.matmul",
    "mir.rope",
    "mir.rope",
    "mir.attention",
    "mir.matmul",
    "mir.add",
    "mir.rms_norm",
    "mir.matmul",
    "mir.silu",
    "mir.matmul",
    "mir.mul",
    "mir.matmul",
    "mir.add",
]


def llama_decoder_block(
    betas: bool, mask_kind: str = "causal", rope_style: str = "half", batched: bool = True
) -> Case:
    b = Builder("llama")
    lead = (2,) if batched else ()
    s, dm, h, hkv, d, f = 5, 32, 4, 2, 8, 48
    x = b.f32("x", (*lead, s, dm))

    def p(name: str, shape: tuple[int, ...], scale: float = 0.2) -> rlx.Value:
        return b.f32(name, shape, scale, "param")

    ln1_b = p("ln1_b", (dm,)) if betas else None
    ln2_b = p("ln2_b", (dm,)) if betas else None
    mask = None
    if mask_kind == "bias":
        mask = b.f32("mask", (s, s))
    elif mask_kind == "custom":
        mask = b.bind("mask", np.tril(np.ones((s, s), np.float32)))
    y = b.g.llama_decoder_block(
        x,
        p("ln1_g", (dm,), 1.0),
        ln1_b,
        p("q_w", (dm, h * d)),
        p("k_w", (dm, hkv * d)),
        p("v_w", (dm, hkv * d)),
        p("o_w", (h * d, dm)),
        p("ln2_g", (dm,), 1.0),
        ln2_b,
        p("gate_w", (dm, f)),
        p("up_w", (dm, f)),
        p("down_w", (f, dm)),
        p("cos", (s, d // 2), 1.0),
        p("sin", (s, d // 2), 1.0),
        mask,
        num_heads=h,
        head_dim=d,
        num_kv_heads=hkv,
        eps=1e-6 if betas else 1e-5,
        mask_kind=mask_kind,
        rope_style=rope_style,
    )
    return b.case(y, LLAMA_OPS)


def embedding(dtype: str) -> Case:
    b = Builder("embedding")
    table = b.f32("table", (10, 6), role="param")
    ids = b.bind("ids", b.rng.integers(0, 10, (2, 3)).astype(dtype))
    return b.case(b.g.embedding(table, ids), ["mir.gather"])


def dequant_matmul(scheme: str) -> Case:
    b = Builder("dequant")
    x = b.f32("x", (3, 64))
    w = b.bind("w", rk.QUANTIZE[scheme](b.rng.standard_normal((5, 64)).astype(np.float32)), "param")
    return b.case(b.g.dequant_matmul(x, w, scheme), ["mir.dequant_matmul"])


def depthwise_conv1d_causal(taps: int, left_pad: bool) -> Case:
    b = Builder("dwconv")
    x = b.f32("x", (2, 5, 4))
    w = b.f32("w", (taps, 4), role="param")
    pad = b.f32("left_pad", (2, taps - 1, 4)) if left_pad else None
    expected = ["mir.depthwise_conv1d"]
    if taps > 1:
        expected = (
            ["mir.concat", *expected] if left_pad else ["mir.constant", "mir.concat", *expected]
        )
    return b.case(b.g.depthwise_conv1d_causal(x, w, pad), expected)


CASES: dict[str, Callable[[], Case]] = {
    "linear": lambda: linear(False, None),
    "linear-bias": lambda: linear(True, None),
    **{f"linear-bias-{a}": (lambda a=a: linear(True, a)) for a in rk.ACTIVATIONS},
    "linear-vector-tanh": lambda: linear(False, "tanh", (16,)),
    "swiglu_ffn": swiglu_ffn,
    "rms_norm": lambda: rms_norm(False),
    "rms_norm-beta": lambda: rms_norm(True),
    "residual_rms_norm": lambda: residual_rms_norm(False),
    "residual_rms_norm-beta": lambda: residual_rms_norm(True),
    "layer_norm": layer_norm,
    "attention-none": lambda: attention("none"),
    "attention-causal": lambda: attention("causal"),
    "attention-custom": lambda: attention("custom"),
    "attention-bias": lambda: attention("bias"),
    "attention-unbatched": lambda: attention("causal", batched=False),
    "rope-half": lambda: rope("half", None),
    "rope-interleaved-partial": lambda: rope("interleaved", 4),
    "rope-unbatched": lambda: rope("half", 6, batched=False),
    "llama": lambda: llama_decoder_block(False),
    "llama-betas-bias-interleaved": lambda: llama_decoder_block(True, "bias", "interleaved"),
    "llama-custom-unbatched": lambda: llama_decoder_block(False, "custom", batched=False),
    "embedding-i32": lambda: embedding("int32"),
    "embedding-i64": lambda: embedding("int64"),
    "dequant_matmul-q8_0": lambda: dequant_matmul("q8_0"),
    "dequant_matmul-q4_0": lambda: dequant_matmul("q4_0"),
    "dwconv": lambda: depthwise_conv1d_causal(3, False),
    "dwconv-left_pad": lambda: depthwise_conv1d_causal(3, True),
    "dwconv-k1": lambda: depthwise_conv1d_causal(1, False),
}


# ----------------------------------------------------------------------------- helpers


def lower(module: ModuleOp) -> ModuleOp:
    ConvertHirToMirPass().apply(make_context(), module)
    return module


def body_ops(module: ModuleOp) -> list[str]:
    """The names of the ops of the (single) function, without its return."""
    fn = next(op for op in module.ops if isinstance(op, func.FuncOp))
    return [op.name for op in fn.body.block.ops if not isinstance(op, func.ReturnOp)]


def function_type(module: ModuleOp) -> object:
    return next(op for op in module.ops if isinstance(op, func.FuncOp)).function_type


# ----------------------------------------------------------------------------- tests


@pytest.mark.parametrize("name", list(CASES))
def test_lowers_to_expected_mir(name: str) -> None:
    case = CASES[name]()
    module = case.graph.to_module()
    before_type = function_type(module)
    lower(module)
    module.verify()
    ops = body_ops(module)
    assert not [op for op in module.walk() if isinstance(op, hir.HirOp)]
    assert all(n.startswith("mir.") for n in ops), ops
    assert ops == case.expected
    assert function_type(module) == before_type


@pytest.mark.parametrize("name", list(CASES))
def test_numerics_match_before_and_after(name: str) -> None:
    case = CASES[name]()
    before = run_module(case.graph.to_module(), case.inputs)
    after = run_module(lower(case.graph.to_module()), case.inputs)
    assert len(before) == len(after) == 1
    for b, a in zip(before, after, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)


def test_mixed_graph_lowers_every_op() -> None:
    """Several hir blocks feeding each other and mir ops: all hir ops go, mir ops stay."""
    g = rlx.Graph("mixed")
    x = g.input("x", (2, 5, 16))
    w = g.param("w", (16, 16))
    gamma = g.param("gamma", (16,))
    h = g.rms_norm(g.linear(x, w, activation="relu"), gamma)
    y = g.depthwise_conv1d_causal(g.softmax(h) * 2.0, g.param("cw", (2, 16)))
    g.output(y, h)
    module = lower(g.to_module())
    module.verify()
    assert not [op for op in module.walk() if isinstance(op, hir.HirOp)]
    assert body_ops(module) == [
        "mir.matmul",
        "mir.relu",
        "mir.rms_norm",
        "mir.softmax",
        "mir.constant",
        "mir.mul",
        "mir.constant",
        "mir.concat",
        "mir.depthwise_conv1d",
    ]


def test_mir_only_module_is_unchanged() -> None:
    g = rlx.Graph("mir_only")
    x = g.input("x", (4, 8))
    g.output(g.relu(x @ g.param("w", (8, 3))))
    module = g.to_module()
    text = str(module)
    assert str(lower(module)) == text


def test_pass_is_registered() -> None:
    assert get_all_passes()["convert-hir-to-mir"]() is ConvertHirToMirPass
    assert ConvertHirToMirPass.name == "convert-hir-to-mir"
