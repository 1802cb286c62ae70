"""State for decoding (issue 9, items 3-4): `g.state`, `g.cache_append`, `g.assign`,
`llama_decoder_block(kv_cache=...)`, and the stateful reference executor.

A model's states live between calls; `position` P is where the next KV-cache rows go,
advanced by S after each successful call; a call that raises leaves P and every state
as they were. Every behaviour is checked at each stage the reference runs (hir, mir after
canonicalize/cse/mir-fuse, lir after lir-plan-arena): prefill + token-by-token decoding
with KV caches equals the full-sequence forward of a 2-layer tiny llama.
The `lir.insert_rows` kernel is JIT-tested on a hand-built op (static and run-time S).
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from jit_harness import CPUS, Jitted
from xdsl.dialects.builtin import IndexType
from xdsl.ir import Block

import rlx_mlir as rlx
from rlx_mlir.binding import Signature
from rlx_mlir.core.abi import CACHE_DIMS, ROLE_POSITION, ROLE_STATE
from rlx_mlir.core.errors import ArgumentError, DTypeError, GraphError, ShapeError
from rlx_mlir.dialects import lir
from rlx_mlir.dialects.common import memref_type
from rlx_mlir.ir import parse_module
from rlx_mlir.passes.lir_to_llvm import dynamic
from rlx_mlir.passes.lir_to_llvm.indexing import build_insert_rows
from rlx_mlir.passes.lir_to_llvm.kernels import runtime_dims_kernels
from rlx_mlir.pipeline import lower
from rlx_mlir.state import StateStore

STAGES = ("hir", "mir", "lir")
RTOL, ATOL = 1e-4, 1e-5

# ----------------------------------------------------------------------------- models

D, HEADS, KV_HEADS, HEAD_DIM, FFN, CAPACITY, LAYERS = 32, 4, 2, 8, 48, 16, 2
SEQ = 10


def llama_weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    weights = {}
    for i in range(LAYERS):
        weights.update({
            f"l{i}_ln1_g": 1 + w(D), f"l{i}_q_w": w(D, HEADS * HEAD_DIM),
            f"l{i}_k_w": w(D, KV_HEADS * HEAD_DIM), f"l{i}_v_w": w(D, KV_HEADS * HEAD_DIM),
            f"l{i}_o_w": w(HEADS * HEAD_DIM, D), f"l{i}_ln2_g": 1 + w(D),
            f"l{i}_gate_w": w(D, FFN), f"l{i}_up_w": w(D, FFN), f"l{i}_down_w": w(FFN, D),
        })
    return weights


def tiny_llama(decode: bool) -> rlx.Graph:
    """A 2-layer llama over x [S, D]: with `decode`, each layer has KV-cache states and S
    is a symbol; without, the full sequence of SEQ rows is static."""
    g = rlx.Graph("tiny_llama")
    rows = "S" if decode else SEQ
    x = g.input("x", (rows, D))
    cos = g.input("cos", (rows, HEAD_DIM // 2))
    sin = g.input("sin", (rows, HEAD_DIM // 2))
    h = x
    for i in range(LAYERS):
        p = {name: g.param(f"l{i}_{name}", shape.shape)
             for name, shape in _layer(llama_weights(), i).items()}
        kv = None
        if decode:
            kv = (g.state(f"k{i}", (CAPACITY, KV_HEADS * HEAD_DIM)),
                  g.state(f"v{i}", (CAPACITY, KV_HEADS * HEAD_DIM)))
        h = g.llama_decoder_block(
            h, p["ln1_g"], None, p["q_w"], p["k_w"], p["v_w"], p["o_w"], p["ln2_g"], None,
            p["gate_w"], p["up_w"], p["down_w"], cos, sin, num_heads=HEADS, head_dim=HEAD_DIM,
            num_kv_heads=KV_HEADS, kv_cache=kv)
    g.output(h)
    return g


def _layer(weights: dict[str, np.ndarray], i: int) -> dict[str, np.ndarray]:
    prefix = f"l{i}_"
    return {k.removeprefix(prefix): v for k, v in weights.items() if k.startswith(prefix)}


def rope_tables(n: int) -> tuple[np.ndarray, np.ndarray]:
    angles = np.arange(n)[:, None] / 10000 ** (np.arange(HEAD_DIM // 2) / (HEAD_DIM // 2))
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def attention_cache_graph() -> rlx.Graph:
    """Decoding written with the primitives: q, k, v projections, cache_append of k and v,
    causal attention over the returned rows."""
    g = rlx.Graph("cache_attention")
    x = g.input("x", ("S", D))
    wq, wk, wv = (g.param(n, (D, HEADS * HEAD_DIM)) for n in ("wq", "wk", "wv"))
    k_cache = g.state("k", (CAPACITY, HEADS * HEAD_DIM))
    v_cache = g.state("v", (CAPACITY, HEADS * HEAD_DIM))
    keys = g.cache_append(k_cache, x @ wk)
    values = g.cache_append(v_cache, x @ wv)
    g.output(g.attention(x @ wq, keys, values, num_heads=HEADS, head_dim=HEAD_DIM,
                         mask_kind="causal"))
    return g


def recurrent_graph() -> rlx.Graph:
    """h' = tanh(h + x @ w) summed over rows; out = h (the old value) and h'."""
    g = rlx.Graph("recurrent")
    x = g.input("x", ("S", 8))
    w = g.param("w", (8, 8))
    h = g.state("h", (1, 8))
    new = g.tanh(h + g.reduce_sum(x @ w, 0, keepdim=True))
    g.assign(h, new)
    g.output(old=h, new=new)
    return g


def stage(graph: rlx.Graph, name: str):
    """The graph at `name`: as built (hir), after the mir passes, after lir-plan-arena."""
    module = graph.to_module()
    return module if name == "hir" else lower(module, name)


def model_at(graph: rlx.Graph, name: str, params: dict[str, np.ndarray] | None = None):
    return rlx.reference(stage(graph, name), params)


# ----------------------------------------------------------------------------- the IR


def test_graph_declares_states_the_position_and_the_cache_symbol():
    g = attention_cache_graph()
    module = g.to_module()
    spec = {a.name: a for a in Signature.of(module.body.block.first_op).args}
    assert spec["k"].role == spec["v"].role == ROLE_STATE
    assert spec["position"].role == ROLE_POSITION and spec["position"].shape == ()
    assert g.states == ["k", "v"] and g.inputs == ["x"]
    fn = module.body.block.first_op
    assert str(fn.attributes[CACHE_DIMS]) == '{T = ["S", 16 : i64]}'
    text = g.to_mlir()
    assert "mir.insert_rows %" in text and 'mir.extract_rows %' in text and "mir.assign %" in text
    assert "%position: index" in text


@pytest.mark.parametrize("name", STAGES)
def test_state_modules_round_trip_as_text(name):
    module = stage(tiny_llama(decode=True), name)
    text = str(module)
    again = parse_module(text)
    again.verify()
    assert str(again) == text


def test_passes_keep_the_updates():
    """canonicalize, cse and DCE keep mir.assign (no result, not Pure) and the insert it
    uses, even when the rows cache_append returns are not used."""
    g = rlx.Graph("unused_rows")
    x = g.input("x", ("S", 4))
    k = g.state("k", (8, 4))
    g.cache_append(k, x)
    g.output(x * 2.0)
    text = str(lower(g.to_module(), "mir"))
    assert "mir.insert_rows" in text and "mir.assign" in text
    lir_text = str(lower(g.to_module(), "lir"))
    assert "lir.insert_rows ins(%x, %position" in lir_text
    ref = model_at(g, "lir")
    rows = np.arange(12, dtype=np.float32).reshape(3, 4)
    ref(x=rows)
    np.testing.assert_array_equal(ref.state["k"][:3], rows)


def test_bufferization_appends_in_place_and_copies_assigned_states_last():
    text = str(lower(recurrent_graph().to_module(), "lir"))
    copies = [line.strip() for line in text.splitlines() if "lir.copy" in line]
    assert copies[-1].endswith('outs(%h : memref<1x8xf32>) {rlx.phase = "epilogue"}'), copies  # after the output copies
    text = str(lower(attention_cache_graph().to_module(), "lir"))
    assert "outs(%k : memref<16x32xf32>)" in text and 'dims ["T", 32 : i64]' in text


# ----------------------------------------------------------------------------- decoding


@pytest.fixture(scope="module")
def full_forward() -> np.ndarray:
    cos, sin = rope_tables(SEQ)
    x = np.random.default_rng(1).standard_normal((SEQ, D)).astype(np.float32)
    out = rlx.reference(tiny_llama(decode=False), llama_weights())(x=x, cos=cos, sin=sin)
    return x, out


@pytest.mark.parametrize("name", STAGES)
@pytest.mark.parametrize("prefill", [1, 6, SEQ])
def test_prefill_then_decode_equals_the_full_forward(full_forward, name, prefill):
    x, want = full_forward
    cos, sin = rope_tables(SEQ)
    model = model_at(tiny_llama(decode=True), name, llama_weights())
    outs = [model(x=x[:prefill], cos=cos[:prefill], sin=sin[:prefill])]
    assert model.position == prefill
    for t in range(prefill, SEQ):
        outs.append(model(x=x[t:t + 1], cos=cos[t:t + 1], sin=sin[t:t + 1]))
        assert model.position == t + 1
    np.testing.assert_allclose(np.concatenate(outs), want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("name", STAGES)
def test_cache_append_with_causal_attention_is_decoding(name):
    rng = np.random.default_rng(2)
    params = {n: (rng.standard_normal((D, HEADS * HEAD_DIM)) * 0.3).astype(np.float32)
              for n in ("wq", "wk", "wv")}
    x = rng.standard_normal((7, D)).astype(np.float32)
    want = rlx.reference(attention_cache_graph(), params)(x=x)  # all 7 rows at once
    model = model_at(attention_cache_graph(), name, params)
    got = np.concatenate([model(x=x[:3]), model(x=x[3:5]), model(x=x[5:6]), model(x=x[6:])])
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(model.state["k"][:7], x @ params["wk"], rtol=RTOL, atol=ATOL)
    assert not model.state["k"][7:].any()  # zero past the position


# ----------------------------------------------------------------------------- assign, reset


@pytest.mark.parametrize("name", STAGES)
def test_assign_round_trips(name):
    w = np.random.default_rng(3).standard_normal((8, 8)).astype(np.float32) * 0.3
    model = model_at(recurrent_graph(), name, {"w": w})
    h = np.zeros((1, 8), np.float32)
    for n in (3, 1, 5):
        x = np.random.default_rng(n).standard_normal((n, 8)).astype(np.float32)
        old, new = model(x=x)
        want = np.tanh(h + (x @ w).sum(0, keepdims=True))
        np.testing.assert_allclose(old, h, rtol=RTOL, atol=ATOL)  # the value the call began with
        np.testing.assert_allclose(new, want, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(model.state["h"], want, rtol=RTOL, atol=ATOL)
        h = want
    assert model.position == 0  # no cache: nothing advances it


def test_state_views_are_read_only():
    model = rlx.reference(recurrent_graph(), {"w": np.eye(8, dtype=np.float32)})
    view = model.state["h"]
    with pytest.raises(ValueError):
        view[0, 0] = 1.0
    model(x=np.ones((2, 8), np.float32))
    assert view[0, 0] == model.state["h"][0, 0] != 0  # a view of the live buffer


@pytest.mark.parametrize("name", STAGES)
def test_reset_rewinds(name):
    rng = np.random.default_rng(4)
    params = {n: rng.standard_normal((D, HEADS * HEAD_DIM)).astype(np.float32) * 0.3
              for n in ("wq", "wk", "wv")}
    x = rng.standard_normal((6, D)).astype(np.float32)
    model = model_at(attention_cache_graph(), name, params)
    first = model(x=x[:4])
    model(x=x[4:])
    model.reset()
    assert model.position == 0
    np.testing.assert_allclose(model(x=x[:4]), first, rtol=RTOL, atol=ATOL)
    model.reset(position=2)  # rows past 2 are overwritten by the next append
    again = model(x=x[2:4])
    np.testing.assert_allclose(again, first[2:4], rtol=RTOL, atol=ATOL)
    assert model.position == 4


def test_reset_at_zero_zeroes_recurrent_states():
    model = rlx.reference(recurrent_graph(), {"w": np.eye(8, dtype=np.float32)})
    model(x=np.ones((1, 8), np.float32))
    model.reset()
    assert not model.state["h"].any()


@pytest.mark.parametrize("position, message", [
    (-1, r"reset: position: expected an int in \[0, 16\]"),
    (17, r"reset: position: expected an int in \[0, 16\]"),
    (1.5, r"reset: position: expected an int >= 0, got 1.5"),
])
def test_reset_refuses_bad_positions(position, message):
    model = rlx.reference(attention_cache_graph(), {n: np.zeros((D, D), np.float32)
                                                    for n in ("wq", "wk", "wv")})
    with pytest.raises(ArgumentError, match=message):
        model.reset(position=position)


# ----------------------------------------------------------------------------- errors, atomicity


def _snapshot(model) -> tuple[int, dict[str, np.ndarray]]:
    return model.position, {k: np.array(v) for k, v in model.state.items()}


def _assert_unchanged(model, before) -> None:
    position, states = before
    assert model.position == position
    for name, array in states.items():
        np.testing.assert_array_equal(model.state[name], array, err_msg=name)


@pytest.mark.parametrize("name", STAGES)
def test_cache_full_is_an_argument_error_and_changes_nothing(name):
    params = {n: np.full((D, HEADS * HEAD_DIM), 0.01, np.float32) for n in ("wq", "wk", "wv")}
    model = model_at(attention_cache_graph(), name, params)
    model(x=np.ones((12, D), np.float32))
    before = _snapshot(model)
    with pytest.raises(ArgumentError, match=r"cache full: appending 5 rows at position 12 "
                                            r"needs 17 rows, the caches hold 16"):
        model(x=np.ones((5, D), np.float32))
    _assert_unchanged(model, before)
    model(x=np.ones((4, D), np.float32))  # exactly full
    assert model.position == 16


def indexed_graph() -> rlx.Graph:
    """A cache append and an assign BEFORE a gather whose ids may be out of range, so a
    failing call has already written the cache rows and must undo them."""
    g = rlx.Graph("late_gather")
    x = g.input("x", ("S", 4))
    ids = g.input("ids", (2,), "i32")
    table = g.param("table", (5, 4))
    k = g.state("k", (8, 4))
    h = g.state("h", (1, 4))
    rows = g.cache_append(k, x)
    total = g.reduce_sum(rows, 0, keepdim=True)
    g.assign(h, h + total)
    g.output(g.gather(table, ids) + total)
    return g


@pytest.mark.parametrize("name", STAGES)
def test_a_call_that_raises_leaves_position_and_states_unchanged(name):
    model = model_at(indexed_graph(), name, {"table": np.ones((5, 4), np.float32)})
    model(x=np.ones((2, 4), np.float32), ids=np.array([0, 4], np.int32))
    before = _snapshot(model)
    with pytest.raises(ArgumentError, match="ids"):
        model(x=np.full((3, 4), 7, np.float32), ids=np.array([1, 5], np.int32))
    _assert_unchanged(model, before)
    with pytest.raises(ArgumentError, match=r"input 'x' \(f32\[S, 4\]\)"):
        model(x=np.ones((3, 5), np.float32), ids=np.array([0, 0], np.int32))
    _assert_unchanged(model, before)
    model(x=np.ones((1, 4), np.float32), ids=np.array([0, 0], np.int32))
    assert model.position == 3


def test_states_are_not_call_arguments():
    model = rlx.reference(recurrent_graph(), {"w": np.eye(8, dtype=np.float32)})
    with pytest.raises(ArgumentError, match="unknown argument 'h'"):
        model(x=np.ones((1, 8), np.float32), h=np.ones((1, 8), np.float32))
    model = rlx.reference(attention_cache_graph())
    with pytest.raises(ArgumentError, match="unknown argument 'position'"):
        model(x=np.ones((1, D), np.float32), position=3, wq=np.eye(D, dtype=np.float32),
              wk=np.eye(D, dtype=np.float32), wv=np.eye(D, dtype=np.float32))


# ----------------------------------------------------------------------------- build errors


def _graph() -> tuple[rlx.Graph, rlx.Value, rlx.Value]:
    g = rlx.Graph("errors")
    return g, g.input("x", ("S", 4)), g.state("k", (8, 4))


def _append_twice(g, x, k):
    g.cache_append(k, x)
    g.cache_append(k, x)


def _read_after_append(g, x, k):
    g.cache_append(k, x)
    g.relu(k)


def _two_sizes(g, x, k):
    g.cache_append(k, x)
    g.cache_append(g.state("v", (8, 4)), g.input("y", (2, 4)))


def _two_capacities(g, x, k):
    g.cache_append(k, x)
    g.cache_append(g.state("v", (9, 4)), x)


def _assign_twice(g, x, k):
    g.assign(k, k * 2.0)
    g.assign(k, k)


@pytest.mark.parametrize("build, error, message", [
    (lambda g, x, k: g.state("s", ("S", 4)), ShapeError,
     r"state: s: dimension 0 is the symbol 'S': only graph inputs"),
    (lambda g, x, k: g.cache_append(x, x), GraphError,
     r"cache_append: cache: expected a state \(declared with g.state\), got the input 'x'"),
    (lambda g, x, k: g.cache_append(k, g.input("i", ("S", 4), "i32")), DTypeError,
     r"cache_append: rows: expected dtype f32 \(of cache 'k'\), got i32"),
    (lambda g, x, k: g.cache_append(k, g.input("y", ("S", 5))), ShapeError,
     r"cache_append: rows \[S, 5\]: expected \[S, 4\] \(rows of the cache \[8, 4\]\)"),
    (lambda g, x, k: g.cache_append(k, g.input("y", (9, 4))), ShapeError,
     r"expected at most 8 rows \(the capacity of the cache \[8, 4\]\), got 9"),
    (_append_twice, GraphError, r"cache 'k' was appended to \(in place\)"),
    (_read_after_append, GraphError, r"^x: the cache 'k' was appended to"),
    (_two_sizes, GraphError, r"expected S rows into capacity 8, got 2 rows into capacity 8"),
    (_two_capacities, GraphError, r"expected S rows into capacity 8, got S rows into capacity 9"),
    (lambda g, x, k: g.assign(k, x), ShapeError,
     r"assign: value \[S, 4\]: expected the shape of state 'k' \[8, 4\], got \[S, 4\]"),
    (lambda g, x, k: g.assign(k, g.input("i", (8, 4), "i32")), DTypeError,
     r"assign: value: expected dtype f32 \(of state 'k'\), got i32"),
    (lambda g, x, k: g.assign(x, x), GraphError,
     r"assign: state: expected a state \(declared with g.state\), got the input 'x'"),
    (_assign_twice, GraphError, r"assign: state 'k' was already updated by assign"),
])
def test_build_errors_name_the_argument(build, error, message):
    g, x, k = _graph()
    with pytest.raises(error, match=message):
        build(g, x, k)


def test_llama_kv_cache_build_errors():
    g = tiny_llama(decode=True)
    assert g.states == ["k0", "v0", "k1", "v1"]
    g = rlx.Graph("bad")
    x = g.input("x", (1, "S", D))
    ws = {n: g.param(n, s) for n, s in (("g", (D,)), ("q", (D, D)), ("kv", (D, 16)),
                                        ("o", (D, D)), ("f", (D, FFN)), ("d", (FFN, D)))}
    cos = g.input("cos", ("S", HEAD_DIM // 2))
    k, v = g.state("k", (CAPACITY, 16)), g.state("v", (CAPACITY, 16))
    args = (ws["g"], None, ws["q"], ws["kv"], ws["kv"], ws["o"], ws["g"], None, ws["f"],
            ws["f"], ws["d"], cos, cos)
    with pytest.raises(ShapeError, match=r"x: with kv_cache, expected \[S, D\]"):
        g.llama_decoder_block(x, *args, num_heads=4, head_dim=8, num_kv_heads=2,
                              kv_cache=(k, v))
    with pytest.raises(GraphError, match=r"kv_cache: expected a pair"):
        g.llama_decoder_block(x, *args, num_heads=4, head_dim=8, num_kv_heads=2, kv_cache=k)


# ----------------------------------------------------------------------------- StateStore


def test_snapshot_copies_only_what_a_call_changes():
    fn = lower(indexed_graph().to_module(), "mir").body.block.first_op
    store = StateStore.of_function(fn)
    assert store.caches == {"k"} and store.assigned == {"h"}
    store.position = 3
    snap = store.snapshot({"S": 2})
    assert snap.rows["k"][0] == 3 and snap.rows["k"][1].shape == (2, 4)
    assert set(snap.states) == {"h"}
    assert store.bind({"S": 2}) == {"S": 2, "T": 5}


# ----------------------------------------------------------------------------- the kernel


def insert_rows_kernel(rows: int | str, tail: tuple[int, ...], capacity: int, dtype: str,
                       width: int) -> tuple[Jitted, int]:
    block = Block(arg_types=[memref_type((rows, *tail), dtype), IndexType(),
                             memref_type((capacity, *tail), dtype)])
    op = lir.InsertRowsOp(*block.args)
    op.verify()
    dynamic.set_operand_shapes(op, [(rows, *tail), (capacity, *tail)])
    return Jitted([build_insert_rows(op, "insert_rows", width)], CPUS[width]), len(
        dynamic.kernel_symbols(op))


@pytest.mark.parametrize("width", [16, 8, 4])
@pytest.mark.parametrize("rows, tail, dtype", [
    ("S", (24,), "f32"), ("S", (3, 5), "f32"), ("S", (1,), "f32"), (3, (17,), "f32"),
    ("S", (6,), "i32"), ("S", (40,), "ui8"),
])
def test_insert_rows_kernel_writes_only_its_rows(width, rows, tail, dtype):
    capacity = 9
    kernel, n_sizes = insert_rows_kernel(rows, tail, capacity, dtype, width)
    assert (n_sizes == 1) == isinstance(rows, str)
    fn = kernel.function("insert_rows", 2, None, [ctypes.c_int64] * (1 + n_sizes))
    numpy_dtype = {"f32": np.float32, "i32": np.int32, "ui8": np.uint8}[dtype]
    rng = np.random.default_rng(5)
    for s, position in ([1, 0], [1, 8], [3, 2], [2, 7], [9, 0]) if isinstance(rows, str) \
            else ([3, 0], [3, 6], [3, 2]):
        cache = np.full((capacity, *tail), 99, numpy_dtype)
        new = (rng.uniform(0, 50, (s, *tail))).astype(numpy_dtype)
        fn(new.ctypes.data, cache.ctypes.data, position, *([s] if n_sizes else []))
        want = np.full_like(cache, 99)
        want[position:position + s] = new
        np.testing.assert_array_equal(cache, want, err_msg=f"S={s} P={position}")


def test_insert_rows_kernel_takes_the_position_then_the_rows_size():
    """dynamic.py's ABI: pointers, the index operand (position), then one size per symbol."""
    assert lir.InsertRowsOp in runtime_dims_kernels()
    kernel, _ = insert_rows_kernel("S", (4,), 5, "f32", 16)
    fn = kernel.function("insert_rows", 2, None, [ctypes.c_int64, ctypes.c_int64])
    cache = np.zeros((5, 4), np.float32)
    fn(np.ones((2, 4), np.float32).ctypes.data, cache.ctypes.data, 3, 2)
    assert cache[3:].all() and not cache[:3].any()


