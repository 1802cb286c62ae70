"""Issue 14, the newcomer findings: each test here failed before its fix.

The tool-side findings (rlx-run, rlx-opt) are tested through the installed commands in
tests/test_rlx_run.py and tests/test_cli.py; this file holds the Python API's.
"""

from __future__ import annotations

import numpy as np
import pytest
from unnamed_modules import UNNAMED, UNNAMED_LIR  # noqa: E402

import rlx_mlir as rlx


def _rng_array(*shape: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


# ------------------------------------------------------------------ 1. unnamed arguments


def test_1_unnamed_arguments_get_default_names():
    model = rlx.compile_mlir(UNNAMED)
    assert [a.name for a in model.signature.callable_args] == ["x", "arg1"]
    x, w = _rng_array(4, 8), _rng_array(8, 3)
    np.testing.assert_allclose(model(x=x, arg1=w), x @ w, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rlx.reference(UNNAMED)(x, w), x @ w, rtol=1e-5, atol=1e-5)


def test_1_unnamed_lir_arguments_are_refused_with_a_diagnostic():
    with pytest.raises(rlx.GraphError, match=r"@f: argument 0 has no rlx\.role.*lir stage"):
        rlx.compile_mlir(UNNAMED_LIR)


# ------------------------------------------------------------------ 2. bad dimensions


@pytest.mark.parametrize("method", ["input", "param"])
@pytest.mark.parametrize("shape, words", [
    ((-1, 64), r"dimension 0 is -1; every dimension must be >= 1"),
    ((4, 0), r"dimension 1 is 0; every dimension must be >= 1"),
    ((2.0, 64), r"dimension 0 is 2\.0 \(float\)"),
    ((True, 64), r"dimension 0 is True \(bool\)"),
], ids=["negative", "zero", "float", "bool"])
def test_2_bad_dimensions_are_shape_errors_naming_the_argument(method, shape, words):
    g = rlx.Graph("g")
    with pytest.raises(rlx.ShapeError, match=rf"{method}: x: {words}"):
        getattr(g, method)("x", shape)


def test_2_symbolic_dimensions_only_in_inputs():
    """A string dim is a symbol (issue 9): an input takes it, a param is refused."""
    g = rlx.Graph("g")
    assert g.input("x", ("S", 64)).shape == ("S", 64)
    with pytest.raises(rlx.ShapeError, match=r"param: w: dimension 0 is the symbol 'S': only graph inputs"):
        g.param("w", ("S", 64))


def test_2_numpy_integer_dimensions_are_ints():
    g = rlx.Graph("g")
    x = g.input("x", (np.int64(4), np.int32(8)))
    assert x.shape == (4, 8) and all(type(d) is int for d in x.shape)


@pytest.mark.parametrize("call, words", [
    (lambda g, x: g.reshape(x, (-2, 32)), r"reshape: shape: dimension 0 is -2"),
    (lambda g, x: g.reshape(x, (4.0, 16)), r"reshape: shape: dimension 0 is 4\.0"),
    (lambda g, x: g.broadcast_to(x, (0, 4, 16)), r"broadcast_to: shape: dimension 0 is 0"),
    (lambda g, x: g.broadcast_to(x, ("B", 4, 16)),
     r"broadcast_to: shape: dimension 0 is the symbol 'B', which no input of the graph declares"),
], ids=["reshape-negative", "reshape-float", "broadcast-zero", "broadcast-symbolic"])
def test_2_bad_target_shapes(call, words):
    g = rlx.Graph("g")
    x = g.input("x", (4, 16))
    with pytest.raises(rlx.ShapeError, match=words):
        call(g, x)


def test_2_reshape_still_infers_one_minus_one():
    g = rlx.Graph("g")
    assert g.reshape(g.input("x", (4, 16)), (np.int64(2), -1)).shape == (2, 32)


# ------------------------------------------------------------------ 3. compile options


def _small_graph() -> rlx.Graph:
    g = rlx.Graph("small")
    g.output(g.input("x", (4, 8)) * 2.0)
    return g


@pytest.mark.parametrize("options, words", [
    ({"strategy": "best"}, r"strategy: expected one of 'greedy-by-size', 'naive', got 'best'"),
    ({"vector_width": 3}, r"vector_width: expected 0 \(the target's\), 4, 8 or 16, got 3"),
    ({"alignment": 3}, r"alignment: expected a power of two >= 1, got 3"),
    ({"alignment": "64"}, r"alignment: expected a power of two >= 1, got '64'"),
    ({"opt_level": 5}, r"opt_level: expected 0, 1, 2 or 3, got 5"),
    ({"threads": 0}, r"threads: expected an int in \[1, 64\] or None"),
    ({"threads": True}, r"threads: expected an int in \[1, 64\] or None"),
    ({"params": [np.zeros(3)]}, r"params: expected a mapping of param names to arrays"),
], ids=["strategy", "vector-width", "alignment", "alignment-str", "opt-level", "threads",
        "threads-bool", "params-list"])
@pytest.mark.parametrize("entry", ["jit", "compile_mlir"])
def test_3_options_are_validated_up_front(entry, options, words):
    g = _small_graph()
    with pytest.raises(rlx.OptionError, match=words):
        if entry == "jit":
            rlx.jit(g, **options)
        else:
            rlx.compile_mlir(g.to_mlir(), **options)


# ------------------------------------------------------------------ 4. output twice


def test_4_output_twice_is_refused():
    g = rlx.Graph("g")
    x = g.input("x", (3,))
    g.output(g.exp(x))
    with pytest.raises(rlx.GraphError, match="already has its outputs; call g.output"):
        g.output(g.exp(x) + 1.0)
    assert "func.return %0 : tensor<3xf32>" in g.to_mlir()  # the first outputs stand


# ------------------------------------------------------------------ 5. non-finite attributes, bool ids


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_5_non_finite_scale_is_refused(bad):
    g = rlx.Graph("g")
    q = g.input("q", (4, 8))
    with pytest.raises(rlx.GraphError, match=r"attention: scale: expected a finite float"):
        g.attention(q, q, q, num_heads=2, head_dim=4, scale=bad)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 0.0, -1e-5, True])
