"""The compiled-model API: binding, argument errors, out=, threads, caches, introspection."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import rlx_mlir as rlx

RNG = np.random.default_rng(3)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(int(np.prod(shape))).astype(np.float32).reshape(shape)


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RLX_CACHE_DIR", str(tmp_path / "cache"))


def gather_graph(name: str = "take") -> rlx.Graph:
    g = rlx.Graph(name)
    table = g.param("table", (10, 6))
    ids = g.input("ids", (4,), dtype="i32")
    g.output(g.gather(table, ids), table)
    return g


def test_call_by_position_keyword_and_bound_params():
    table = rand(10, 6)
    ids = np.array([9, 0, 3, 3], dtype=np.int32)
    model = rlx.jit(gather_graph())
    rows, copy = model(ids, table)
    np.testing.assert_array_equal(rows, table[ids])
    np.testing.assert_array_equal(copy, table)
    assert copy is not table and not np.shares_memory(copy, table)
    bound = rlx.jit(gather_graph(), params={"table": table})
    table[:] = 0  # params are copied at jit time
    np.testing.assert_array_equal(bound(ids=ids)[0], rows)


def test_outputs_are_fresh_and_survive_the_next_call():
    model = rlx.jit(gather_graph(), params={"table": rand(10, 6)})
    first, _ = model(np.array([1, 2, 3, 4], np.int32))
    kept = first.copy()
    model(np.array([5, 6, 7, 8], np.int32))
    np.testing.assert_array_equal(first, kept)


@pytest.mark.parametrize(
    "ids, error",
    [
        (np.array([0, 10, 1, 2], np.int32), "negative or out of range"),
        (np.array([0, -1, 1, 2], np.int32), "negative or out of range"),
        (np.array([0, 1, 2], np.int32), r"expected shape \[4\], got \[3\]"),
        (np.array([0.0, 1.0, 2.0, 3.0]), "expected dtype i32"),
        (np.array([0, 1, 2, 2**33]), "values must fit in i32"),
        ([[0, 1, 2, 3]], r"expected shape \[4\], got \[1, 4\]"),
    ],
)
def test_bad_inputs_raise_and_the_process_survives(ids, error):
    model = rlx.jit(gather_graph(), params={"table": rand(10, 6)})
    with pytest.raises(rlx.ArgumentError, match=error):
        model(ids)
    np.testing.assert_array_equal(model(np.array([1, 1, 1, 1], np.int32))[0].shape, (4, 6))


def test_missing_unknown_and_rebound_arguments():
    model = rlx.jit(gather_graph(), params={"table": rand(10, 6)})
    with pytest.raises(rlx.ArgumentError, match="missing argument.*ids"):
        model()
    with pytest.raises(rlx.ArgumentError, match="unknown argument 'idz'"):
        model(idz=np.zeros(4, np.int32))
    with pytest.raises(rlx.ArgumentError, match="was bound at compile time"):
        model(np.zeros(4, np.int32), table=rand(10, 6))
    with pytest.raises(rlx.ArgumentError, match="'weights' is not a param"):
        rlx.jit(gather_graph(), params={"weights": rand(10, 6)})


def test_run_into_caller_owned_outputs():
    table = rand(10, 6)
    model = rlx.jit(gather_graph(), params={"table": table})
    ids = np.array([1, 2, 3, 4], np.int32)
    rows, copy = np.empty((4, 6), np.float32), np.empty((10, 6), np.float32)
    result = model.run(ids, out=(rows, copy))
    assert result[0] is rows
    np.testing.assert_array_equal(rows, table[ids])
    for bad, words in [
        ((np.empty((4, 5), np.float32), copy), r"shape \[4, 6\]"),
        ((np.empty((4, 6), np.float64), copy), "dtype f32"),
        ((np.empty((6, 4), np.float32).T, copy), "C-contiguous"),
        (rows, "expected 2 numpy array"),
    ]:
        with pytest.raises(rlx.ArgumentError, match=words):
            model.run(ids, out=bad)


def test_out_may_not_overlap_an_input():
    g = rlx.Graph("ident")
    x = g.input("x", (3,), dtype="i64")
    g.output(x)
    model = rlx.jit(g)
    data = np.arange(3)
    with pytest.raises(rlx.ArgumentError, match="must not overlap"):
        model.run(data, out=data)


def test_introspection():
    model = rlx.jit(gather_graph())
    assert "mir.gather" in model.mlir("hir")
    assert "lir.gather" in model.mlir("lir")
    llvm_text = model.mlir("llvm")
    assert "llvm.func @take(" in llvm_text and " lir." not in llvm_text
    assert "define" in model.llvm_ir
    assert ".text" in model.asm or "take" in model.asm
    with pytest.raises(rlx.RlxError, match="expected a stage"):
        model.mlir("asm")


def test_compile_mlir_at_every_stage():
    g = gather_graph()
    model = rlx.jit(g)
    table, ids = rand(10, 6), np.array([3, 1, 4, 1], np.int32)
    expected = model(ids, table)
    for stage in ("hir", "mir", "lir", "llvm"):
        again = rlx.compile_mlir(model.mlir(stage))
        for got, want in zip(again(ids=ids, table=table), expected, strict=True):
            np.testing.assert_array_equal(got, want)


def test_compile_mlir_reports_bad_text():
    with pytest.raises(rlx.RlxError, match="does not parse or verify"):
        rlx.compile_mlir("func.func @f(")


def test_two_graphs_run_on_two_threads_at_once():
    # Calls release the GIL: two threads finish faster than the same calls in a row.
    n = 512
    g = rlx.Graph("mm")
    a = g.input("a", (n, n))
    g.output(g.matmul(a, g.param("b", (n, n))))
    models = [rlx.jit(g, params={"b": rand(n, n)}) for _ in range(2)]
    x = rand(n, n)
    results = [None, None]

    def work(i):
        for _ in range(3):
            results[i] = models[i](x)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(2):
        np.testing.assert_allclose(results[i], models[i](x), rtol=0, atol=0)


CACHE_SCRIPT = """
import time, numpy as np, rlx_mlir as rlx
g = rlx.Graph("cached")
t = g.param("t", (8, 3)); i = g.input("i", (2,), dtype="i64")
g.output(g.gather(t, i))
start = time.perf_counter()
m = rlx.jit(g)
print("disk" if m.from_disk_cache else "compiled", time.perf_counter() - start)
print(m(np.array([7, 0]), np.arange(24, dtype=np.float32).reshape(8, 3)).sum())
"""


def _fresh_process(env: dict[str, str]) -> tuple[str, str]:
    proc = subprocess.run([sys.executable, "-c", CACHE_SCRIPT], capture_output=True, text=True,
                          env={**os.environ, **env}, check=True)
    how, total = proc.stdout.split("\n")[:2]
    return how.split()[0], total


def test_disk_cache_hit_in_a_second_process_and_miss_for_another_cpu(tmp_path):
    env = {"RLX_CACHE_DIR": str(tmp_path / "disk")}
    assert _fresh_process(env) == ("compiled", "69.0")
    assert _fresh_process(env) == ("disk", "69.0")
    assert len(list(Path(env["RLX_CACHE_DIR"]).glob("*.o"))) == 1
    assert _fresh_process({**env, "RLX_TARGET_CPU": "haswell"})[0] == "compiled"
    assert len(list(Path(env["RLX_CACHE_DIR"]).glob("*.o"))) == 2
    assert _fresh_process({"RLX_CACHE_DIR": "off"})[0] == "compiled"


def test_same_graph_twice_in_a_process_compiles_once():
    start = time.perf_counter()
    first = rlx.jit(gather_graph("twice"))
    cold = time.perf_counter() - start
    second = rlx.jit(gather_graph("twice"))
    assert second.address("twice") == first.address("twice")  # the same machine code
    assert cold > 0


def test_unknown_target_cpu_is_an_error(monkeypatch):
    monkeypatch.setenv("RLX_TARGET_CPU", "pentium-9000")
    with pytest.raises(rlx.RlxError, match="RLX_TARGET_CPU: expected one of"):
        rlx.jit(gather_graph())


# ----------------------------------------------------------------------------- the entry ABI


def kv_graph() -> rlx.Graph:
    """A symbolic length S, a KV cache (append), an assigned state and a packable weight."""
    g = rlx.Graph("kv")
    x = g.input("x", ("S", 16))
    w = g.param("w", (16, 32))
    k = g.state("k", (64, 32))
    h = g.state("h", (1, 32))
    rows = g.cache_append(k, x @ w)
    new = g.tanh(h) + 0.5
    g.assign(h, new)
    g.output(rows, new)
    return g


def test_entry_abi_is_read_from_the_llvm_entry_and_round_trips_through_json():
    from rlx_mlir.core.abi import EntryABI

    w = rand(16, 32)
    model = rlx.jit(kv_graph(), params={"w": w}, max_dims={"S": 8})
    abi = model.abi
    assert abi == EntryABI.from_llvm(model.stage_module("llvm"))
    assert EntryABI.from_json(abi.to_json()) == abi
    roles = {a.name: (a.role, a.shape, a.dtype) for a in abi.args}
    assert roles["x"] == ("input", ("S", 16), "f32")
    assert roles["k"] == ("state", (64, 32), "f32") and roles["position"][0] == "position"
    assert abi.bounds == {"S": 8, "T": 64} and abi.updated("append") == {"k"}
    assert abi.updated("assign") == {"h"} and [d.symbol for d in abi.cache_dims] == ["T"]
    assert abi.layouts == {"w": "packed_rhs"}
    assert abi.arena_bytes == model.arena_bytes and not abi.profile_sites
    assert model.recompile(profile=True).abi.profile_sites  # an instrumented build has sites
    with pytest.raises(ValueError, match="not an entry ABI"):
        EntryABI.from_json('{"name": "kv"}')


KV_SCRIPT = """
import sys, numpy as np, rlx_mlir as rlx
sys.path.insert(0, {tests!r})
from test_jit_api import kv_graph
rng = np.random.default_rng(0)
w, x = rng.standard_normal((16, 32), np.float32), rng.standard_normal((3, 16), np.float32)
m = rlx.jit(kv_graph(), params={{"w": w}}, max_dims={{"S": 8}})
m(x); out = m(x[:2])[0]
ref = rlx.reference(kv_graph(), params={{"w": w}})
ref(x); want = ref(x[:2])[0]
print("disk" if m.from_disk_cache else "compiled", m.position, float(np.abs(out - want).max()))
"""


def test_a_stateful_symbolic_build_from_the_disk_cache_runs(tmp_path):
    """The second process loads the machine code and its EntryABI from disk, lowering
    nothing, and runs it with its states, position and packed weight."""
    env = {**os.environ, "RLX_CACHE_DIR": str(tmp_path / "disk")}
    script = KV_SCRIPT.format(tests=str(Path(__file__).parent))
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           env=env, check=True).stdout.split() for _ in range(2)]
    assert [r[:2] for r in runs] == [["compiled", "5"], ["disk", "5"]]
    assert all(float(r[2]) < 1e-4 for r in runs)


def test_recompile_changes_options_and_shares_the_bound_params():
    table = rand(10, 6)
    ids = np.array([1, 2, 3, 9], np.int32)
    model = rlx.jit(gather_graph("re"), params={"table": table})
    assert model.options.alignment == 64 and model.recompile() is model
    again = model.recompile(alignment=128)
    assert again.options.alignment == 128 and again is model.recompile(alignment=128)
    for got, want in zip(again(ids=ids), model(ids=ids), strict=True):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(rlx.RlxError, match="recompile"):
        model.recompile(no_such_option=1)


def test_compiled_and_reference_models_are_runnables():
    from rlx_mlir.runnable import Runnable

    assert isinstance(rlx.jit(gather_graph()), Runnable)
    assert isinstance(rlx.reference(gather_graph()), Runnable)
    assert not isinstance(gather_graph(), Runnable)


def test_llvm_ir_is_the_same_fresh_or_from_the_disk_cache(tmp_path, monkeypatch):
    """A fresh build keeps its LLVM IR before codegen (which runs passes of its own), so
    the text equals the one a build loaded from the disk cache rebuilds."""
    import rlx_mlir.backend as backend

    monkeypatch.setenv("RLX_CACHE_DIR", str(tmp_path))
    g = rlx.Graph("llvm_ir_cache")
    x = g.input("x", (4, 8))
    w = g.param("w", (8, 8))
    g.output(g.softmax(x @ w))
    fresh = rlx.jit(g).llvm_ir
    monkeypatch.setattr(backend, "_MEMORY", {})
    cached = rlx.jit(g)
    assert cached._executable.llvm_ir is None  # taken from disk, not built
    assert cached.llvm_ir == fresh
