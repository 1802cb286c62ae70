"""Training state (issue 23, item 5): `g.state(..., rollback=False)`, initial state values
(`rlx.jit(g, state=...)`, `rlx.reference(g, state=...)`) and `model.set_state`.

A state declared with `rollback=False` (weights, optimizer moments) carries the argument
attribute `rlx.rollback = false` through every stage into the compiled entry's ABI: a call
that raises does not restore it (no snapshot copy) and `reset()` does not zero it; the
other states keep the rules of docs/semantics.md "State". Each behaviour is checked on the
reference executor at hir, mir and lir and on the compiled model.
"""

from __future__ import annotations

import numpy as np
import pytest

import rlx_mlir as rlx
from rlx_mlir.core.abi import ARG_ROLLBACK, ROLE_STATE, EntryABI
from rlx_mlir.core.errors import ArgumentError, GraphError
from rlx_mlir.ir import parse_module
from rlx_mlir.pipeline import lower
from rlx_mlir.state import StateStore

STAGES = ("hir", "mir", "lir")
TABLE = np.arange(20, dtype=np.float32).reshape(5, 4)
W0 = np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32)
M0 = np.random.default_rng(1).standard_normal((1, 4)).astype(np.float32)
X = np.random.default_rng(2).standard_normal((2, 4)).astype(np.float32)
GOOD_IDS, BAD_IDS = np.array([0, 4], np.int32), np.array([1, 5], np.int32)


def step_graph() -> rlx.Graph:
    """A step that updates a weight `w` and a moment `m` (rollback=False) and a recurrent
    state `h` (rolled back), all assigned BEFORE a gather whose ids may be out of range:
    a failing call has written all three when it raises."""
    g = rlx.Graph("step")
    x = g.input("x", (2, 4))
    ids = g.input("ids", (2,), "i32")
    table = g.param("table", (5, 4))
    w = g.state("w", (4, 4), rollback=False)
    m = g.state("m", (1, 4), rollback=False)
    h = g.state("h", (1, 4))
    y = x @ w
    total = g.reduce_sum(y, 0, keepdim=True)
    g.assign(w, w * 0.5 + 1.0)
    g.assign(m, m + total)
    g.assign(h, h + total)
    g.output(g.gather(table, ids) + y)
    return g


def model_at(stage: str, state=None):
    """The reference executor at `stage`, or the compiled model ("jit")."""
    params = {"table": TABLE}
    if stage == "jit":
        return rlx.jit(step_graph(), params=params, state=state)
    if stage == "hir":
        return rlx.reference(step_graph(), params, state=state)
    return rlx.reference(lower(step_graph().to_module(), stage), params, state=state)


def expected_step(w, m, h):
    """numpy: the output and the states after one call on X, GOOD_IDS."""
    y = X @ w
    total = y.sum(0, keepdims=True)
    return TABLE[GOOD_IDS] + y, w * 0.5 + 1.0, m + total, h + total


def states_of(model) -> dict[str, np.ndarray]:
    return {name: np.array(view) for name, view in model.state.items()}


# ----------------------------------------------------------------------------- the attribute


def test_rollback_false_is_an_argument_attribute_only_where_declared():
    text = step_graph().to_mlir()
    assert text.count(f"{ARG_ROLLBACK} = false") == 2
    parsed = parse_module(text)  # rlx-opt round-trips it
    assert StateStore.of_function(rlx.core.abi.entry_function(parsed)).kept == {"w", "m"}
    module = step_graph().to_module()
    for stage in STAGES:
        store = StateStore.of_function(
            rlx.core.abi.entry_function(lower(module.clone(), stage)))
        assert store.kept == {"w", "m"}, stage


def test_the_compiled_entry_abi_says_which_states_roll_back():
    model = rlx.jit(step_graph(), params={"table": TABLE})
    rollback = {a.name: a.rollback for a in model.abi.with_role(ROLE_STATE)}
    assert rollback == {"w": False, "m": False, "h": True}
    assert EntryABI.from_json(model.abi.to_json()) == model.abi  # the disk cache keeps it
    assert f'{ARG_ROLLBACK} = false' in model.mlir("llvm")


def test_the_gradient_graph_keeps_rollback_false():
    g = rlx.Graph("loss")
    x = g.input("x", (3, 4))
    w = g.state("w", (4, 2), rollback=False)
    loss = g.reduce_sum(x @ w, (0, 1))
    g.output(loss)
    grads = rlx.grad(g, loss, wrt=["w"])
    assert grads.to_mlir().count(f"{ARG_ROLLBACK} = false") == 1
    grads.state("w2", (2,), rollback=False)  # the copy's arguments are not the original's
    g.state("w2", (2,))
    assert "w2" not in StateStore.of_function(
        rlx.core.abi.entry_function(g.to_module())).kept


def test_rollback_must_be_a_bool():
    with pytest.raises(GraphError, match=r"state 'w': rollback: expected a bool, got 0"):
        rlx.Graph().state("w", (2,), rollback=0)


# ----------------------------------------------------------------------------- values, reset