def test_5_bad_eps_is_refused(bad):
    g = rlx.Graph("g")
    x = g.input("x", (4, 8))
    gamma = g.param("gamma", (8,))
    with pytest.raises(rlx.GraphError, match=r"rms_norm: eps: expected a finite positive float"):
        g.rms_norm(x, gamma, eps=bad)
    with pytest.raises(rlx.GraphError, match=r"llama_decoder_block: eps: expected a finite positive"):
        _llama(g, eps=bad)


def _llama(g: rlx.Graph, eps: float) -> rlx.Value:
    x = g.input("h", (3, 16))

    def p(name: str, *shape: int) -> rlx.Value:
        return g.param(name, shape)

    return g.llama_decoder_block(
        x, p("l1", 16), None, p("q_w", 16, 16), p("k_w", 16, 16), p("v_w", 16, 16),
        p("o_w", 16, 16), p("l2", 16), None, p("gate_w", 16, 32), p("up_w", 16, 32),
        p("down_w", 32, 16), p("cos", 3, 4), p("sin", 3, 4), num_heads=2, head_dim=8, eps=eps)


def test_5_bool_ids_are_refused_at_call_time():
    g = rlx.Graph("emb")
    table = g.param("table", (5, 4))
    g.output(g.embedding(table, g.input("ids", (3,), "i32")))
    ids = np.array([True, False, True])
    for model in (rlx.reference(g), rlx.jit(g)):
        with pytest.raises(rlx.ArgumentError, match=r"input 'ids' \(i32\[3\]\): expected dtype i32, got a bool array"):
            model(ids=ids, table=np.ones((5, 4), np.float32))


