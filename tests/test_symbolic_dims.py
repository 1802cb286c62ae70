"""Symbolic dimensions, the front half of issue 9: shape rules with symbols, the Graph
builder, `?` types in every dialect, the passes up to convert-mir-to-lir, the reference
executor at any size and the refusal of what is not there yet (planning, compiling)."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.transforms.canonicalize import CanonicalizePass
from xdsl.transforms.common_subexpression_elimination import CommonSubexpressionElimination

import rlx_mlir as rlx
from rlx_mlir.core import shape_inference as si
from rlx_mlir.core.abi import ARG_DIMS
from rlx_mlir.core.errors import ArgumentError, GraphError, ShapeError
from rlx_mlir.ir import parse_module
from rlx_mlir.passes.convert_hir_to_mir import ConvertHirToMirPass
from rlx_mlir.passes.convert_mir_to_lir import ConvertMirToLirPass
from rlx_mlir.passes.lir_plan_arena import LirPlanArenaPass
from rlx_mlir.passes.mir_fuse import MirFusePass

SIZES = (1, 7, 16, 17, 64)
"""One row, odd, a multiple of the vector width and one past it, a large one."""

# ----------------------------------------------------------------------------- shape rules


@pytest.mark.parametrize(
    ("rule", "want"),
    [
        (lambda: si.broadcast(("S", 64), ("S", 64)), ("S", 64)),
        (lambda: si.broadcast(("S", 1), (1, 64)), ("S", 64)),
        (lambda: si.broadcast((64,), ("S", 1)), ("S", 64)),
        (lambda: si.broadcast(("S", 64), ("?", 64)), ("S", 64)),
        (lambda: si.broadcast(("?", 64), (8, 1)), (8, 64)),
        (lambda: si.matmul(("S", 64), (64, 128)), ("S", 128)),
        (lambda: si.matmul(("B", "S", 64), (64, 8)), ("B", "S", 8)),
        (lambda: si.linear(("S", 64), (64, 8), (8,)), ("S", 8)),
        (lambda: si.swiglu_ffn(("S", 8), (8, 16), (8, 16), (16, 8)), ("S", 8)),
        (lambda: si.dequant_matmul(("S", 32), (4, 34), "q8_0"), ("S", 4)),
        (lambda: si.reduce(("S", 64), (0,), False), (64,)),
        (lambda: si.reduce(("S", 64), (0,), True), (1, 64)),
        (lambda: si.reduce(("S", 64), (1,), True), ("S", 1)),
        (lambda: si.softmax(("S", 64), 0), ("S", 64)),
        (lambda: si.norm(("S", 64), (64,), (64,)), ("S", 64)),
        (lambda: si.residual_norm(("S", 64), ("S", 64), (64,)), ("S", 64)),
        (lambda: si.rope(("S", 32), ("S", 4), ("S", 4), 8, 8), ("S", 32)),
        (lambda: si.rope(("B", "S", 32), ("S", 2), ("S", 2), 8, 4), ("B", "S", 32)),
        (lambda: si.attention(("S", 32), ("T", 16), ("T", 16), None, num_heads=4,
                              head_dim=8, num_kv_heads=2, mask_kind="causal"), ("S", 32)),
        (lambda: si.attention(("S", 32), ("T", 16), ("T", 16), ("S", "T"), num_heads=4,
                              head_dim=8, num_kv_heads=2, mask_kind="bias"), ("S", 32)),
        (lambda: si.embedding((50, 8), ("S",)), ("S", 8)),
        (lambda: si.gather(("S", 8), ("K",), 1), ("S", "K")),
        (lambda: si.depthwise_conv1d_causal((1, "S", 8), (3, 8), None)[0], (1, "S", 8)),
        (lambda: si.depthwise_conv1d((1, "S+2", 8), (3, 8))[0], (1, "S", 8)),
        (lambda: si.concat([(1, 2, 8), (1, "S", 8)], 1), (1, "S+2", 8)),
        (lambda: si.concat([("S", 2), ("S", 6)], 1), ("S", 8)),
        (lambda: si.narrow(("S", 8), 1, 2, 4), ("S", 4)),
        (lambda: si.transpose(("S", 4, 8), (0, 2, 1)), ("S", 8, 4)),
        (lambda: si.reshape(("S", 64), ("S", 8, 8)), ("S", 8, 8)),
        (lambda: si.reshape(("S", 64), (-1, 8, 8)), ("S", 8, 8)),
        (lambda: si.reshape(("S", 8, 8), ("S", -1)), ("S", 64)),
        (lambda: si.reshape(("S", 64), (1, "S", 64)), (1, "S", 64)),
        (lambda: si.reshape(("S", 64), ("?", 8, 8)), ("S", 8, 8)),
        (lambda: si.broadcast_to((1, "S", 8), (3, "S", 8)), (3, "S", 8)),
        (lambda: si.broadcast_to(("S", 8), ("?", 8)), ("S", 8)),
    ],
)
def test_shape_rules_carry_symbols(rule, want):
    assert rule() == want


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        (lambda: si.broadcast(("S", 64), ("T", 64)), "S vs T: a symbol only broadcasts with 1"),
        (lambda: si.broadcast(("S", 64), (8, 64)), "S vs 8"),
        (lambda: si.matmul(("S", 64), ("S", 8)), "inner dimensions differ"),
        (lambda: si.linear(("S", "K"), (64, 8)), "K = last dim of x"),
        (lambda: si.norm((64, "S"), (64,)), "gamma: expected shape [S]"),
        (lambda: si.dequant_matmul(("S", "K"), (4, 34), "q8_0"), "K must be static"),
        (lambda: si.rope(("S", "H"), ("S", 4), ("S", 4), 8, 8), "must be static"),
        (lambda: si.rope(("S", 32), ("T", 4), ("T", 4), 8, 8), "cos: expected shape [S, 4]"),
        (lambda: si.attention(("S", 32), ("T", 12), ("T", 12), None, num_heads=4, head_dim=8,
                              num_kv_heads=2, mask_kind="none"), "k: expected shape [T, 16]"),
        (lambda: si.attention((8, 32), (4, 16), (4, 16), None, num_heads=4, head_dim=8,
                              num_kv_heads=2, mask_kind="causal"), "S=8 > T=4"),
        (lambda: si.attention(("S", 32), ("T", 16), ("T", 16), ("S", 5), num_heads=4,
                              head_dim=8, num_kv_heads=2, mask_kind="bias"), "mask"),
        (lambda: si.narrow(("S", 8), 0, 0, 2), "narrow needs a static axis"),
        (lambda: si.reshape(("S", 64), (-1,)), "must stay a whole dim"),
        (lambda: si.reshape(("S", 64), ("S", 32)), "same product (64 vs 32)"),
        (lambda: si.reshape(("S", "T"), ("T", "S")), "same symbols in the same order"),
        (lambda: si.reshape(("S", 64), (-1, -1)), "at most one -1"),
        (lambda: si.broadcast_to(("S", 8), ("T", 8)), "cannot be broadcast"),
        (lambda: si.depthwise_conv1d_causal(("B", "S", 8), (3, 8), None), "batch dim B"),
        (lambda: si.depthwise_conv1d_causal((1, "S", 8), (3, 8), (1, 3, 8)), "left_pad"),
        (lambda: si.check_shape("x", ("1S", 4)), "Python identifier"),
    ],
)
def test_shape_rules_reject_what_no_size_fixes(rule, message):
    with pytest.raises(ShapeError, match=_escaped(message)):
        rule()


def _escaped(text: str) -> str:
    import re

    return re.escape(text)


def test_unknown_is_compatible_with_any_size():
    assert si.dims_match("?", 7) and si.dims_match("S", "?") and not si.dims_match("S", 7)
    assert si.unify("?", 7) == 7 and si.unify("S", "?") == "S" and si.unify("?", "?") == "?"
    assert si.evaluate_dim("S+2", {"S": 5}) == 7 and si.evaluate_dim(4, {}) == 4
    with pytest.raises(ShapeError, match="symbolic"):
        si.numel(("S", 4))


# ----------------------------------------------------------------------------- Graph


def test_graph_inputs_take_symbols_params_do_not():
    g = rlx.Graph("g")
    x = g.input("x", ("S", 64))
    assert x.shape == ("S", 64) and g.symbols == ["S"]
    with pytest.raises(ShapeError, match="param: p: dimension 0 is the symbol 'S'"):
        g.param("p", ("S", 4))
    with pytest.raises(ShapeError, match="Python identifier"):
        g.input("z", ("1S", 4))
    with pytest.raises(ShapeError, match=r"which no input of the graph declares \(its symbols: S\)"):
        g.reshape(x, ("U", 64))


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda g, x, y: x + y, "add: lhs [S, 64] and rhs [T, 64] are not broadcast-compatible"),
        (lambda g, x, y: g.narrow(x, 0, 0, 2), "narrow: narrow: axis 0 of [S, 64] is symbolic"),
        (lambda g, x, y: g.concat([x, y], 0), "concat: along axis 0 expected one symbolic input "
         "(the result is S+k), got 2: values[0] [S, 64], values[1] [T, 64]"),
        (lambda g, x, y: g.reshape(x, (-1,)), "reshape: reshape: cannot reshape [S, 64] into [-1]"),
        (lambda g, x, y: g.broadcast_to(g.constant(np.ones((1, 64), np.float32)), ("S", 64)),
         "broadcast_to cannot introduce a symbolic dim"),
        (lambda g, x, y: g.rms_norm(g.transpose(x, (1, 0)), g.param("gam", (64,))),
         "rms_norm: gamma: expected shape [S]"),
        (lambda g, x, y: g.linear(x, g.param("w", (32, 8))), "linear: w: expected shape [64, N]"),
    ],
)
def test_graph_errors_name_the_op_at_build_time(build, message):
    g = rlx.Graph("g")
    x = g.input("x", ("S", 64))
    y = g.input("y", ("T", 64))
    with pytest.raises(ShapeError, match=_escaped(message)):
        build(g, x, y)


def test_symbolic_graph_prints_question_marks_and_names_its_symbols():
    g = rlx.Graph("t")
    x = g.input("x", ("S", 64))
    w = g.param("w", (64, 128))
    g.output(y=g.softmax(x @ w))
    text = g.to_mlir()
    assert '%x: tensor<?x64xf32> {rlx.name = "x", rlx.role = "input", rlx.dims = ["S", 64 : i64]}' in text
    assert '%w: tensor<64x128xf32> {rlx.name = "w", rlx.role = "param"}' in text  # static: no dims
    assert '-> (tensor<?x128xf32> {rlx.name = "y", rlx.dims = ["S", 128 : i64]})' in text
    module = parse_module(text)
    assert str(module) == str(parse_module(str(module)))
    fn = next(iter(module.body.block.ops))
    assert ARG_DIMS in fn.arg_attrs.data[0].data


def test_static_graphs_print_as_before():
    g = rlx.Graph("t")
    g.output(g.relu(g.input("x", (4, 8))))
    assert "rlx.dims" not in g.to_mlir() and "?" not in g.to_mlir()


# ----------------------------------------------------------------------------- the reference at any size

D, H, HD, KV, F = 32, 4, 8, 2, 48
PARAM_SHAPES = dict(table=(50, D), w=(D, D), b=(D,), gam=(D,), bet=(D,), qw=(D, H * HD),
                    kw=(D, KV * HD), vw=(D, KV * HD), ow=(H * HD, D), up=(D, F), gate=(D, F),
                    down=(F, D), cw=(3, D))


def every_op(s: int | str) -> rlx.Graph:
    """A graph with every symbolic-capable op, the sequence length `s` (an int or a symbol)."""
    g = rlx.Graph("every_op")
    x = g.input("x", (s, D))
    ids = g.input("ids", (s,), "i32")
    cos = g.input("cos", (s, HD // 2))
    sin = g.input("sin", (s, HD // 2))
    cols = g.input("cols", (5,), "i64")
    p = {name: g.param(name, shape) for name, shape in PARAM_SHAPES.items()}
    h = x + g.embedding(p["table"], ids) * 0.5
    h = g.linear(h, p["w"], p["b"], activation="silu")
    h = g.rms_norm(h, p["gam"]) + g.layer_norm(h, p["gam"], p["bet"])
    h = g.residual_rms_norm(h, x, p["gam"])
    h = g.softmax(h, -1) * g.reduce_mean(h, -1, keepdim=True) + g.reduce_sum(h, 0)
    h = h + g.reduce_max(h, 1, keepdim=True) - g.reduce_min(h, 1, keepdim=True)
    h = g.swiglu_ffn(h, p["up"], p["gate"], p["down"])
    q = g.rope(h @ p["qw"], cos, sin, HD)
    k, v = g.linear(h, p["kw"]), g.linear(h, p["vw"])
    h = h + g.attention(q, k, v, num_heads=H, head_dim=HD, num_kv_heads=KV, mask_kind="causal") @ p["ow"]
    r = g.reshape(g.transpose(g.reshape(h, (s, 4, 8)), (0, 2, 1)), (-1, D))
    c = g.concat([g.narrow(r, 1, 4, 8), g.narrow(r, 1, 0, 8)], 1)
    bc = g.broadcast_to(g.reshape(c, (1, s, 16)), (2, s, 16))
    gt = g.gather(h, cols, axis=1)
    blk = g.llama_decoder_block(h, p["gam"], None, p["qw"], p["kw"], p["vw"], p["ow"], p["gam"],
                                None, p["gate"], p["up"], p["down"], cos, sin,
                                num_heads=H, head_dim=HD, num_kv_heads=KV)
    conv = g.depthwise_conv1d_causal(g.reshape(blk, (1, s, D)), p["cw"])
    g.output(blk=blk, conv=conv, bc=bc, gt=gt, act=g.gelu(blk) - g.sqrt(g.abs(blk) + 1.0))
    return g


def call_args(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return dict(x=rng.standard_normal((n, D)).astype(np.float32),
                ids=rng.integers(0, 50, n).astype(np.int32),
                cos=rng.standard_normal((n, HD // 2)).astype(np.float32),
                sin=rng.standard_normal((n, HD // 2)).astype(np.float32),
                cols=np.array([0, 3, 31, 7, 7]))


@pytest.fixture(scope="module")
def params() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {k: (0.2 * rng.standard_normal(s)).astype(np.float32) for k, s in PARAM_SHAPES.items()}


def stages(g: rlx.Graph) -> dict[str, object]:
    """The module at hir, after convert-hir-to-mir + canonicalize + cse + mir-fuse, and
    after convert-mir-to-lir; each verifies."""
    ctx = Context()
    module = g.to_module()
    out = {"hir": module.clone()}
    for p in (ConvertHirToMirPass(), CanonicalizePass(), CommonSubexpressionElimination(), MirFusePass()):
        p.apply(ctx, module)
    module.verify()
    out["mir"] = module.clone()
    ConvertMirToLirPass().apply(ctx, module)
    module.verify()
    out["lir"] = module
    return out


@pytest.fixture(scope="module")
def symbolic_stages():
    return stages(every_op("S"))


@pytest.mark.parametrize("stage", ["hir", "mir", "lir"])
def test_symbolic_graph_round_trips_at_every_stage(symbolic_stages, stage):
    text = str(symbolic_stages[stage])
    assert "?x32xf32" in text
    assert str(parse_module(text)) == text


@pytest.mark.parametrize("stage", ["hir", "mir", "lir"])
def test_reference_runs_one_symbolic_module_at_any_size(symbolic_stages, params, stage):
    """One module, every size: equal to the graph built static at that size."""
    model = rlx.reference(symbolic_stages[stage], params)
    rng = np.random.default_rng(2)
    for n in SIZES:
        args = call_args(n, rng)
        want = rlx.reference(every_op(n), params)(**args)
        got = model(**args)
        for name, a, b in zip(model.output_names, want, got, strict=True):
            assert b.shape == a.shape, (stage, n, name)
            np.testing.assert_allclose(b, a, rtol=3e-5, atol=3e-5, err_msg=f"{stage} S={n} {name}")


def test_lir_allocs_name_their_symbols(symbolic_stages):
    text = str(symbolic_stages["lir"])
    assert 'lir.alloc dims ["S", 32 : i64] : memref<?x32xf32>' in text
    assert 'lir.alloc dims [1 : i64, "S+2", 32 : i64] : memref<1x?x32xf32>' in text
    assert 'rlx.role = "output", rlx.dims = ["S", 32 : i64]' in text
    assert '"?"' not in text  # every dynamic buffer is sized by a symbol


def test_reference_binds_two_symbols():
    g = rlx.Graph("attn")
    q = g.input("q", ("S", 32))
    kv = g.input("kv", ("T", 16))
    g.output(g.attention(q, kv, kv, num_heads=4, head_dim=8, num_kv_heads=2, mask_kind="causal"))
    model = rlx.reference(g)
    rng = np.random.default_rng(3)
    for s, t in [(1, 1), (3, 5), (7, 7)]:
        args = dict(q=rng.standard_normal((s, 32)).astype(np.float32),
                    kv=rng.standard_normal((t, 16)).astype(np.float32))
        gs = rlx.Graph("attn")
        qs, kvs = gs.input("q", (s, 32)), gs.input("kv", (t, 16))
        gs.output(gs.attention(qs, kvs, kvs, num_heads=4, head_dim=8, num_kv_heads=2, mask_kind="causal"))
        np.testing.assert_allclose(model(**args), rlx.reference(gs)(**args), rtol=1e-6, atol=1e-6)


@pytest.fixture()
def two_inputs() -> rlx.ReferenceModel:
    g = rlx.Graph("pair")
    x = g.input("x", ("S", 4))
    y = g.input("y", ("S", 4))
    g.output(x + y)
    return rlx.reference(g)


def test_reference_call_errors_name_the_symbol(two_inputs):
    ones = np.ones
    assert two_inputs(x=ones((7, 4)), y=ones((7, 4))).shape == (7, 4)
    assert two_inputs(x=ones((13, 4)), y=ones((13, 4))).shape == (13, 4)
    with pytest.raises(ArgumentError, match=r"input 'y' \(f32\[S, 4\]\): symbol S \(dim 0\) is 7 \(bound by 'x'\), got 8"):
        two_inputs(x=ones((7, 4)), y=ones((8, 4)))
    with pytest.raises(ArgumentError, match=r"symbol S \(dim 0\): expected a size >= 1, got 0"):
        two_inputs(x=ones((0, 4)), y=ones((0, 4)))
    with pytest.raises(ArgumentError, match=r"expected shape \[S, 4\], got \[7, 5\]"):
        two_inputs(x=ones((7, 5)), y=ones((7, 5)))
    with pytest.raises(ArgumentError, match=r"expected shape \[S, 4\], got \[28\]"):
        two_inputs(x=ones(28), y=ones(28))


def test_malformed_dims_attribute_is_a_graph_error():
    text = rlx.Graph("t")
    x = text.input("x", ("S", 4))
    text.output(x * 2.0)
    bad = text.to_mlir().replace('rlx.dims = ["S", 4 : i64]', 'rlx.dims = ["S", 5 : i64]', 1)
    with pytest.raises(GraphError, match=r"x: rlx.dims \[S, 5\] does not describe its type"):
        rlx.reference(bad)


# ----------------------------------------------------------------------------- not there yet


def test_jit_and_compile_mlir_compile_symbolic_dims_once():
    g = rlx.Graph("t")
    x = g.input("x", ("S", 8))
    g.output(g.relu(x))
    for model in (rlx.jit(g, max_dims={"S": 32}), rlx.compile_mlir(g.to_mlir(), max_dims={"S": 32})):
        for s in (1, 5, 32):
            arr = np.linspace(-1, 1, s * 8, dtype=np.float32).reshape(s, 8)
            np.testing.assert_array_equal(model(x=arr), np.maximum(arr, 0))


def test_arena_planning_sizes_a_dynamic_module_at_its_bounds(symbolic_stages):
    module = symbolic_stages["lir"].clone()
    LirPlanArenaPass(max_dims="S=64").apply(Context(), module)
    module.verify()
    arenas = [op for op in module.walk() if op.name == "lir.arena"]
    assert len(arenas) == 1 and arenas[0].max_dims is not None
    assert arenas[0].max_dims.data["S"].value.data == 64


MALFORMED = [
    "%b = lir.alloc dims [\"S\"] : memref<?x8xf32>",
    "%b = lir.alloc dims [2.5, 8] : memref<?x8xf32>",
    "%b = lir.alloc : memref<?x8xf32>",
    '%a = "test.op"() : () -> tensor<?x8xf32>\n%z = mir.reshape %a : tensor<?x8xf32> -> tensor<64xf32>',
    '%a = "test.op"() : () -> tensor<?x8xf32>\n%z = mir.narrow %a axis 0 start 0 length 2 : tensor<?x8xf32> -> tensor<2x8xf32>',
    '%a = "test.op"() : () -> tensor<4x?xf32>\n%c = "test.op"() : () -> tensor<4x4xf32>\n'
    "%y = hir.rope %a, %c, %c head_dim 8 n_rot 8 : (tensor<4x?xf32>, tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x?xf32>",
]


@pytest.mark.parametrize("text", MALFORMED)
def test_rlx_opt_diagnoses_malformed_dynamic_ir(tmp_path, text):
    path = tmp_path / "bad.mlir"
    path.write_text(text + "\n")
    done = subprocess.run(["rlx-opt", str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout
    assert "does not verify" in done.stderr + done.stdout or "error" in (done.stderr + done.stdout)


def test_rlx_run_binds_symbols_with_dims(tmp_path):
    g = rlx.Graph("t")
    g.output(g.relu(g.input("x", ("S", 8))))
    path = tmp_path / "sym.mlir"
    path.write_text(g.to_mlir())
    done = subprocess.run(["rlx-run", str(path), "--random", "--dims", "S=7", "--check"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "out0: f32[7, 8]" in done.stdout and "max abs error: 0" in done.stdout
    done = subprocess.run(["rlx-run", str(path), "--random"], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "random data needs the size of S (rlx-run --dims S=N)" in done.stderr


@pytest.mark.parametrize("stage", ["hir", "lir"])
def test_bad_index_into_a_symbolic_axis_names_the_bound(stage):
    g = rlx.Graph("t")
    x = g.input("x", ("S", 4))
    ids = g.input("ids", (3,), "i64")
    g.output(g.gather(x, ids, 0))
    module = stages(g)[stage]
    model = rlx.reference(module)
    assert model(x=np.ones((5, 4)), ids=np.array([0, 1, 4])).shape == (3, 4)
    with pytest.raises(ArgumentError, match=r"ids\[2\] = 5 is outside \[0, 5\) \(argument 'ids': gather indices"):
        model(x=np.ones((5, 4)), ids=np.array([0, 1, 5]))
