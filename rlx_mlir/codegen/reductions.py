"""Kernels of the reduction family: `lir.reduce`, `lir.softmax`, `lir.rms_norm`, `lir.layer_norm`.

Each builder is `build_X(op, name, vector_width) -> llvm.FuncOp` over one pointer per memref
operand (the `out` buffer last). Shapes are static and baked in.

Building blocks, all over vector<W x f32> with scalar tails:

- `_row_reduce`: reduce a contiguous run of elements with several independent vector
  accumulators (ILP), a tree merge of the accumulators, a shuffle-tree horizontal
  reduction, then a scalar tail.
- `_column_reduce`: out[j] = reduce_i x[i, j] over a strided outer axis, vectorized along
  the contiguous kept dim with a register tile of several vectors per column block.
- `_row_map`: a vector loop plus scalar tail calling a body on each chunk.

`lir.reduce` first canonicalizes its iteration space: size-1 dims are dropped and adjacent
dims that are both reduced or both kept are merged, leaving alternating groups. The groups
`[R]` and `[K, R]` use `_row_reduce` per row, `[R, K]` and `[K, R, K]` use `_column_reduce`
per batch, and every other pattern (e.g. axes (0, 2) of a rank-3 input) initializes `out`
with the identity and combines into it with the same two building blocks in nested loops.
max/min use `llvm.maximum`/`llvm.minimum`, which propagate NaN like numpy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xdsl.dialects import llvm
from xdsl.dialects.builtin import VectorType
from xdsl.ir import Operation, SSAValue

from rlx_mlir import shape_inference as rules
from rlx_mlir.codegen.builder import PTR, KernelBuilder, Value
from rlx_mlir.dialects import lir
from rlx_mlir.dialects.common import shape_of

UNROLL = 4
"""Independent vector accumulators of a contiguous reduction (hides the add latency)."""

Step = Callable[[SSAValue, SSAValue], SSAValue]
"""acc, x -> acc (scalar or vector)."""

Chunk = Callable[[SSAValue, bool], SSAValue]
"""(element offset, vector?) -> the loaded (and transformed) value at that offset."""


@dataclass(frozen=True)
class Combiner:
    """How a reduction kind combines: `step` folds a value into an accumulator and
    merges two accumulators, `horizontal` reduces the lanes of a vector."""

    identity: float
    step: Step
    horizontal: Callable[[SSAValue], SSAValue]


def combiner(kb: KernelBuilder, kind: str) -> Combiner:
    if kind in ("sum", "mean"):
        return Combiner(0.0, kb.fadd, kb.hsum)
    if kind == "max":
        return Combiner(-math.inf, kb.fmax, kb.hmax)
    if kind == "min":
        return Combiner(math.inf, kb.fmin, kb.hmin)
    raise ValueError(f"unknown reduce kind {kind!r}")


def _prod(dims: Sequence[int]) -> int:
    return math.prod(dims)


def _is_vector(value: SSAValue) -> bool:
    return isinstance(value.type, VectorType)


def _identity(kb: KernelBuilder, value: float, vector: bool) -> SSAValue:
    return kb.vconst(value) if vector else kb.fconst(value)


def _offset(kb: KernelBuilder, base: Value, i: Value) -> Value:
    """base + i, skipping additions of a constant 0."""
    if isinstance(base, int) and base == 0:
        return i
    if isinstance(i, int) and i == 0:
        return base
    return kb.add(kb.index(base), i)


def _tree(values: list[SSAValue], merge: Step) -> SSAValue:
    """Merge values pairwise (a balanced tree, not a serial chain)."""
    while len(values) > 1:
        values = [merge(values[k], values[k + 1]) if k + 1 < len(values) else values[k]
                  for k in range(0, len(values), 2)]
    return values[0]


# ----------------------------------------------------------------------------- building blocks


def _row_reduce(kb: KernelBuilder, n: int, chunk: Chunk, step: Step, identity: float,
                horizontal: Callable[[SSAValue], SSAValue], merge: Step | None = None,
                unroll: int = UNROLL) -> SSAValue:
    """reduce(chunk(i) for i in range(n)) as a scalar f32.

    `step(acc, value)` folds a chunk into an accumulator; `merge` combines two
    accumulators (default: `step`, right for sum/max/min but not for e.g. sum of squares).
    """
    merge = merge or step
    w = kb.vector_width
    nvec = n // w * w
    acc: SSAValue
    if nvec:
        u = max(1, min(unroll, nvec // w))
        nmain = nvec // (u * w) * (u * w)
        with kb.loop(0, nmain, u * w, carried=[kb.vconst(identity)] * u) as loop:
            loop.yield_(*[step(a, chunk(_offset(kb, loop.iv, k * w), True))  # type: ignore[arg-type]
                          for k, a in enumerate(loop.carried)])
        accs = list(loop.results)
        if nmain < nvec:
            with kb.loop(nmain, nvec, w, carried=[accs[0]]) as loop:
                loop.yield_(step(loop.carried[0], chunk(loop.iv, True)))
            accs[0] = loop.results[0]
        acc = horizontal(_tree(accs, merge))
    else:
        acc = kb.fconst(identity)
    if nvec < n:
        with kb.loop(nvec, n, 1, carried=[acc]) as loop:
            loop.yield_(step(loop.carried[0], chunk(loop.iv, False)))
        acc = loop.results[0]
    return acc


def _row_map(kb: KernelBuilder, n: int, body: Callable[[SSAValue, bool], None]) -> None:
    """body(i, vector) for every vector chunk of range(n), then every scalar of the tail."""
    w = kb.vector_width
    nvec = n // w * w
    if nvec:
        with kb.loop(0, nvec, w) as loop:
            body(loop.iv, True)
    if nvec < n:
        with kb.loop(nvec, n, 1) as loop:
            body(loop.iv, False)


def _column_reduce(kb: KernelBuilder, x: SSAValue, in_base: Value, nred: int, k: int,
                   comb: Combiner, finish: Callable[[SSAValue, SSAValue, bool], None],
                   unroll: int = UNROLL) -> None:
    """For j in range(k): finish(j, reduce_i x[in_base + i*k + j], vector?) with i < nred.

    Columns go in register tiles of `unroll` vectors, then single vectors, then scalars;
    the reduction loop over i is innermost, so each tile's accumulators stay in registers.
    """
    w = kb.vector_width
    kvec = k // w * w

    def tile(j: SSAValue, vectors: int, vector: bool) -> None:
        width = w if vector else 1
        with kb.loop(0, nred, 1, carried=[_identity(kb, comb.identity, vector)] * vectors) as loop:
            row = _offset(kb, in_base, kb.add(kb.mul(loop.iv, k), j))
            loop.yield_(*[comb.step(a, kb.load(x, _offset(kb, row, t * width), vector=vector))
                          for t, a in enumerate(loop.carried)])
        for t, acc in enumerate(loop.results):
            finish(_offset(kb, j, t * width), acc, vector)  # type: ignore[arg-type]

    if kvec:
        u = max(1, min(unroll, kvec // w))
        kmain = kvec // (u * w) * (u * w)
        with kb.loop(0, kmain, u * w) as cols:
            tile(cols.iv, u, True)
        if kmain < kvec:
            with kb.loop(kmain, kvec, w) as cols:
                tile(cols.iv, 1, True)
    if kvec < k:
        with kb.loop(kvec, k, 1) as cols:
            tile(cols.iv, 1, False)


# ----------------------------------------------------------------------------- lir.reduce


def reduce_groups(shape: Sequence[int], axes: Sequence[int]) -> list[tuple[int, bool]]:
    """The canonical iteration space of a reduction: (size, reduced) groups, size-1 dims
    dropped, adjacent dims with the same role merged (so roles alternate)."""
    groups: list[tuple[int, bool]] = []
    for i, d in enumerate(shape):
        if d == 1:
            continue
        red = i in axes
        if groups and groups[-1][1] == red:
            groups[-1] = (groups[-1][0] * d, red)
        else:
            groups.append((d, red))
    return groups


def build_reduce(op: Operation, name: str, vector_width: int) -> llvm.FuncOp:
    assert isinstance(op, lir.ReduceOp)
    shape = shape_of(op.input)
    axes = rules.normalize_axes("axes", op.axes.get_values(), len(shape))
    kind = str(op.kind.data)
    kb = KernelBuilder(name, [PTR, PTR], vector_width=vector_width)
    x, out = kb.args
    comb = combiner(kb, kind)
    count = _prod([shape[a] for a in axes])
    groups = reduce_groups(shape, axes)
    sizes = [s for s, _ in groups]
    roles = tuple(r for _, r in groups)

    divisor = float(count) if kind == "mean" and count != 1 else None

    def finish(v: SSAValue) -> SSAValue:
        return v if divisor is None else kb.fdiv(v, divisor)

    def store_at(base: Value) -> Callable[[SSAValue, SSAValue, bool], None]:
        def store(j: SSAValue, acc: SSAValue, vector: bool) -> None:
            kb.store(finish(acc), out, _offset(kb, base, j))
        return store

    def row(base: Value, n: int) -> SSAValue:
        return _row_reduce(kb, n, lambda i, vec: kb.load(x, _offset(kb, base, i), vector=vec),
                           comb.step, comb.identity, comb.horizontal)

    if True not in roles:
        # Nothing to combine (only size-1 axes reduce): a copy.
        def copy(i: SSAValue, vec: bool) -> None:
            kb.store(kb.load(x, i, vector=vec), out, i)
        _row_map(kb, _prod(shape), copy)
    elif roles == (True,):
        kb.store(finish(row(0, sizes[0])), out)
    elif roles == (False, True):
        m, n = sizes
        with kb.loop(0, m) as rows:
            kb.store(finish(row(kb.mul(rows.iv, n), n)), out, rows.iv)
    elif roles in ((True, False), (False, True, False)):
        b, nred, k = ([1] if len(sizes) == 2 else []) + sizes
        if b == 1:
            _column_reduce(kb, x, 0, nred, k, comb, store_at(0))
        else:
            with kb.loop(0, b) as batch:
                _column_reduce(kb, x, kb.mul(batch.iv, nred * k), nred, k, comb,
                               store_at(kb.mul(batch.iv, k)))
    else:
        _general_reduce(kb, x, out, groups, comb, divisor)
    kb.ret()
    return kb.finish()


def _general_reduce(kb: KernelBuilder, x: SSAValue, out: SSAValue, groups: list[tuple[int, bool]],
                    comb: Combiner, divisor: float | None) -> None:
    """Any group pattern: out = identity, then nested loops over all groups but the last,
    which combines into `out` a contiguous row reduction (reduced last group) or a
    vectorized column update (kept last group); then a pass dividing by `divisor` (mean)."""
    n_out = _prod([s for s, r in groups if not r])
    in_strides = [_prod([s for s, _ in groups[g + 1:]]) for g in range(len(groups))]
    out_strides = [_prod([s for s, r in groups[g + 1:] if not r]) for g in range(len(groups))]

    def fill(i: SSAValue, vec: bool) -> None:
        kb.store(_identity(kb, comb.identity, vec), out, i)
    _row_map(kb, n_out, fill)

    def innermost(in_off: Value, out_off: Value) -> None:
        size, red = groups[-1]
        if red:
            r = _row_reduce(kb, size, lambda i, vec: kb.load(x, _offset(kb, in_off, i), vector=vec),
                            comb.step, comb.identity, comb.horizontal)
            kb.store(comb.step(kb.load(out, out_off), r), out, out_off)
        else:
            def update(j: SSAValue, vec: bool) -> None:
                o = _offset(kb, out_off, j)
                v = kb.load(x, _offset(kb, in_off, j), vector=vec)
                kb.store(comb.step(kb.load(out, o, vector=vec), v), out, o)
            _row_map(kb, size, update)

    def nest(g: int, in_off: Value, out_off: Value) -> None:
        if g == len(groups) - 1:
            innermost(in_off, out_off)
            return
        size, red = groups[g]
        with kb.loop(0, size) as loop:
            nest(g + 1, _offset(kb, in_off, kb.mul(loop.iv, in_strides[g])),
                 out_off if red else _offset(kb, out_off, kb.mul(loop.iv, out_strides[g])))

    nest(0, 0, 0)

    if divisor is not None:
        def scale(i: SSAValue, vec: bool) -> None:
            kb.store(kb.fdiv(kb.load(out, i, vector=vec), divisor), out, i)
        _row_map(kb, n_out, scale)


# ----------------------------------------------------------------------------- lir.softmax


def build_softmax(op: Operation, name: str, vector_width: int) -> llvm.FuncOp:
    global vmath
    from rlx_mlir.codegen import vmath
    assert isinstance(op, lir.SoftmaxOp)
    shape = shape_of(op.input)
    axis = rules.normalize_axis("axis", op.axis.value.data, len(shape))
    outer, n, inner = _prod(shape[:axis]), shape[axis], _prod(shape[axis + 1:])
    kb = KernelBuilder(name, [PTR, PTR], vector_width=vector_width)
    x, out = kb.args
    with kb.loop(0, outer) as rows:
        base = kb.mul(rows.iv, n * inner)
        if inner == 1:
            _softmax_row(kb, x, out, base, n)
        else:
            _softmax_columns(kb, x, out, base, n, inner)
    kb.ret()
    return kb.finish()


def _softmax_row(kb: KernelBuilder, x: SSAValue, out: SSAValue, base: SSAValue, n: int) -> None:
    """Softmax of the contiguous row x[base : base+n]: a max pass, an exp+sum pass that
    stores the exponentials, and a scaling pass."""
    m = _row_reduce(kb, n, lambda i, vec: kb.load(x, kb.add(base, i), vector=vec),
                    kb.fmax, -math.inf, kb.hmax)
    m_vec = kb.splat(m)

    def exp_store(i: SSAValue, vec: bool) -> SSAValue:
        at = kb.add(base, i)
        e = vmath.exp(kb, kb.fsub(kb.load(x, at, vector=vec), m_vec if vec else m))
        kb.store(e, out, at)
        return e

    s = _row_reduce(kb, n, exp_store, kb.fadd, 0.0, kb.hsum, unroll=2)
    inv = kb.fdiv(1.0, s)
    inv_vec = kb.splat(inv)

    def scale(i: SSAValue, vec: bool) -> None:
        at = kb.add(base, i)
        kb.store(kb.fmul(kb.load(out, at, vector=vec), inv_vec if vec else inv), out, at)

    _row_map(kb, n, scale)


def _softmax_columns(kb: KernelBuilder, x: SSAValue, out: SSAValue, base: SSAValue,
                     n: int, inner: int) -> None:
    """Softmax along a strided axis of x[base + i*inner + j] (i < n), vectorized along j."""

    def column(j: SSAValue, vec: bool) -> None:
        def at(i: SSAValue) -> SSAValue:
            return kb.add(base, kb.add(kb.mul(i, inner), j))

        with kb.loop(0, n, 1, carried=[_identity(kb, -math.inf, vec)]) as loop:
            loop.yield_(kb.fmax(loop.carried[0], kb.load(x, at(loop.iv), vector=vec)))
        m = loop.results[0]
        with kb.loop(0, n, 1, carried=[_identity(kb, 0.0, vec)]) as loop:
            e = vmath.exp(kb, kb.fsub(kb.load(x, at(loop.iv), vector=vec), m))
            kb.store(e, out, at(loop.iv))
            loop.yield_(kb.fadd(loop.carried[0], e))
        inv = kb.fdiv(_identity(kb, 1.0, vec), loop.results[0])
        with kb.loop(0, n) as loop:
            kb.store(kb.fmul(kb.load(out, at(loop.iv), vector=vec), inv), out, at(loop.iv))

    _row_map(kb, inner, column)


# ----------------------------------------------------------------------------- norms


def _norm_setup(op: Operation, name: str, vector_width: int):
    shape = shape_of(op.operands[0])
    n = shape[-1]
    rows = _prod(shape[:-1])
    has_beta = getattr(op, "beta", None) is not None
    kb = KernelBuilder(name, [PTR] * (4 if has_beta else 3), vector_width=vector_width)
    x, gamma, *rest = kb.args
    beta = rest[0] if has_beta else None
    eps = float(op.eps.value.data)  # type: ignore[attr-defined]
    return kb, x, gamma, beta, kb.args[-1], rows, n, eps


def _sum_of_squares(kb: KernelBuilder, n: int, chunk: Chunk) -> SSAValue:
    return _row_reduce(kb, n, chunk, lambda acc, v: kb.fma(v, v, acc), 0.0, kb.hsum,
                       merge=kb.fadd)


def _normalize_row(kb: KernelBuilder, x: SSAValue, gamma: SSAValue, beta: SSAValue | None,
                   out: SSAValue, base: SSAValue, n: int, scale: SSAValue,
                   shift: SSAValue | None = None) -> None:
    """out[base+j] = (x[base+j] (- shift)) * scale * gamma[j] (+ beta[j])."""
    scale_vec = kb.splat(scale)
    shift_vec = kb.splat(shift) if shift is not None else None

    def body(j: SSAValue, vec: bool) -> None:
        at = kb.add(base, j)
        v = kb.load(x, at, vector=vec)
        if shift is not None:
            v = kb.fsub(v, shift_vec if vec else shift)
        v = kb.fmul(v, scale_vec if vec else scale)
        g = kb.load(gamma, j, vector=vec)
        y = kb.fma(v, g, kb.load(beta, j, vector=vec)) if beta is not None else kb.fmul(v, g)
        kb.store(y, out, at)

    _row_map(kb, n, body)


def build_rms_norm(op: Operation, name: str, vector_width: int) -> llvm.FuncOp:
    assert isinstance(op, lir.RmsNormOp)
    kb, x, gamma, beta, out, rows, n, eps = _norm_setup(op, name, vector_width)
    with kb.loop(0, rows) as r:
        base = kb.mul(r.iv, n)
        ss = _sum_of_squares(kb, n, lambda i, vec: kb.load(x, kb.add(base, i), vector=vec))
        scale = kb.fdiv(1.0, kb.sqrt(kb.fadd(kb.fdiv(ss, float(n)), eps)))
        _normalize_row(kb, x, gamma, beta, out, base, n, scale)
    kb.ret()
    return kb.finish()


def build_layer_norm(op: Operation, name: str, vector_width: int) -> llvm.FuncOp:
    assert isinstance(op, lir.LayerNormOp)
    kb, x, gamma, beta, out, rows, n, eps = _norm_setup(op, name, vector_width)
    with kb.loop(0, rows) as r:
        base = kb.mul(r.iv, n)
        total = _row_reduce(kb, n, lambda i, vec: kb.load(x, kb.add(base, i), vector=vec),
                            kb.fadd, 0.0, kb.hsum)
        mean = kb.fdiv(total, float(n))
        mean_vec = kb.splat(mean)

        def centered(i: SSAValue, vec: bool) -> SSAValue:
            return kb.fsub(kb.load(x, kb.add(base, i), vector=vec), mean_vec if vec else mean)

        var = kb.fdiv(_sum_of_squares(kb, n, centered), float(n))
        scale = kb.fdiv(1.0, kb.sqrt(kb.fadd(var, eps)))
        _normalize_row(kb, x, gamma, beta, out, base, n, scale, mean)
    kb.ret()
    return kb.finish()


BUILDERS = {
    lir.ReduceOp: build_reduce,
    lir.SoftmaxOp: build_softmax,
    lir.RmsNormOp: build_rms_norm,
    lir.LayerNormOp: build_layer_norm,
}