# ------------------------------------------------------------------ 13. numpy dtypes, named outputs


@pytest.mark.parametrize("dtype, name", [
    (np.float32, "f32"), (np.dtype("float32"), "f32"), ("float32", "f32"), ("f32", "f32"),
    (np.int32, "i32"), ("int64", "i64"), (np.dtype(np.int64), "i64"), (np.uint8, "ui8"),
    ("uint8", "ui8"),
])
def test_13_numpy_dtypes_and_names(dtype, name):
    g = rlx.Graph("g")
    assert g.input("x", (2,), dtype).dtype == name
    assert g.param("w", (2,), dtype=dtype).dtype == name


@pytest.mark.parametrize("dtype", [np.float64, "float16", "f16", float, None])
def test_13_other_dtypes_are_refused(dtype):
    with pytest.raises(rlx.DTypeError, match=r"input: x: dtype: expected one of f32, i32, i64, ui8"):
        rlx.Graph("g").input("x", (2,), dtype)


def test_13_named_outputs():
    g = rlx.Graph("named")
    x = g.input("x", (2, 3))
    g.output(g.exp(x), names=("probs",))
    assert g.output_names == ["probs"]
    g2 = rlx.Graph("named2")
    x2 = g2.input("x", (2, 3))
    g2.output(g2.exp(x2), logits=x2 * 2.0)
    assert g2.output_names == ["out0", "logits"]
    assert 'rlx.name = "logits"' in g2.to_mlir()
    data = _rng_array(2, 3)
    for model in (rlx.jit(g2), rlx.reference(g2), rlx.compile_mlir(g2.to_mlir())):
        assert model.output_names == ("out0", "logits")
        results = dict(zip(model.output_names, model(x=data), strict=True))
        np.testing.assert_allclose(results["logits"], data * 2.0)
    assert "logits" in rlx.jit(g2).mlir("lir")


@pytest.mark.parametrize("call, words", [
    (lambda g, y: g.output(y, names=("a", "b")), "expected 1 names"),
    (lambda g, y: g.output(y, y, names=("a", "a")), "expected distinct names"),
    (lambda g, y: g.output(y, names=("x",)), "'x' is already an argument"),
    (lambda g, y: g.output(y, names=("not a name",)), "expected Python identifiers"),
    (lambda g, y: g.output(y, names=("a",), b=y), "either as names=... or as keywords"),
], ids=["count", "duplicate", "argument-name", "identifier", "both"])
def test_13_bad_output_names(call, words):
    g = rlx.Graph("g")
    y = g.exp(g.input("x", (2,)))
    with pytest.raises(rlx.GraphError, match=words):
        call(g, y)


# ------------------------------------------------------------------ 7. which index is out of range


def _embedding_graph() -> rlx.Graph:
    g = rlx.Graph("emb")
    table = g.param("table", (50, 4))
    g.output(g.embedding(table, g.input("ids", (2, 3), "i64")))
    return g


def _gather_graph() -> rlx.Graph:
    g = rlx.Graph("take")
    x = g.input("x", (3, 7))
    g.output(g.gather(x, g.input("idx", (4,), "i32"), axis=1))
    return g


@pytest.mark.parametrize("executor", ["jit", "reference"])
def test_7_out_of_range_ids_name_position_value_and_range(executor):
    make = rlx.jit if executor == "jit" else rlx.reference
    table = np.ones((50, 4), np.float32)
    model = make(_embedding_graph(), params={"table": table})
    ids = np.array([[0, 1, 2], [3, 77, 5]])
    with pytest.raises(rlx.ArgumentError, match=r"^emb: ids\[1, 1\] = 77 is outside \[0, 50\) "
                                                 r"\(argument 'ids': embedding ids"):
        model(ids=ids)
    ids[1, 1] = 4
    ids[0, 2] = -3
    with pytest.raises(rlx.ArgumentError, match=r"ids\[0, 2\] = -3 is outside \[0, 50\)"):
        model(ids=ids)
    gather = make(_gather_graph())
    with pytest.raises(rlx.ArgumentError, match=r"^take: idx\[3\] = 7 is outside \[0, 7\) "
                                                  r"\(argument 'idx': gather indices"):
        gather(x=np.ones((3, 7), np.float32), idx=np.array([0, 6, 1, 7], np.int32))