# ----------------------------------------------------------------------------- compiled models
# The same behaviours on `rlx.jit`: one compilation serves every S, the states live in the
# compiled model, and each call matches the reference.


def static_recurrent_graph() -> rlx.Graph:
    """h' = tanh(h + x @ w) for one row x; out = h (old) and h'."""
    g = rlx.Graph("recurrent_step")
    x = g.input("x", (1, 8))
    w = g.param("w", (8, 8))
    h = g.state("h", (1, 8))
    new = g.tanh(h + x @ w)
    g.assign(h, new)
    g.output(old=h, new=new)
    return g


def gather_after_append_graph() -> rlx.Graph:
    """A cache append, then a gather whose ids may be out of range, assigned to a state:
    a failing call has written the cache rows (and maybe the state) already."""
    g = rlx.Graph("late_gather_compiled")
    x = g.input("x", ("S", 4))
    ids = g.input("ids", (2,), "i32")
    table = g.param("table", (5, 4))
    k = g.state("k", (8, 4))
    h = g.state("h", (2, 4))
    rows = g.cache_append(k, x)
    att = g.attention(x, rows, rows, num_heads=1, head_dim=4, mask_kind="causal")
    picked = g.gather(table, ids)
    g.assign(h, h + picked)
    g.output(att)
    return g


