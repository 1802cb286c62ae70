"""Compiled symbolic dims (issue 9): one `rlx.jit` serves every size of its symbols.

Every op that takes a symbol runs compiled at many sizes (1, odd, multiples of the vector
width ± 1, the bound) against the reference executor, from ONE compilation (the test
makes any further compilation fail); errors name the symbol; the arena is planned once
for the bounds; inputs and outputs of every size sit against a guard page (a kernel that
reads or writes past them crashes the subprocess).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import rlx_mlir as rlx
import rlx_mlir.compiler as compiler_module
from rlx_mlir import ArgumentError, OptionError

SIZES = (1, 2, 7, 15, 16, 17, 33, 64)
BOUND = 64
RNG = np.random.default_rng(7)


def _normal(*shape, scale=0.5):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


@pytest.fixture
def no_recompile(monkeypatch):
    """After the fixture's first compile, compiling again raises."""
    compiled = []
    original = compiler_module.compile_module

    def once(*args, **kwargs):
        if compiled:
            raise AssertionError("a second compilation")
        compiled.append(True)
        return original(*args, **kwargs)

    monkeypatch.setattr(compiler_module, "compile_module", once)
    monkeypatch.setattr(compiler_module, "load_cached", lambda *a, **k: None)
    return compiled


def _check_sizes(g, params, inputs_at, sizes=SIZES, max_dims=None, threads=None, tol=2e-5):
    model = rlx.jit(g, params=params, max_dims=max_dims or {"S": BOUND}, threads=threads)
    ref = rlx.reference(g)
    for s in sizes:
        inputs = inputs_at(s)
        got = model(**inputs)
        want = ref(**inputs, **params)
        got = got if isinstance(got, tuple) else (got,)
        want = want if isinstance(want, tuple) else (want,)
        for a, b in zip(got, want, strict=True):
            assert a.shape == b.shape
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=f"S = {s}")
    return model


# ----------------------------------------------------------------------------- ops


@pytest.mark.parametrize("threads", [1, 2])
def test_row_ops_at_every_size_from_one_compile(no_recompile, threads):
    """Elementwise (broadcast, fused), norms, softmax, reductions over trailing axes,
    narrow/concat/transpose on static axes, reshape keeping S, gather/embedding."""
    g = rlx.Graph("rows")
    x = g.input("x", ("S", 24))
    ids = g.input("ids", ("S",), "i32")
    table, gamma, beta = g.param("table", (10, 24)), g.param("gamma", (24,)), g.param("beta", (24,))
    h = g.silu(x) * 2.0 + g.embedding(table, ids)
    n = g.rms_norm(h, gamma) + g.layer_norm(h, gamma, beta)
    sm = g.softmax(n, axis=-1)
    red = g.reduce_sum(sm, 1, keepdim=True) + g.reduce_max(n, -1, keepdim=True)
    t = g.reshape(g.transpose(g.reshape(n, ("S", 4, 6)), (0, 2, 1)), ("S", 24))
    cat = g.concat([g.narrow(t, 1, 3, 8), g.narrow(n, 1, 0, 5)], axis=1)
    g.output(sm * red, cat, names=["a", "b"])
    params = {"table": _normal(10, 24), "gamma": 1 + _normal(24, scale=0.1), "beta": _normal(24)}
    _check_sizes(g, params, lambda s: {"x": _normal(s, 24), "ids": RNG.integers(0, 10, s).astype(np.int32)},
                 threads=threads)
    assert len(no_recompile) == 1