def test_7_compiled_lir_module_names_the_index_too():
    lir_text = rlx.jit(_gather_graph()).mlir("lir")
    model = rlx.compile_mlir(lir_text)
    with pytest.raises(rlx.ArgumentError, match=r"idx\[0\] = -1 is outside \[0, 7\)"):
        model(x=np.ones((3, 7), np.float32), idx=np.array([-1, 0, 0, 0], np.int32))


# ------------------------------------------------------------------ 8. the k_w message


def test_8_num_kv_heads_message_names_k_w_own_shape():
    g = rlx.Graph("g")
    x = g.input("x", (2, 32))

    def p(name: str, *shape: int) -> rlx.Value:
        return g.param(name, shape)

    with pytest.raises(rlx.ShapeError, match=(
            r"llama_decoder_block: k_w: expected shape \[32, 256\] "
            r"\(\[D, num_kv_heads\*head_dim\] = \[32, 4\*64\]\), got \[32, 128\]")):
        g.llama_decoder_block(
            x, p("l1", 32), None, p("q_w", 32, 512), p("k_w", 32, 128), p("v_w", 32, 256),
            p("o_w", 512, 32), p("l2", 32), None, p("gate_w", 32, 64), p("up_w", 32, 64),
            p("down_w", 64, 32), p("cos", 2, 32), p("sin", 2, 32),
            num_heads=8, head_dim=64, num_kv_heads=4)


# ------------------------------------------------------------------ 9. passes run out of order


def _mlp_module():
    g = rlx.Graph("mlp")
    x = g.input("x", (4, 8))
    g.output(g.softmax(g.linear(x, g.param("w", (8, 3)), activation="gelu")))
    return g.to_module()


@pytest.mark.parametrize("before, pass_name, words", [
    ((), "convert-mir-to-lir", r"convert-mir-to-lir: the module still has hir ops \(hir\.linear\); "
                               r"run convert-hir-to-mir first"),
    ((), "lir-plan-arena", r"lir-plan-arena: the module still has hir ops \(hir\.linear\); "
                           r"run convert-hir-to-mir first"),
    (("convert-hir-to-mir",), "lir-plan-arena", r"lir-plan-arena: the module still has mir ops "
                                                r"\(mir\.gelu, mir\.matmul, mir\.softmax\); run convert-mir-to-lir first"),
    (("convert-hir-to-mir",), "lir-pack-weights", r"still has mir ops .*run convert-mir-to-lir first"),
    (("convert-hir-to-mir",), "convert-lir-to-llvm", r"still has mir ops .*run convert-mir-to-lir first"),
    (("convert-hir-to-mir", "convert-mir-to-lir"), "convert-lir-to-llvm",
     r"convert-lir-to-llvm: the module still has lir\.alloc ops; run lir-plan-arena first"),
], ids=["mir-to-lir-on-hir", "plan-on-hir", "plan-on-mir", "pack-on-mir", "llvm-on-mir", "llvm-unplanned"])
def test_9_a_pass_run_too_early_says_which_pass_must_run_first(before, pass_name, words):
    from xdsl.utils.exceptions import PassFailedException

    from rlx_mlir.ir import make_context
    from rlx_mlir.passes import get_all_passes

    module = _mlp_module()
    ctx = make_context()
    for name in before:
        get_all_passes()[name]()().apply(ctx, module)
    with pytest.raises(PassFailedException, match=words):
        get_all_passes()[pass_name]()(**({"params": ("w",)} if pass_name == "lir-pack-weights" else {})).apply(ctx, module)