@pytest.mark.parametrize("threads", [1, 2])
def test_compiled_decode_equals_the_full_forward(full_forward, threads):
    x, want = full_forward
    cos, sin = rope_tables(SEQ)
    model = rlx.jit(tiny_llama(decode=True), params=llama_weights(), threads=threads)
    outs = [model(x=x[:6], cos=cos[:6], sin=sin[:6])]
    for t in range(6, SEQ):
        outs.append(model(x=x[t:t + 1], cos=cos[t:t + 1], sin=sin[t:t + 1]))
    assert model.position == SEQ
    np.testing.assert_allclose(np.concatenate(outs), want, rtol=RTOL, atol=ATOL)
    reference = rlx.reference(tiny_llama(decode=True), llama_weights())
    reference(x=x, cos=cos, sin=sin)
    for name in ("k0", "v1"):
        np.testing.assert_allclose(model.state[name], reference.state[name], rtol=RTOL, atol=ATOL)
    model.reset()
    np.testing.assert_allclose(model(x=x[:6], cos=cos[:6], sin=sin[:6]), outs[0],
                               rtol=RTOL, atol=ATOL)


def test_compiled_assign_round_trips():
    w = np.random.default_rng(6).standard_normal((8, 8)).astype(np.float32) * 0.3
    model = rlx.jit(static_recurrent_graph(), params={"w": w})
    reference = rlx.reference(static_recurrent_graph(), {"w": w})
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal((1, 8)).astype(np.float32)
        for got, want in zip(model(x=x), reference(x=x), strict=True):
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(model.state["h"], reference.state["h"], rtol=RTOL, atol=ATOL)
    with pytest.raises(ValueError):
        model.state["h"][0, 0] = 1.0
    model.reset()
    assert not model.state["h"].any()