@pytest.mark.parametrize("stage", [*STAGES, "jit"])
def test_initial_state_values_are_honoured(stage):
    model = model_at(stage, state={"w": W0, "m": M0})
    np.testing.assert_array_equal(model.state["w"], W0)
    out = model(x=X, ids=GOOD_IDS)
    want, w1, m1, h1 = expected_step(W0, M0, np.zeros((1, 4), np.float32))
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    for name, value in {"w": w1, "m": m1, "h": h1}.items():
        np.testing.assert_allclose(model.state[name], value, rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("stage", ["hir", "jit"])
def test_set_state_writes_a_copy(stage):
    model = model_at(stage)
    w = W0.astype(np.float64)  # casts to f32 under same_kind
    model.set_state("w", w)
    w[:] = 0  # the model holds its own copy
    np.testing.assert_allclose(model.state["w"], W0)
    model.set_state("h", M0)
    out = model(x=X, ids=GOOD_IDS)
    want, _, _, h1 = expected_step(W0, np.zeros((1, 4), np.float32), M0)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(model.state["h"], h1, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("stage", ["hir", "lir", "jit"])
def test_reset_keeps_rollback_false_states_and_zeroes_the_others(stage):
    model = model_at(stage, state={"w": W0, "m": M0})
    model(x=X, ids=GOOD_IDS)
    before = states_of(model)
    assert before["h"].any()
    model.reset()
    after = states_of(model)
    assert not after["h"].any()
    np.testing.assert_array_equal(after["w"], before["w"])
    np.testing.assert_array_equal(after["m"], before["m"])


# ----------------------------------------------------------------------------- failed calls


def test_a_failed_compiled_call_restores_only_the_states_that_roll_back():
    """The compiled step runs every kernel, then reports the bad index: the call wrote all
    three states; `h` is restored, `w` and `m` keep what the call wrote."""
    model = model_at("jit", state={"w": W0, "m": M0})
    model(x=X, ids=GOOD_IDS)
    before = states_of(model)
    with pytest.raises(ArgumentError, match="ids"):
        model(x=X, ids=BAD_IDS)
    after = states_of(model)
    np.testing.assert_array_equal(after["h"], before["h"])  # rolled back
    _, w2, m2, _ = expected_step(before["w"], before["m"], before["h"])
    np.testing.assert_allclose(after["w"], w2, rtol=1e-5, atol=1e-5)  # kept as written
    np.testing.assert_allclose(after["m"], m2, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("stage", STAGES)
def test_a_failed_reference_call_leaves_every_state_as_it_was(stage):
    """The reference executor stops at the bad index, before the assigns write (they are
    the call's last writes), so no state changes -- none needed restoring."""
    model = model_at(stage, state={"w": W0, "m": M0})
    model(x=X, ids=GOOD_IDS)
    before = states_of(model)
    with pytest.raises(ArgumentError, match="ids"):
        model(x=X, ids=BAD_IDS)
    for name, value in states_of(model).items():
        np.testing.assert_array_equal(value, before[name], err_msg=name)


def test_the_snapshot_copies_no_rollback_false_state():
    store = StateStore.of_function(rlx.core.abi.entry_function(step_graph().to_module()))
    assert store.assigned == {"w", "m", "h"}
    snapshot = store.snapshot({})
    assert set(snapshot.states) == {"h"}


def test_a_kv_cache_that_does_not_roll_back_keeps_its_rows_but_not_the_position():
    g = rlx.Graph("cache")
    x = g.input("x", ("S", 2))
    ids = g.input("ids", (1,), "i32")
    k = g.state("k", (4, 2), rollback=False)
    table = g.param("table", (3, 2))
    rows = g.cache_append(k, x)
    g.output(g.gather(table, ids) + g.reduce_sum(rows, 0, keepdim=True))
    model = rlx.jit(g, params={"table": np.zeros((3, 2), np.float32)})
    model(x=np.ones((1, 2), np.float32), ids=np.array([0], np.int32))
    assert StateStore.of_abi(model.abi).snapshot({"S": 2}).rows == {}
    with pytest.raises(ArgumentError, match="ids"):
        model(x=np.full((2, 2), 3, np.float32), ids=np.array([7], np.int32))
    assert model.position == 1  # the position is restored, the rows are not
    np.testing.assert_array_equal(model.state["k"][1:3], np.full((2, 2), 3))


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize("state, message", [
    ({"v": W0}, r"state: 'v' is not a state of the model \(states: w, m, h\)"),
    ({"w": W0[:2]}, r"state 'w' \(f32\[4, 4\]\): expected shape \[4, 4\], got \[2, 4\]"),
    ({"w": W0.astype(np.complex64)}, r"state 'w' \(f32\[4, 4\]\): expected dtype f32"),
    ([("w", W0)], r"state: expected a mapping of state names to arrays \(a dict\), got list"),
])
@pytest.mark.parametrize("stage", ["hir", "jit"])
def test_bad_state_values_are_argument_errors_naming_the_state(stage, state, message):
    with pytest.raises(ArgumentError, match=message):
        model_at(stage, state=state)


@pytest.mark.parametrize("stage", ["hir", "jit"])
def test_set_state_refuses_bad_values_and_changes_nothing(stage):
    model = model_at(stage, state={"w": W0})
    with pytest.raises(ArgumentError, match=r"state 'w' \(f32\[4, 4\]\): expected shape"):
        model.set_state("w", np.ones((4, 5), np.float32))
    with pytest.raises(ArgumentError, match=r"'x' is not a state of the model"):
        model.set_state("x", X)
    np.testing.assert_array_equal(model.state["w"], W0)