@pytest.mark.parametrize("threads", [1, 2])
def test_matmuls_rope_and_attention_at_every_size(no_recompile, threads):
    d, heads, kv_heads, hd = 48, 4, 2, 12
    g = rlx.Graph("attn")
    x = g.input("x", ("S", d))
    cos, sin = g.input("cos", ("S", hd // 2)), g.input("sin", ("S", hd // 2))
    wq, wk, wv = g.param("wq", (d, heads * hd)), g.param("wk", (d, kv_heads * hd)), g.param("wv", (d, kv_heads * hd))
    b = g.param("b", (heads * hd,))
    q = g.rope(g.linear(x, wq, b, activation="gelu"), cos, sin, head_dim=hd)
    k = g.rope(g.matmul(x, wk), cos, sin, head_dim=hd)
    o = g.attention(q, k, g.matmul(x, wv), num_heads=heads, head_dim=hd, num_kv_heads=kv_heads,
                    mask_kind="causal")
    g.output(o)
    params = {"wq": _normal(d, heads * hd, scale=0.2), "wk": _normal(d, kv_heads * hd, scale=0.2),
              "wv": _normal(d, kv_heads * hd, scale=0.2), "b": _normal(heads * hd)}

    def inputs(s):
        angles = np.arange(s)[:, None] * 0.1 * np.arange(1, hd // 2 + 1)[None, :]
        return {"x": _normal(s, d), "cos": np.cos(angles).astype(np.float32),
                "sin": np.sin(angles).astype(np.float32)}

    _check_sizes(g, params, inputs, threads=threads, tol=5e-5)


def test_dequant_matmul_rows_at_every_size(no_recompile):
    from rlx_mlir.core import reference_kernels as K

    g = rlx.Graph("dq")
    x = g.input("x", ("S", 64))
    g.output(g.dequant_matmul(x, g.param("w", (40, 68), "ui8"), "q8_0"))
    params = {"w": K.QUANTIZE["q8_0"](_normal(40, 64))}
    _check_sizes(g, params, lambda s: {"x": _normal(s, 64)}, tol=1e-4)


def test_two_symbols_and_a_batch_prefix(no_recompile):
    g = rlx.Graph("two")
    a = g.input("a", ("B", "S", 8))
    b = g.input("b", ("B", "S", 8))
    g.output(g.softmax(a * b + 1.0, axis=-1))
    model = rlx.jit(g, max_dims={"B": 4, "S": 32})
    ref = rlx.reference(g)
    for bsz, s in ((1, 1), (2, 7), (4, 32), (3, 17)):
        arrays = {"a": _normal(bsz, s, 8), "b": _normal(bsz, s, 8)}
        np.testing.assert_allclose(model(**arrays), ref(**arrays), rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------------------------- arena, errors


def test_arena_is_planned_once_at_the_bounds():
    g = rlx.Graph("arena")
    x = g.input("x", ("S", 32))
    g.output(g.rms_norm(g.silu(x) * x + 1.0, g.param("gamma", (32,))))
    small = rlx.jit(g, max_dims={"S": 16})
    large = rlx.jit(g, max_dims={"S": 1024})
    assert small.max_dims == {"S": 16} and large.max_dims == {"S": 1024}
    assert large.arena_bytes >= 64 * small.arena_bytes > 0
    assert "max_dims {S = 1024 : i64}" in large.mlir("lir")
    default = rlx.jit(g)
    assert default.max_dims == {"S": 4096}


def test_symbol_errors_name_the_symbol():
    g = rlx.Graph("errs")
    a, b = g.input("a", ("S", 4)), g.input("b", ("S", 4))
    g.output(a + b)
    model = rlx.jit(g, max_dims={"S": 8})
    with pytest.raises(ArgumentError, match=r"symbol S .* is 3 .*got 5"):
        model(a=np.zeros((3, 4), np.float32), b=np.zeros((5, 4), np.float32))
    with pytest.raises(ArgumentError, match=r"symbol S \(dim 0\): expected a size >= 1, got 0"):
        model(a=np.zeros((0, 4), np.float32), b=np.zeros((0, 4), np.float32))
    with pytest.raises(ArgumentError, match=r"symbol S is 9, above its bound 8"):
        model(a=np.zeros((9, 4), np.float32), b=np.zeros((9, 4), np.float32))
    with pytest.raises(ArgumentError, match=r"out 'out0': expected shape \[2, 4\]"):
        model.run(a=np.zeros((2, 4), np.float32), b=np.zeros((2, 4), np.float32),
                  out=np.zeros((3, 4), np.float32))
    out = np.zeros((2, 4), np.float32)
    model.run(a=np.ones((2, 4), np.float32), b=np.ones((2, 4), np.float32), out=out)
    assert (out == 2).all()
    with pytest.raises(OptionError, match=r"max_dims: 'T' is not a symbol of the graph \(symbols: S\)"):
        rlx.jit(g, max_dims={"T": 4})
    with pytest.raises(OptionError, match=r"max_dims\['S'\]: expected an int >= 1"):
        rlx.jit(g, max_dims={"S": 0})


def test_an_op_without_a_kernel_for_its_symbols_is_refused_before_running():
    g = rlx.Graph("along")
    x = g.input("x", ("S", 4))
    g.output(g.transpose(x, (1, 0)) @ x)  # a product over S: K = S
    with pytest.raises(rlx.RlxError, match=r"lir.matmul \['\[4, S\]', '\[S, 4\]', '\[4, 4\]'\]: "
                                           r"only the rows of the lhs may be symbolic"):
        rlx.jit(g)


# ----------------------------------------------------------------------------- guard pages

GUARDED = textwrap.dedent('''
    import ctypes, mmap, sys
    import numpy as np
    import rlx_mlir as rlx

    PAGE = mmap.PAGESIZE
    libc = ctypes.CDLL(None)
    keep = []

    def guarded(shape, dtype=np.float32, fill=None):
        """An array that ends exactly where a PROT_NONE page starts."""
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        pages = -(-nbytes // PAGE) + 1
        region = mmap.mmap(-1, pages * PAGE)
        base = ctypes.addressof(ctypes.c_char.from_buffer(region))
        assert libc.mprotect(ctypes.c_void_p(base + (pages - 1) * PAGE), PAGE, 0) == 0
        keep.append(region)
        start = (pages - 1) * PAGE - nbytes
        array = np.frombuffer(region, dtype=np.uint8, count=nbytes, offset=start).view(dtype)
        array = array.reshape(shape)
        if fill is not None:
            array[...] = fill
        return array

    g = rlx.Graph("guard")
    x = g.input("x", ("S", 20))
    ids = g.input("ids", ("S",), "i32")
    w = g.param("w", (20, 36))
    h = g.rms_norm(g.matmul(x, w), g.param("gamma", (36,))) + g.embedding(g.param("t", (5, 36)), ids)
    g.output(g.softmax(h, axis=-1))
    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((20, 36)).astype(np.float32),
              "gamma": np.ones(36, np.float32), "t": rng.standard_normal((5, 36)).astype(np.float32)}
    model = rlx.jit(g, params=params, max_dims={"S": 40}, threads=int(sys.argv[1]))
    ref = rlx.reference(g)
    for s in (1, 3, 16, 17, 40):
        xs = guarded((s, 20), fill=rng.standard_normal((s, 20)))
        ids_s = guarded((s,), np.int32, fill=rng.integers(0, 5, s))
        out = guarded((s, 36))
        model.run(x=xs, ids=ids_s, out=out)
        np.testing.assert_allclose(out, ref(x=xs, ids=ids_s, **params), rtol=1e-5, atol=1e-5)
    print("ok")
''')


@pytest.mark.parametrize("threads", [1, 2])
def test_no_kernel_touches_past_its_buffers_at_any_size(threads):
    done = subprocess.run([sys.executable, "-c", GUARDED, str(threads)], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_gather_rows_of_a_symbolic_table(no_recompile):
    """The last-row gather of a language model: a table of S rows, R ids, both symbolic;
    an id past the run-time S is an ArgumentError naming it."""
    g = rlx.Graph("last")
    h = g.input("h", ("S", 24))
    rows = g.input("rows", ("R",), "i32")
    g.output(g.gather(g.silu(h), rows, axis=0))
    model = rlx.jit(g, max_dims={"S": 50, "R": 50}, threads=2)
    ref = rlx.reference(g)
    for s, r in ((1, 1), (7, 1), (33, 5), (50, 50)):
        arrays = {"h": _normal(s, 24), "rows": RNG.integers(0, s, r).astype(np.int32)}
        np.testing.assert_allclose(model(**arrays), ref(**arrays), rtol=1e-6, atol=1e-6)
    with pytest.raises(ArgumentError, match=r"rows\[0\] = 3 is outside \[0, 3\)"):
        model(h=_normal(3, 24), rows=np.array([3], np.int32))