def test_compiled_calls_are_atomic():
    table = np.arange(20, dtype=np.float32).reshape(5, 4)
    model = rlx.jit(gather_after_append_graph(), params={"table": table})
    reference = rlx.reference(gather_after_append_graph(), {"table": table})
    x = np.random.default_rng(7).standard_normal((5, 4)).astype(np.float32)
    for m in (model, reference):
        m(x=x[:3], ids=np.array([0, 4], np.int32))
    before = _snapshot(model)
    with pytest.raises(ArgumentError, match="ids"):
        model(x=x[3:], ids=np.array([1, 5], np.int32))
    _assert_unchanged(model, before)
    with pytest.raises(ArgumentError, match="cache full"):
        model(x=np.ones((6, 4), np.float32), ids=np.array([0, 0], np.int32))
    _assert_unchanged(model, before)
    got = model(x=x[3:], ids=np.array([2, 3], np.int32))
    want = reference(x=x[3:], ids=np.array([2, 3], np.int32))
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    assert model.position == reference.position == 5
    for name in ("k", "h"):
        np.testing.assert_allclose(model.state[name], reference.state[name], rtol=RTOL, atol=ATOL)



def test_caches_of_one_shape_are_one_block_a_call_rolls_back_at_once():
    """The k and v caches of every layer (one shape and dtype) are rows of one buffer, so a
    call's snapshot copies their rows [P, P+S) in one copy; each cache is still its own
    C-contiguous state, and a failing call restores every one of them."""
    g = rlx.Graph("three_caches")
    x, y = g.input("x", ("S", 4)), g.input("y", ("S", 2))
    ids = g.input("ids", (2,), "i32")
    table = g.param("table", (5, 4))
    rows = [g.cache_append(g.state(name, shape), value) for name, shape, value in
            (("a", (8, 4), x), ("c", (8, 2), y), ("b", (8, 4), x * 2.0))]
    g.output(g.reduce_sum(rows[0] + rows[2], 0) + g.reduce_sum(g.gather(table, ids), 0),
             g.reduce_sum(rows[1], 0))
    model = rlx.jit(g, params={"table": np.ones((5, 4), np.float32)})
    assert sorted(names for names, _ in model._state.cache_blocks) == [("a", "b"), ("c",)]
    x0, y0 = np.arange(8, dtype=np.float32).reshape(2, 4), np.ones((2, 2), np.float32)
    model(x=x0, y=y0, ids=np.array([0, 4], np.int32))
    assert all(model.state[n].flags.c_contiguous for n in "abc")
    np.testing.assert_array_equal(model.state["b"][:2], 2 * x0)
    before = _snapshot(model)
    with pytest.raises(ArgumentError, match="ids"):
        model(x=np.full((3, 4), 7, np.float32), y=np.full((3, 2), 7, np.float32),
              ids=np.array([1, 5], np.int32))
    _assert_unchanged(model, before)
    with pytest.raises(ArgumentError, match="must not overlap the memory of argument 'b'"):
        model.run(x=x0[:1], y=y0[:1], ids=np.array([0, 0], np.int32),  # a writable alias
                  out=(model._state.arrays["b"][5], np.empty(2, np.float32)))
    _assert_unchanged(model, before)
    got, _ = model(x=x0[:1], y=y0[:1], ids=np.array([0, 0], np.int32))
    np.testing.assert_allclose(got, 3 * (x0.sum(0) + x0[0]) + 2)
    assert model.position == 3

def test_large_state_buffers_are_lazily_committed_memory_maps():
    """A KV cache of max_seq rows is an anonymous memory map (committed page by page as
    rows are written, never a huge page zero-filled at a fresh slot's first row); small
    states stay numpy arrays. Both start at zero, are writable and keep their layout,
    and a model writes and resets them as before."""
    import mmap

    from rlx_mlir.state import LAZY_BUFFER_BYTES, zeroed_buffer

    def is_memory_map(array: np.ndarray) -> bool:
        while isinstance(array, np.ndarray):
            array = array.base
        return isinstance(array, memoryview) and isinstance(array.obj, mmap.mmap)

    rows = LAZY_BUFFER_BYTES // (64 * 4) + 3
    big, small = zeroed_buffer((rows, 64), np.float32), zeroed_buffer((3, 5), np.int32)
    assert is_memory_map(big) and not is_memory_map(small)
    for buffer, shape, dtype in ((big, (rows, 64), np.float32), (small, (3, 5), np.int32)):
        assert buffer.shape == shape and buffer.dtype == dtype and buffer.flags.writeable
        assert buffer.flags.c_contiguous and not buffer.any()
    assert big.ctypes.data % 4096 == 0  # page-aligned
    g = rlx.Graph("lazy_cache")
    cache = g.state("cache", (rows, 64))
    appended = g.cache_append(cache, g.input("x", ("S", 64)))
    g.output(g.reduce_sum(appended, 0))
    model = rlx.jit(g)
    assert is_memory_map(model._state.arrays["cache"])
    x = np.arange(2 * 64, dtype=np.float32).reshape(2, 64)
    np.testing.assert_allclose(model(x=x), x.sum(0))
    np.testing.assert_allclose(model(x=x), 2 * x.sum(0))
    np.testing.assert_array_equal(model.state["cache"][2:4], x)
