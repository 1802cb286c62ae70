"""Shape and dtype rules of every rlx op, shared by the Graph builder and the verifiers.

Each rule takes operand shapes (tuples of ints) and op parameters, checks them and
returns the result shape, or raises `ShapeError` / `DTypeError` with a message that
names the operand and says what was expected and what was got.  The builder turns
the result into a result type; the verifiers of hir, mir and lir compare it with the
declared result (or destination) type.

A dimension (`Dim`) is an int >= 1, a *symbol* or `UNKNOWN`:

- a symbol is a name (a Python identifier, `"S"`) standing for a size fixed at call time.
  Equal names are equal sizes; a symbol broadcasts with 1 (the result is the symbol); a
  symbol against an int or another symbol where the rule needs equal sizes is a
  `ShapeError`. The Graph builder works with symbols.
- `UNKNOWN` (`"?"`) is MLIR's `?`: a size the IR does not name. The verifiers read IR
  types, where every symbol is `?`; `UNKNOWN` is compatible with any size (as MLIR's
  "compatible shapes"), so the same rules reject only what is wrong for every size.

Dimensions are compared through `dims_match` and combined through `unify`; arithmetic on a
dimension is only done on static ones (`is_static`), a rule that needs a static dim says so.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from rlx_mlir.core.errors import DTypeError, ShapeError

Dim = int | str
"""A dimension: an int >= 1, a symbol name, or `UNKNOWN`."""
Shape = tuple[Dim, ...]

DYNAMIC = -(2**63)
"""How xDSL stores MLIR's `?` in a shaped type (`xdsl.dialects.builtin.DYNAMIC_INDEX`;
`shape_of` reads it as `UNKNOWN`)."""
UNKNOWN = "?"
"""A dimension the IR does not name (MLIR's `?`): compatible with any size."""

DTYPES = ("f32", "i32", "i64", "ui8")
INDEX_DTYPES = ("i32", "i64")
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh")
MASK_KINDS = ("none", "causal", "custom", "bias")
ROPE_STYLES = ("half", "interleaved")
REDUCE_KINDS = ("sum", "max", "min", "mean")
QUANT_BLOCKS: dict[str, tuple[int, int]] = {
    "q8_0": (32, 34), "q4_0": (32, 18), "f16": (1, 2), "bf16": (1, 2),
    "q4_1": (32, 20), "q5_0": (32, 22), "q5_1": (32, 24),
    "q4_k": (256, 144), "q5_k": (256, 176), "q6_k": (256, 210),
    "q2_k": (256, 84), "q3_k": (256, 110), "iq4_nl": (32, 18), "iq4_xs": (256, 136),
}
"""(values, bytes) of one GGUF block, per dequant_matmul scheme (ggml's block geometry)."""


def fmt(shape: Sequence[Dim]) -> str:
    """Print a shape the way the error messages show it: `[4, 64]`, `[S, 64]`, `[?, 64]`."""
    return "[" + ", ".join(UNKNOWN if d == DYNAMIC else str(d) for d in shape) + "]"


def is_static(d: Dim) -> bool:
    """An int size (not a symbol, not `UNKNOWN`, not xDSL's raw `DYNAMIC`)."""
    return isinstance(d, int) and d != DYNAMIC


def is_symbol(d: Dim) -> bool:
    """A named symbol (`"S"`), not `UNKNOWN`."""
    return isinstance(d, str) and d != UNKNOWN


def is_static_shape(shape: Sequence[Dim]) -> bool:
    return all(map(is_static, shape))


def symbols_of(shape: Sequence[Dim]) -> tuple[str, ...]:
    """The named symbols of `shape`, in order (with repeats)."""
    return tuple(d for d in shape if is_symbol(d))  # pyright: ignore[reportReturnType]


def dims_match(a: Dim, b: Dim) -> bool:
    """Two dimensions that can be the same size: equal, or one of them `UNKNOWN`."""
    return a == b or UNKNOWN in (a, b) or DYNAMIC in (a, b)


DEFAULT_SYMBOL_BOUND = 4096
"""The upper bound of a symbol `max_dims` does not name."""


def bounded_shape(shape: Sequence[Dim], bounds: Mapping[str, int]) -> tuple[int, ...]:
    """`shape` with every symbol at its bound (DEFAULT_SYMBOL_BOUND when `bounds` has
    none); a `?` no symbol names has no bound (ShapeError)."""
    out = []
    for dim in shape:
        if dim == UNKNOWN:
            raise ShapeError(f"a ? dim without a symbol name has no bound (shape {fmt(shape)})")
        if isinstance(dim, str):
            name, offset = split_symbol(dim)
            dim = bounds.get(name, DEFAULT_SYMBOL_BOUND) + offset
        out.append(dim)
    return tuple(out)


def unify(a: Dim, b: Dim) -> Dim:
    """The more precise of two matching dimensions: an int, else a symbol, else `UNKNOWN`."""
    if is_static(a):
        return a
    if is_static(b):
        return b
    return a if is_symbol(a) else b if is_symbol(b) else UNKNOWN


def numel(shape: Sequence[Dim]) -> int:
    """The element count of a static shape (a symbolic one has none: ShapeError)."""
    n = 1
    for d in shape:
        if not is_static(d):
            raise ShapeError(
                f"shape {fmt(tuple(shape))} is symbolic: its element count is known only at call time"
            )
        n *= d
    return n


_OFFSET_SYMBOL = re.compile(r"^([A-Za-z_][A-Za-z_0-9]*)([+-][0-9]+)?$")


def split_symbol(d: str) -> tuple[str, int]:
    """A symbol and its offset: `"S"` -> ("S", 0), `"S+2"` -> ("S", 2). An offset symbol
    only arises inside the IR (a causal convolution pads S rows to S+K-1), never from the
    builder."""
    match = _OFFSET_SYMBOL.match(d)
    if match is None:
        raise ShapeError(f"a symbolic dimension must be a name (optionally +/- an int), got {d!r}")
    return match.group(1), int(match.group(2) or 0)


def offset_symbol(d: str, k: int) -> str:
    """`d` + k (`"S"`, 2 -> `"S+2"`; `"S+2"`, -2 -> `"S"`)."""
    name, offset = split_symbol(d)
    total = offset + k
    return name if total == 0 else f"{name}{total:+d}"


def evaluate_dim(d: Dim, sizes: Mapping[str, int]) -> int:
    """The size of `d` under the symbols' `sizes` (KeyError for a symbol not there)."""
    if isinstance(d, int):
        return d
    name, offset = split_symbol(d)
    return sizes[name] + offset


def check_dim(name: str, d: Dim) -> Dim:
    """One dimension: an int >= 1, a symbol (a Python identifier, in the IR maybe with an
    offset: `S+2`) or `UNKNOWN`."""
    if isinstance(d, str):
        if d != UNKNOWN and _OFFSET_SYMBOL.match(d) is None:
            raise ShapeError(f"{name}: a symbolic dimension must be a Python identifier, got {d!r}")
        return d
    return int(d)


def check_shape(name: str, shape: Sequence[Dim]) -> Shape:
    """A valid shape: every dimension at least 1 (zero-size tensors are not allowed), a
    symbol or `UNKNOWN`."""
    shape = tuple(check_dim(name, d) for d in shape)
    for d in shape:
        if is_static(d) and d < 1:  # pyright: ignore[reportOperatorIssue]
            raise ShapeError(f"{name}: every dimension must be >= 1, got shape {fmt(shape)}")
    return shape


def require_static(name: str, d: Dim, why: str) -> int:
    """`d` as an int; a symbol here is a ShapeError saying `why` the rule needs a size."""
    if not is_static(d):
        raise ShapeError(f"{name}: {why} must be static, got the symbolic dimension {d}")
    return d  # pyright: ignore[reportReturnType]


def check_rank(name: str, shape: Shape, ranks: Sequence[int]) -> None:
    if len(shape) not in ranks:
        if isinstance(ranks, range) and len(ranks) > 2:
            want = f"{ranks.start} to {ranks.stop - 1}"
        else:
            want = " or ".join(str(r) for r in ranks)
        raise ShapeError(f"{name}: expected rank {want}, got rank {len(shape)} (shape {fmt(shape)})")


def check_dtype(name: str, dtype: str, allowed: Sequence[str]) -> None:
    if dtype not in allowed:
        want = " or ".join(allowed)
        raise DTypeError(f"{name}: expected element type {want}, got {dtype}")


def check_exact(name: str, shape: Shape, expected: Sequence[int], why: str = "") -> None:
    expected = tuple(expected)
    if len(shape) != len(expected) or not all(map(dims_match, shape, expected)):
        reason = f" ({why})" if why else ""
        raise ShapeError(f"{name}: expected shape {fmt(expected)}{reason}, got {fmt(shape)}")


def normalize_axis(name: str, axis: int, rank: int) -> int:
    """Map a possibly negative axis into [0, rank)."""
    if not -rank <= axis < max(rank, 1) or rank == 0:
        raise ShapeError(f"{name}: axis {axis} is out of range for rank {rank}")
    return axis % rank


def normalize_axes(name: str, axes: int | Sequence[int], rank: int) -> tuple[int, ...]:
    if isinstance(axes, int):
        axes = (axes,)
    result = tuple(normalize_axis(name, a, rank) for a in axes)
    if len(set(result)) != len(result):
        raise ShapeError(f"{name}: axes {tuple(axes)} repeat an axis")
    return tuple(sorted(result))


# ----------------------------------------------------------------------------- elementwise


def broadcast(lhs: Shape, rhs: Shape, names: tuple[str, str] = ("lhs", "rhs")) -> Shape:
    """numpy broadcasting of two shapes (the binary elementwise ops)."""
    a, b = lhs, rhs
    rank = max(len(a), len(b))
    pa = (1,) * (rank - len(a)) + tuple(a)
    pb = (1,) * (rank - len(b)) + tuple(b)
    out: list[Dim] = []
    for da, db in zip(pa, pb, strict=True):
        if db == 1:
            out.append(da)
        elif da == 1:
            out.append(db)
        elif dims_match(da, db):
            out.append(unify(da, db))
        else:
            why = ""
            if is_symbol(da) or is_symbol(db):
                why = f" ({da} vs {db}: a symbol only broadcasts with 1 or the same symbol)"
            raise ShapeError(
                f"{names[0]} {fmt(a)} and {names[1]} {fmt(b)} are not broadcast-compatible{why}"
            )
    return tuple(out)


def same_shape(input: Shape) -> Shape:
    """The unary elementwise ops: the input's shape."""
    return input


def broadcast_to(x: Shape, target: Shape, *, keep_symbols: bool = False) -> Shape:
    """numpy.broadcast_to. With `keep_symbols` (the broadcast_to op) a symbolic or `?`
    target dim must be one x has there: broadcasting cannot introduce a size the call
    does not give (a fused elementwise op's inputs may broadcast into a `?`)."""
    target = check_shape("broadcast_to target", target)
    padded = (1,) * (len(target) - len(x)) + tuple(x)
    if len(x) > len(target) or any(
        a != 1 and not dims_match(a, b) for a, b in zip(padded, target, strict=True)
    ):
        raise ShapeError(f"input of shape {fmt(x)} cannot be broadcast to {fmt(target)}")
    offset = len(target) - len(x)
    for axis, want in enumerate(target):
        if keep_symbols and not is_static(want) and (axis < offset or x[axis - offset] == 1):
            raise ShapeError(
                f"input of shape {fmt(x)} cannot be broadcast to {fmt(target)}: dim {axis} of "
                f"the target is symbolic ({want}) where the input has "
                f"{'no dim' if axis < offset else 'size 1'}; broadcast_to cannot introduce a "
                f"symbolic dim (broadcast against a value that has it instead: x + y)"
            )
    return tuple(b if a == 1 else unify(a, b) for a, b in zip(padded, target, strict=True))


# ----------------------------------------------------------------------------- linear algebra


def matmul(lhs: Shape, rhs: Shape) -> Shape:
    """np.matmul: 1-D operands promoted, batch dimensions broadcast."""
    a, b = lhs, rhs
    if not a or not b:
        raise ShapeError(f"matmul operands must have rank >= 1, got {fmt(a)} and {fmt(b)}")
    pa = (1,) + a if len(a) == 1 else a
    pb = b + (1,) if len(b) == 1 else b
    if not dims_match(pa[-1], pb[-2]):
        raise ShapeError(
            f"matmul inner dimensions differ: lhs {fmt(a)} has K={pa[-1]}, "
            f"rhs {fmt(b)} has K={pb[-2]}"
        )
    batch = broadcast(pa[:-2], pb[:-2], ("lhs batch", "rhs batch"))
    out = batch + (pa[-2], pb[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


def fused_matmul(lhs: Shape, rhs: Shape, bias: Shape | None = None) -> Shape:
    """`matmul` with an optional bias [N] (N = last dim of rhs, a 2-D weight)."""
    out = matmul(lhs, rhs)
    if bias is not None:
        check_rank("rhs", rhs, range(2, 9))
        check_exact("bias", bias, rhs[-1:], "N = last dim of rhs")
    return out


def linear(x: Shape, w: Shape, bias: Shape | None = None) -> Shape:
    """x[..., K] @ w[K, N] (+ bias[N])."""
    check_rank("x", x, range(1, 9))
    check_rank("w", w, (2,))
    if not dims_match(w[0], x[-1]):
        raise ShapeError(f"w: expected shape [{x[-1]}, N] (K = last dim of x), got {fmt(w)}")
    if bias is not None:
        check_exact("bias", bias, (w[1],), "N = columns of w")
    return x[:-1] + (w[1],)


def swiglu_ffn(x: Shape, up: Shape, gate: Shape, down: Shape) -> Shape:
    """(silu(x @ gate) * (x @ up)) @ down."""
    check_rank("x", x, range(1, 9))
    check_rank("up", up, (2,))
    check_exact("up", up, (x[-1], up[1]), "D = last dim of x")
    check_exact("gate", gate, up, "same as up")
    check_rank("down", down, (2,))
    check_exact("down", down, (up[1], down[1]), "F = columns of up")
    return x[:-1] + (down[1],)


def dequant_matmul(x: Shape, w: Shape, scheme: str, residual: Shape | None = None) -> Shape:
    """x[..., K] @ dequant(w)^T with w the raw GGUF blocks ui8[N, K/values * bytes] (values
    and bytes per block of the scheme: QUANT_BLOCKS); a `residual` added to it has the
    result's shape."""
    if scheme not in QUANT_BLOCKS:
        raise ShapeError(f"scheme: expected one of {', '.join(QUANT_BLOCKS)}, got {scheme!r}")
    check_rank("x", x, range(1, 9))
    check_rank("w", w, (2,))
    k = require_static("x", x[-1], "the last dim K")
    values, block_bytes = QUANT_BLOCKS[scheme]
    if k % values:
        raise ShapeError(f"x: last dim K must be a multiple of {values} (a {scheme} block), got {k}")
    row_bytes = k // values * block_bytes
    check_exact("w", w, (w[0], row_bytes), f"{scheme}: K/{values} blocks of {block_bytes} bytes")
    if residual is not None:
        check_exact("residual", residual, x[:-1] + (w[0],), "the result's shape")
    return x[:-1] + (w[0],)


# ----------------------------------------------------------------------------- reductions, norms


def reduce(input: Shape, axes: int | Sequence[int], keepdim: bool | None = False) -> Shape:
    x = input
    norm = normalize_axes("axes", axes, len(x))
    if keepdim:
        return tuple(1 if i in norm else d for i, d in enumerate(x))
    return tuple(d for i, d in enumerate(x) if i not in norm)


def softmax(input: Shape, axis: int) -> Shape:
    normalize_axis("axis", axis, len(input))
    return input


def norm(x: Shape, gamma: Shape, beta: Shape | None = None) -> Shape:
    """rms_norm / layer_norm over the last axis: gamma and beta are exactly [N]."""
    check_rank("x", x, range(1, 9))
    check_exact("gamma", gamma, x[-1:], "N = last dim of x")
    if beta is not None:
        check_exact("beta", beta, x[-1:], "N = last dim of x")
    return x


def residual_norm(x: Shape, residual: Shape, gamma: Shape, beta: Shape | None = None) -> Shape:
    check_exact("residual", residual, x, "same as x")
    return norm(x, gamma, beta)


# ----------------------------------------------------------------------------- transformer blocks


def rope(x: Shape, cos: Shape, sin: Shape, head_dim: int, n_rot: int) -> Shape:
    check_rank("x", x, (2, 3))
    if head_dim < 1:
        raise ShapeError(f"head_dim: expected a value >= 1, got {head_dim}")
    if require_static("x", x[-1], "the last dim (heads * head_dim)") % head_dim:
        raise ShapeError(f"head_dim: must divide the last dim of x {fmt(x)}, got {head_dim}")
    if n_rot % 2 or not 2 <= n_rot <= head_dim:
        raise ShapeError(f"n_rot: expected an even value in [2, head_dim={head_dim}], got {n_rot}")
    check_exact("cos", cos, (x[-2], n_rot // 2), "[S, n_rot/2]")
    check_exact("sin", sin, (x[-2], n_rot // 2), "[S, n_rot/2]")
    return x


def _check_heads(q: Shape, num_heads: int, head_dim: int, num_kv_heads: int) -> None:
    """Grouped-query heads: counts >= 1, kv heads dividing the heads, q's last dim
    num_heads·head_dim."""
    if num_heads < 1 or head_dim < 1 or num_kv_heads < 1:
        raise ShapeError(
            f"num_heads, head_dim and num_kv_heads must be >= 1, got "
            f"{num_heads}, {head_dim}, {num_kv_heads}"
        )
    if num_heads % num_kv_heads:
        raise ShapeError(
            f"num_kv_heads: must divide num_heads={num_heads} (grouped-query), got {num_kv_heads}"
        )
    if not dims_match(q[-1], num_heads * head_dim):
        raise ShapeError(
            f"q: last dim must be num_heads*head_dim = {num_heads}*{head_dim} = "
            f"{num_heads * head_dim}, got {q[-1]}"
        )


def attention(
    q: Shape,
    k: Shape,
    v: Shape,
    mask: Shape | None,
    *,
    num_heads: int,
    head_dim: int,
    num_kv_heads: int,
    mask_kind: str,
    window: int | None = None,
) -> Shape:
    """Grouped-query attention with heads packed in the last axis; returns q's shape.
    `window` (sliding-window attention, causal only) is checked by `attention_window`."""
    check_rank("q", q, (2, 3))
    check_rank("k", k, (len(q),))
    check_rank("v", v, (len(q),))
    _check_heads(q, num_heads, head_dim, num_kv_heads)
    batch, seq_q = q[:-2], q[-2]
    kv_dim = num_kv_heads * head_dim
    check_exact("k", k, batch + (k[-2], kv_dim), "[B, T, num_kv_heads*head_dim]")
    check_exact("v", v, k, "same as k")
    seq_k = k[-2]
    if mask_kind not in MASK_KINDS:
        raise ShapeError(f"mask_kind: expected one of {', '.join(MASK_KINDS)}, got {mask_kind!r}")
    if mask_kind in ("none", "causal") and mask is not None:
        raise ShapeError(f"mask: mask_kind {mask_kind!r} takes no mask operand, got one")
    if mask_kind in ("custom", "bias") and mask is None:
        raise ShapeError(f"mask: mask_kind {mask_kind!r} needs a mask operand, got none")
    if mask_kind == "causal" and is_static(seq_q) and is_static(seq_k) and seq_q > seq_k:  # pyright: ignore[reportOperatorIssue]
        raise ShapeError(f"causal attention needs S <= T, got S={seq_q} > T={seq_k}")
    if mask is not None:
        _check_mask(mask, batch, num_heads, seq_q, seq_k)
    attention_window(window, mask_kind)
    return q


def attention_window(window: int | None, mask_kind: str) -> None:
    """A sliding window W: query i sees the keys j with i + (T−S) − W < j ≤ i + (T−S), so
    W ≥ 1 and the mask causal (W ≥ T is full causal attention)."""
    if window is None:
        return
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ShapeError(f"window: expected an integer >= 1 (the keys a query sees), "
                         f"got {window!r}")
    if mask_kind != "causal":
        raise ShapeError(f"window: a sliding window needs mask_kind 'causal', got "
                         f"mask_kind {mask_kind!r}")


def _check_mask(mask: Shape, batch: Shape, heads: int, seq_q: Dim, seq_k: Dim) -> None:
    if len(mask) == 2:
        check_exact("mask", mask, (seq_q, seq_k), "[S, T]")
        return
    b = batch[0] if batch else 1
    ok = (
        len(mask) == 4
        and (mask[0] == 1 or dims_match(mask[0], b))
        and (mask[1] == 1 or dims_match(mask[1], heads))
        and dims_match(mask[2], seq_q)
        and dims_match(mask[3], seq_k)
    )
    if not ok:
        raise ShapeError(
            f"mask: expected [S, T] = [{seq_q}, {seq_k}] or [1|{b}, 1|{heads}, {seq_q}, {seq_k}], "
            f"got {fmt(mask)}"
        )


def llama_decoder_block(
    x: Shape,
    *,
    num_heads: int,
    head_dim: int,
    num_kv_heads: int,
    mask: Shape | None = None,
    mask_kind: str,
    **weights: Shape | None,
) -> Shape:
    """The pre-norm Llama block; `weights` are the other operands' shapes by name
    (docs/semantics.md; the KV-cache operands are checked by `llama_kv_cache`).

    Errors of the inner rules are renamed to the block's operand names (`ln2_g`, not `gamma`).
    """
    check_rank("x", x, (2, 3))
    w = weights
    with _renamed(gamma="ln1_g", beta="ln1_b"):
        norm(x, w["ln1_g"], w.get("ln1_b"))
    with _renamed(w="q_w"):
        q = linear(x, w["q_w"])
    with _renamed(w="k_w"):
        k = linear(x, w["k_w"])
    with _renamed(w="v_w"):
        v = linear(x, w["v_w"])
    _check_projections(x[-1], w, num_heads, head_dim, num_kv_heads)
    with _renamed(n_rot="head_dim"):
        rope(q, w["cos"], w["sin"], head_dim, head_dim)
    with _renamed(q="q_w (columns)", k="k_w (columns)", v="v_w (columns)"):
        attn = attention(
            q, k, v, mask,
            num_heads=num_heads, head_dim=head_dim, num_kv_heads=num_kv_heads, mask_kind=mask_kind,
        )
    check_exact("o_w", w["o_w"], (attn[-1], x[-1]), "[num_heads*head_dim, D]")
    with _renamed(gamma="ln2_g", beta="ln2_b"):
        norm(x, w["ln2_g"], w.get("ln2_b"))
    with _renamed(up="up_w", gate="gate_w", down="down_w"):
        return swiglu_ffn(x, w["up_w"], w["gate_w"], w["down_w"])


def _check_projections(d: Dim, w: Mapping[str, Shape | None], num_heads: int, head_dim: int,
                       num_kv_heads: int) -> None:
    """q_w, k_w and v_w against their own expected shapes (not the projected q, k, v's);
    bad head counts are left to `attention`, which names them."""
    if min(num_heads, head_dim, num_kv_heads) < 1:
        return
    for name, heads, what in (("q_w", num_heads, "num_heads"), ("k_w", num_kv_heads, "num_kv_heads"),
                              ("v_w", num_kv_heads, "num_kv_heads")):
        check_exact(name, w[name], (d, heads * head_dim),
                    f"[D, {what}*head_dim] = [{d}, {heads}*{head_dim}]")


@contextmanager
def _renamed(**names: str) -> Iterator[None]:
    """Re-raise a rule's error with its leading operand name mapped through `names`."""
    try:
        yield
    except (ShapeError, DTypeError) as err:
        head, sep, rest = str(err).partition(": ")
        if sep and head in names:
            raise type(err)(f"{names[head]}: {rest}") from None
        raise


def embedding(table: Shape, ids: Shape) -> Shape:
    check_rank("table", table, (2,))
    return ids + table[1:]


def dequant_gather(table: Shape, ids: Shape, scheme: str) -> Shape:
    """Rows `ids` of a GGUF-quantized table ui8[V, K/values · bytes] (the raw blocks of
    `scheme`, like dequant_matmul's w), dequantized: ids + [K]."""
    if scheme not in QUANT_BLOCKS:
        raise ShapeError(f"scheme: expected one of {', '.join(QUANT_BLOCKS)}, got {scheme!r}")
    check_rank("table", table, (2,))
    row_bytes = require_static("table", table[1], "the row bytes")
    values, block_bytes = QUANT_BLOCKS[scheme]
    if row_bytes % block_bytes:
        raise ShapeError(f"table: a row must be whole {scheme} blocks of {block_bytes} bytes, "
                         f"got {row_bytes} bytes")
    return tuple(ids) + (row_bytes // block_bytes * values,)


def depthwise_conv1d_causal(x: Shape, w: Shape, left_pad: Shape | None,
                            return_state: bool | None = False) -> tuple[Shape, Shape | None]:
    """x[B, S, C], w[K, C], left_pad[B, K-1, C] -> y [B, S, C], and with `return_state`
    the window [B, K-1, C] (`depthwise_conv1d_window`; None without)."""
    check_rank("x", x, (3,))
    check_rank("w", w, (2,))
    check_exact("w", w, (w[0], x[2]), "[K, C] with C = channels of x")
    taps = require_static("w", w[0], "the kernel size K")
    if left_pad is not None:
        if taps == 1:
            raise ShapeError("left_pad: a kernel of size K=1 takes no left_pad (it would be empty)")
        check_exact("left_pad", left_pad, (x[0], taps - 1, x[2]), "[B, K-1, C]")
    elif taps > 1:
        require_static("x", x[0], "without left_pad (zero padding, a constant), the batch dim B")
    return x, depthwise_conv1d_window(x, w) if return_state else None


def depthwise_conv1d(input: Shape, weight: Shape, return_state: bool | None = False
                     ) -> tuple[Shape, Shape | None]:
    """Valid depthwise convolution over time: input[B, S+K-1, C], weight[K, C] -> [B, S, C]
    (the messages name them x and w), and with `return_state` the window [B, K-1, C], the
    input's last K-1 rows (`depthwise_conv1d_window`; None without)."""
    out = _depthwise_conv1d_out(input, weight)
    return out, depthwise_conv1d_window(input, weight) if return_state else None


def depthwise_conv1d_window(x: Shape, w: Shape) -> Shape:
    """The window a causal convolution keeps between calls (`return_state`): the last K-1
    rows over time of its padded input, [B, K-1, C] for x [B, *, C] and w [K, C]; a kernel
    of size K = 1 keeps none (an error)."""
    taps = require_static("w", w[0], "the kernel size K")
    if taps == 1:
        raise ShapeError("return_state: a kernel of size K=1 keeps no window (K-1 = 0 rows); "
                         "expected K >= 2")
    return (x[0], taps - 1, x[2])


def _depthwise_conv1d_out(x: Shape, w: Shape) -> Shape:
    """The output [B, S, C] of a valid depthwise convolution of x [B, S+K-1, C] by w [K, C]."""
    check_rank("x", x, (3,))
    check_rank("w", w, (2,))
    check_exact("w", w, (w[0], x[2]), "[K, C] with C = channels of x")
    taps = require_static("w", w[0], "the kernel size K")
    if is_symbol(x[1]):  # a causal convolution's padded input: S+K-1 rows give S
        return (x[0], offset_symbol(x[1], 1 - taps), x[2])  # pyright: ignore[reportArgumentType]
    if x[1] == UNKNOWN:
        return (x[0], UNKNOWN, x[2])
    if x[1] < taps:  # pyright: ignore[reportOperatorIssue]
        raise ShapeError(f"x: time dim must be >= K={taps} (input is pre-padded), got {x[1]}")
    return (x[0], x[1] - taps + 1, x[2])  # pyright: ignore[reportOperatorIssue]


# ----------------------------------------------------------------------------- data movement


def reshape(x: Shape, target: Sequence[Dim]) -> Shape:
    """Resolve at most one -1 in target; element counts must agree.

    A symbolic dim of x stays a whole dim: the target names the same symbols in the same
    order (an `UNKNOWN` matches any symbol; the -1 may stand for one symbol) and the
    static dims of both have the same product. Splitting or merging a symbol is an error.
    """
    if not is_static_shape(x) or not is_static_shape(target):
        return _symbolic_reshape(x, tuple(target))
    target = tuple(int(d) for d in target)
    if target.count(-1) > 1:
        raise ShapeError(f"reshape: at most one -1 allowed in the target, got {fmt(target)}")
    total = numel(x)
    if -1 in target:
        known = numel(d for d in target if d != -1)
        if known == 0 or total % known:
            raise ShapeError(f"reshape: cannot reshape {fmt(x)} ({total} elements) into {target}")
        target = tuple(total // known if d == -1 else d for d in target)
    check_shape("reshape target", target)
    if numel(target) != total:
        raise ShapeError(
            f"reshape: element counts differ: input {fmt(x)} has {total}, "
            f"target {fmt(target)} has {numel(target)}"
        )
    return target


def _symbolic_reshape(x: Shape, target: Shape) -> Shape:
    """`reshape` when x or the target has symbolic dims (see there)."""
    if target.count(-1) > 1:
        raise ShapeError(f"reshape: at most one -1 allowed in the target, got {fmt(target)}")
    x_syms = [d for d in x if not is_static(d)]
    t_syms = [d for d in target if not is_static(d)]
    x_static = numel(d for d in x if is_static(d))
    t_static = numel(d for d in target if is_static(d) and d != -1)
    resolved = list(target)
    if -1 in target:
        at = target.index(-1)
        if len(x_syms) == len(t_syms) + 1:  # the -1 is the one symbol the target leaves out
            before = sum(1 for d in target[:at] if not is_static(d))
            resolved[at] = x_syms[before]
            t_syms.insert(before, x_syms[before])
        elif t_static and x_static % t_static == 0:
            resolved[at] = x_static // t_static
        t_static = numel(d for d in resolved if is_static(d))
    if len(x_syms) != len(t_syms) or not all(map(dims_match, x_syms, t_syms)) or x_static != t_static:
        raise ShapeError(
            f"reshape: cannot reshape {fmt(x)} into {fmt(target)}: a symbolic dim must stay a "
            f"whole dim (the same symbols in the same order, no split or merge) and the static "
            f"dims must have the same product ({x_static} vs {t_static})"
        )
    syms = iter(x_syms)
    out = tuple(d if is_static(d) else unify(next(syms), d) for d in resolved)
    return check_shape("reshape target", out)


def transpose(input: Shape, perm: Sequence[int]) -> Shape:
    x = input
    rank = len(x)
    if len(perm) != rank:
        raise ShapeError(f"perm: expected {rank} entries for rank {rank}, got {tuple(perm)}")
    norm_perm = [normalize_axis("perm", p, rank) for p in perm]
    if sorted(norm_perm) != list(range(rank)):
        raise ShapeError(f"perm: expected a permutation of 0..{rank - 1}, got {tuple(perm)}")
    return tuple(x[p] for p in norm_perm)


def narrow(input: Shape, axis: int, start: int, length: int) -> Shape:
    x = input
    ax = normalize_axis("axis", axis, len(x))
    if not is_static(x[ax]):
        if (start, length) == (0, 1):  # every symbol binds >= 1: the first row always exists
            return x[:ax] + (1,) + x[ax + 1 :]
        raise ShapeError(
            f"narrow: axis {ax} of {fmt(x)} is symbolic ({x[ax]}); narrow needs a static axis "
            f"(or start=0, length=1: the first row), got start={start}, length={length}"
        )
    if start < 0 or length < 1 or start + length > x[ax]:  # pyright: ignore[reportOperatorIssue]
        raise ShapeError(
            f"narrow: start={start}, length={length} must satisfy 0 <= start, 1 <= length, "
            f"start+length <= {x[ax]} (dim {ax} of {fmt(x)})"
        )
    return x[:ax] + (length,) + x[ax + 1 :]


def concat(inputs: Sequence[Shape], axis: int) -> Shape:
    shapes = inputs
    if not shapes:
        raise ShapeError("concat: expected at least one input, got none")
    first = shapes[0]
    ax = normalize_axis("axis", axis, len(first))
    out = list(first)
    for i, s in enumerate(shapes):
        if len(s) != len(first) or any(
            not dims_match(a, b) for j, (a, b) in enumerate(zip(s, first, strict=True)) if j != ax
        ):
            raise ShapeError(
                f"concat: input {i} has shape {fmt(s)}, expected {fmt(first)} "
                f"except along axis {ax}"
            )
        out = [d if j == ax else unify(d, e) for j, (d, e) in enumerate(zip(out, s, strict=True))]
    out[ax] = _concat_length([s[ax] for s in shapes])
    return tuple(out)


def _concat_length(along: list[Dim]) -> Dim:
    """The length of a concat: the sum, `S+k` when one input is `S` (+ an offset) and the
    others static (a causal convolution's padding), else `UNKNOWN`."""
    symbolic = [d for d in along if not is_static(d)]
    static = sum(d for d in along if is_static(d))  # pyright: ignore[reportArgumentType]
    if not symbolic:
        return static
    if len(symbolic) == 1 and is_symbol(symbolic[0]):
        return offset_symbol(symbolic[0], static)  # pyright: ignore[reportArgumentType]
    return UNKNOWN


def gather(input: Shape, indices: Shape, axis: int) -> Shape:
    """np.take: input.shape[:axis] + indices.shape + input.shape[axis+1:]."""
    x = input
    ax = normalize_axis("axis", axis, len(x))
    return x[:ax] + tuple(indices) + x[ax + 1 :]


def scatter_add(updates: Shape, indices: Shape, axis: int, dim_size: int) -> Shape:
    """The transpose of `gather`: zeros [*outer, dim_size, *inner] with the rows of
    `updates` [*outer, *indices, *inner] summed in at `indices` along `axis` (an axis of
    the result, whose rank is updates' minus indices' plus one)."""
    rank = len(updates) - len(indices) + 1
    if rank < 1:
        raise ShapeError(f"updates: expected rank >= rank of indices {fmt(indices)}, got "
                         f"{fmt(updates)}")
    ax = normalize_axis("axis", axis, rank)
    if isinstance(dim_size, bool) or not isinstance(dim_size, int) or dim_size < 1:
        raise ShapeError(f"dim_size: expected an integer >= 1, got {dim_size!r}")
    check_exact("updates", updates[ax:ax + len(indices)], indices,
                f"dims {ax}..{ax + len(indices) - 1} of updates {fmt(updates)} are the indices' shape")
    return tuple(updates[:ax]) + (dim_size,) + tuple(updates[ax + len(indices):])


# ----------------------------------------------------------------------------- state (KV caches)


def insert_rows(cache: Shape, rows: Shape) -> Shape:
    """Appending `rows` [S, *tail] to a KV cache [capacity, *tail] (static capacity and
    tail; S static or a symbol, at most the capacity): the cache's shape."""
    check_rank("cache", cache, range(1, 9))
    for d in cache:
        require_static("cache", d, "a cache (a state) has a static shape, so every dim")
    if len(rows) != len(cache) or not all(map(dims_match, rows[1:], cache[1:])):
        raise ShapeError(
            f"rows {fmt(rows)}: expected [S, {', '.join(map(str, cache[1:]))}] "
            f"(rows of the cache {fmt(cache)}), got {fmt(rows)}"
        )
    if is_static(rows[0]) and rows[0] > cache[0]:  # pyright: ignore[reportOperatorIssue]
        raise ShapeError(
            f"rows {fmt(rows)}: expected at most {cache[0]} rows (the capacity of the cache "
            f"{fmt(cache)}), got {rows[0]}"
        )
    return cache


def llama_kv_cache(x: Shape, k_cache: Shape, v_cache: Shape, *, num_kv_heads: int,
                   head_dim: int, mask_kind: str) -> None:
    """The KV caches of a decoding Llama block: x is [S, D] (no batch), k_cache and
    v_cache are one static shape [capacity, num_kv_heads*head_dim], the mask causal or none."""
    if len(x) != 2:
        raise ShapeError(f"x: with kv_cache, expected [S, D] (rank 2, no batch), got {fmt(x)}")
    width = num_kv_heads * head_dim
    for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
        check_rank(name, cache, (2,))
        require_static(name, cache[0], "the capacity of a cache")
        check_exact(name, cache, (cache[0], width), f"[capacity, num_kv_heads*head_dim = {width}]")
    check_exact("v_cache", v_cache, k_cache, "the shape of k_cache")
    if is_static(x[0]) and x[0] > k_cache[0]:  # pyright: ignore[reportOperatorIssue]
        raise ShapeError(
            f"x {fmt(x)}: expected at most {k_cache[0]} rows (the capacity of the caches "
            f"{fmt(k_cache)}), got {x[0]}"
        )
    if mask_kind not in ("causal", "none"):
        raise ShapeError(
            f"mask_kind: with kv_cache, expected causal or none (a mask over the cache rows is "
            f"not supported), got {mask_kind!r}"
        )


def extract_rows(cache: Shape, size: str) -> Shape:
    """The first `size` rows of a cache [capacity, *tail] (`size` a symbol bound per call
    to position + appended rows): [size, *tail]."""
    check_rank("cache", cache, range(1, 9))
    if not size.isidentifier():
        raise ShapeError(f"size: expected a symbol name (a Python identifier), got {size!r}")
    return (size, *cache[1:])


def cache_scatter(rows: Shape, cache: Shape, slots: Shape, positions: Shape) -> Shape:
    """Writing `rows` [*lead, *tail] into a slot cache [n_slots, capacity, *tail] (a
    state: static), each row at [slots[...], positions[...]] (`slots`, `positions` of the
    shape `lead`: [R] for a ragged batch, [B, S] for a rectangle; its dims static or
    symbols): the cache's shape."""
    check_rank("cache", cache, range(2, 9))
    for d in cache:
        require_static("cache", d, "a slot cache (a state) has a static shape, so every dim")
    tail = cache[2:]
    lead = len(rows) - len(tail)
    if lead not in (1, 2) or not all(map(dims_match, rows[lead:], tail)):
        raise ShapeError(
            f"rows {fmt(rows)}: expected [R, {', '.join(map(str, tail))}] or [B, S, "
            f"{', '.join(map(str, tail))}] (rows of the slot cache {fmt(cache)} [n_slots, "
            f"capacity, *tail]), got {fmt(rows)}"
        )
    check_slot_rows(rows[:lead], slots, positions)
    return cache


def check_slot_rows(lead: Shape, slots: Shape, positions: Shape) -> None:
    """`slots` and `positions` have the rows' leading shape `lead` ([R] or [B, S]): one
    slot and one position per row."""
    check_exact("slots", slots, lead, "one slot per row")
    check_exact("positions", positions, lead, "one position per row")


def slot_attention(q: Shape, keys: Shape, values: Shape, slots: Shape, positions: Shape, *,
                   num_heads: int, head_dim: int, num_kv_heads: int,
                   window: int | None = None) -> Shape:
    """Attention of each row of q [R, H*D] (or [B, S, H*D]) over the keys/values
    [n_slots, capacity, Hkv*D] of its slot up to its position (`slots`, `positions` of
    q's leading shape): q's shape."""
    check_rank("q", q, (2, 3))
    _check_heads(q, num_heads, head_dim, num_kv_heads)
    check_rank("keys", keys, (3,))
    for d in keys:
        require_static("keys", d, "a slot cache [n_slots, capacity, num_kv_heads*head_dim]")
    width = num_kv_heads * head_dim
    check_exact("keys", keys, (keys[0], keys[1], width),
                f"[n_slots, capacity, num_kv_heads*head_dim = {width}]")
    check_exact("values", values, keys, "the shape of keys")
    check_slot_rows(q[:-1], slots, positions)
    attention_window(window, "causal")
    return q


# ----------------------------------------------------------------------------- sequence ops
# With `return_state`, the ops `selective_scan` and `gated_delta_net` have a second result,
# the final state, whose shape `selective_scan_state` / `gated_delta_net_state` give: their
# rules return both shapes (the state's None without `return_state`).


def selective_scan_state(x: Shape, a: Shape) -> Shape:
    """The state [b, h, n] of a selective scan over x [b, s, h] with A [h, n]."""
    return (x[0], x[2], a[1])


def selective_scan(x: Shape, delta: Shape, a: Shape, b: Shape, c: Shape,
                   initial_state: Shape | None = None, return_state: bool | None = False
                   ) -> tuple[Shape, Shape | None]:
    """Mamba's selective scan: x, delta [b, s, h], A [h, n], B, C [b, s, n],
    initial_state [b, h, n] -> y [b, s, h], and with `return_state` the final state
    [b, h, n] (`selective_scan_state`; None without)."""
    check_rank("x", x, (3,))
    check_exact("delta", delta, x, "the shape of x [b, s, h]")
    check_rank("A", a, (2,))
    check_exact("A", a, (x[2], a[1]), "[h, n] with h = channels of x")
    check_rank("B", b, (3,))
    check_exact("B", b, (x[0], x[1], a[1]), "[b, s, n]")
    check_exact("C", c, b, "the shape of B [b, s, n]")
    if initial_state is not None:
        check_exact("initial_state", initial_state, selective_scan_state(x, a), "[b, h, n]")
    return x, selective_scan_state(x, a) if return_state else None


def gated_delta_net_state(q: Shape, v: Shape) -> Shape:
    """The state [b, H, n, m] of a gated delta net with q, k [b, s, H, n], v [b, s, H, m]."""
    return (q[0], q[2], q[3], v[3])


def gated_delta_net(q: Shape, k: Shape, v: Shape, g: Shape, beta: Shape,
                    initial_state: Shape | None = None, return_state: bool | None = False
                    ) -> tuple[Shape, Shape | None]:
    """The gated delta rule: q, k [b, s, H, n], v [b, s, H, m] (m = n in the SPEC; any m
    works), g, beta [b, s, H], initial_state [b, H, n, m] -> out [b, s, H, m], and with
    `return_state` the final state [b, H, n, m] (`gated_delta_net_state`; None without)."""
    check_rank("q", q, (4,))
    check_exact("k", k, q, "the shape of q [b, s, H, n]")
    check_rank("v", v, (4,))
    check_exact("v", v, (*q[:3], v[3]), "[b, s, H, m] with b, s, H of q")
    check_exact("g", g, q[:3], "[b, s, H]")
    check_exact("beta", beta, q[:3], "[b, s, H]")
    if initial_state is not None:
        check_exact("initial_state", initial_state, gated_delta_net_state(q, v), "[b, H, n, m]")
    return v, gated_delta_net_state(q, v) if return_state else None


def selective_scan_backward(x: Shape, delta: Shape, a: Shape, b: Shape, c: Shape, dy: Shape,
                            d_final_state: Shape, initial_state: Shape | None = None
                            ) -> tuple[Shape, ...]:
    """The reverse pass of `selective_scan` (its operands, the output's cotangent dy
    [b, s, h] and the final state's d_final_state [b, h, n]) -> dx, d_delta, dA per batch
    row [b, h, n] (their sum is A's cotangent: rows are independent work, so threads
    split them), dB, dC (the operands' shapes), the states before each step [b, s, h, n]
    (the saved recurrence), and d_initial_state [b, h, n] when `initial_state` is given
    (else None)."""
    selective_scan(x, delta, a, b, c, initial_state)
    check_exact("dy", dy, x, "the shape of x [b, s, h]")
    check_exact("d_final_state", d_final_state, selective_scan_state(x, a), "[b, h, n]")
    return (x, delta, (x[0], *a), b, c, (*x, a[1]),
            None if initial_state is None else selective_scan_state(x, a))


def gated_delta_net_backward(q: Shape, k: Shape, v: Shape, g: Shape, beta: Shape, do: Shape,
                             d_final_state: Shape, initial_state: Shape | None = None
                             ) -> tuple[Shape, ...]:
    """The reverse pass of `gated_delta_net` (its operands, the output's cotangent do
    [b, s, H, m] and the final state's d_final_state [b, H, n, m]) -> dq, dk, dv, dg,
    dbeta (the operands' shapes), the states before each step [b, s, H, n, m] (the saved
    recurrence), and d_initial_state [b, H, n, m] when `initial_state` is given (else
    None)."""
    gated_delta_net(q, k, v, g, beta, initial_state)
    check_exact("do", do, v, "the shape of v [b, s, H, m]")
    check_exact("d_final_state", d_final_state, gated_delta_net_state(q, v), "[b, H, n, m]")
    return (q, k, v, g, beta, (*q, v[3]),
            None if initial_state is None else gated_delta_net_state(q, v))


def scan(init: Shape, xs: Sequence[Shape], length: int, trajectory: bool = False) -> Shape:
    """A scan of `length` steps over a carry `init`: every xs has first dim `length`; the
    final carry (`init`'s shape), or with `trajectory` every carry [length, *init]."""
    if not isinstance(length, int) or length < 1:
        raise ShapeError(f"length: expected an int >= 1, got {length!r}")
    for i, x in enumerate(xs):
        if len(x) < 1 or not dims_match(x[0], length):
            raise ShapeError(f"xs[{i}]: expected first dim {length} (the scan's length), "
                             f"got shape {fmt(x)}")
    return (length, *init) if trajectory else tuple(init)


QWEN35_MTP_MATRICES = ("embed_w", "eh_w", "q_gate_w", "k_w", "v_w", "o_w", "gate_w", "up_w",
                       "down_w", "lm_head_w")
"""The operands of `qwen35_mtp_head` that may hold a GGUF tensor's raw rows (`schemes`)."""


def qwen35_mtp_head(*, num_heads: int, num_kv_heads: int, head_dim: int, n_rot: int,
                    schemes: Mapping[str, str] | None = None, **operands: Shape | None) -> Shape:
    """The Qwen3.5 multi-token-prediction head (docs/semantics.md), its operands' shapes
    by name (the op `hir.qwen35_mtp_head` lists them; a beta `*_b` may be None):
    h_pre_norm [B, S, d], input_ids [B, S], cos/sin [S, n_rot/2], last_token_idx [B], ...
    -> logits [B, V]. `schemes` names the matrices (QWEN35_MTP_MATRICES) given as a
    GGUF tensor's raw rows, ui8 [out, in/values·bytes] of that scheme, instead of f32
    [in, out] (the embedding table: f32 [V, d])."""
    s = operands
    schemes = dict(schemes or {})
    for name, scheme in schemes.items():
        if name not in QWEN35_MTP_MATRICES:
            raise ShapeError(f"schemes: {name!r} is no matrix operand (expected some of "
                             f"{', '.join(QWEN35_MTP_MATRICES)})")
        if scheme not in QUANT_BLOCKS:
            raise ShapeError(f"schemes: {name}: expected one of {', '.join(QUANT_BLOCKS)}, "
                             f"got {scheme!r}")

    def matrix(name: str, k: Dim, n: Dim | None, what: str) -> Dim:
        return _mtp_matrix(name, s[name], schemes.get(name), k, n, what)

    h = s["h_pre_norm"]
    check_rank("h_pre_norm", h, (3,))
    batch, steps, d = h
    d = require_static("h_pre_norm", d, "the hidden size d")
    if min(num_heads, num_kv_heads, head_dim) < 1 or num_heads % num_kv_heads:
        raise ShapeError(f"num_heads {num_heads} must be a multiple of num_kv_heads "
                         f"{num_kv_heads}, head_dim {head_dim} >= 1")
    if n_rot % 2 or not 2 <= n_rot <= head_dim:
        raise ShapeError(f"n_rot: expected an even value in [2, head_dim={head_dim}], got {n_rot}")
    check_exact("input_ids", s["input_ids"], (batch, steps), "[B, S]")
    check_exact("last_token_idx", s["last_token_idx"], (batch,), "[B]")
    for name in ("cos", "sin"):
        check_exact(name, s[name], (steps, n_rot // 2), "[S, n_rot/2]")
    matrix("embed_w", d, None, "[vocab, d]")
    rows = {"hnorm": d, "enorm": d, "attn_norm": d, "post_norm": d, "head_norm": d,
            "q_norm": head_dim, "k_norm": head_dim}
    for norm, n in rows.items():
        check_exact(f"{norm}_w", s[f"{norm}_w"], (n,), f"[{n}]")
        if s.get(f"{norm}_b") is not None:
            check_exact(f"{norm}_b", s[f"{norm}_b"], (n,), f"[{n}]")
    matrix("eh_w", 2 * d, d, "[2d, d]")
    matrix("q_gate_w", d, num_heads * 2 * head_dim, "[d, H·2D]")
    matrix("k_w", d, num_kv_heads * head_dim, "[d, Hkv·D]")
    matrix("v_w", d, num_kv_heads * head_dim, "[d, Hkv·D]")
    matrix("o_w", num_heads * head_dim, d, "[H·D, d]")
    ffn = matrix("gate_w", d, None, "[d, F]")
    matrix("up_w", d, ffn, "[d, F] as gate_w")
    matrix("down_w", ffn, d, "[F, d]")
    return (batch, matrix("lm_head_w", d, None, "[d, V]"))


def _mtp_matrix(name: str, shape: Shape, scheme: str | None, k: Dim, n: Dim | None,
                what: str) -> Dim:
    """A matrix operand of `qwen35_mtp_head` from k inputs to n outputs (None: any, read
    from the shape) -> n. Without a scheme f32 [k, n] (`what`), the embedding table f32
    [n, k]; with one, the raw rows ui8 [n, k/values·bytes] of the GGUF tensor."""
    check_rank(name, shape, (2,))
    if scheme is None:
        table = name == "embed_w"
        n = (shape[0] if table else shape[1]) if n is None else n
        check_exact(name, shape, (n, k) if table else (k, n), what)
        return n
    values, block_bytes = QUANT_BLOCKS[scheme]
    k = require_static(name, k, "the input size of quantized rows")
    if k % values:
        raise ShapeError(f"{name}: {scheme} rows need an input size that is a multiple of "
                         f"{values} (one block), got {k}")
    n = shape[0] if n is None else n
    check_exact(name, shape, (n, k // values * block_bytes),
                f"{scheme} rows of {what}: [out, {k}/{values} blocks of {block_bytes} bytes]")
    return n


# ----------------------------------------------------------------------------- sampling


def _last_axis(name: str, input: Shape) -> int:
    """The static size of the last axis of a sampling op's operand (rank >= 1)."""
    check_rank(name, input, range(1, 9))
    return require_static(name, input[-1], "the last axis (the one searched)")


def argmax(input: Shape) -> Shape:
    """The index of the largest value along the last axis: `input.shape[:-1]`."""
    _last_axis("input", input)
    return tuple(input[:-1])


def top_k(input: Shape, k: int) -> tuple[Shape, Shape]:
    """The k largest values along the last axis and their indices: two `[..., k]`."""
    n = _last_axis("input", input)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n:
        raise ShapeError(f"k: expected an int in [1, {n}] (the last axis of input "
                         f"{fmt(input)}), got {k!r}")
    shape = (*input[:-1], k)
    return shape, shape


def sample(logits: Shape, temperature: Shape, top_k: Shape, top_p: Shape, seed: Shape,
           position: Shape | None = None, row_positions: Shape | None = None) -> Shape:
    """One token id per row of `logits` [..., V]: `logits.shape[:-1]`. Each sampling
    parameter is rank-0 (shared by every row) or, for 2-D logits [R, V], one per row [R];
    `row_positions`, when given, is [R] (`position`, an index, has no shape)."""
    _last_axis("logits", logits)
    for name, shape in (("temperature", temperature), ("top_k", top_k), ("top_p", top_p),
                        ("seed", seed), ("row_positions", row_positions)):
        if shape is not None and (tuple(shape) != () or name == "row_positions"):
            _check_per_row(name, logits, tuple(shape))
    return tuple(logits[:-1])


def _check_per_row(name: str, logits: Shape, shape: Shape) -> None:
    """A per-row operand of `sample`: [R] for logits [R, V]."""
    shared = "" if name == "row_positions" else "a rank-0 tensor or "
    if len(logits) != 2:
        raise ShapeError(f"{name}: expected {shared}one value per row, which needs 2-D logits "
                         f"[R, V] (got logits {fmt(logits)}), got {fmt(shape)}")
    if len(shape) != 1 or not dims_match(shape[0], logits[0]):
        raise ShapeError(f"{name}: expected {shared}{fmt(logits[:1])} (one per row of logits "
                         f"{fmt(logits)}), got {fmt(shape)}")


# ----------------------------------------------------------------------------- shared-input matmul


def shared_input_matmul(x: Shape, weights: list[Shape], scheme: str | None = None,
                        norm_weight: Shape | None = None, *, rope_cos: Shape | None = None,
                        rope_sin: Shape | None = None, caches: list[Shape] | None = None,
                        rope_products: Sequence[int] = (), rope_head_dim: int = 0,
                        rope_n_rot: int = 0, cache_products: Sequence[int] = (),
                        residual: Shape | None = None,
                        residual_norm_weight: Shape | None = None) -> list[Shape]:
    """One x [..., K] times N >= 2 weights (N >= 1 with a `norm_weight`: the one product
    whose kernel normalizes x, mir-fuse's norm fused into each of its q8 users), one
    result each: f32 weights [K, N_i] give
    x[..., :] @ w_i -> [..., N_i]; with a `scheme`, raw GGUF blocks ui8 [N_i, K/values·bytes]
    give x @ dequant(w_i)^T -> [..., N_i] (as `dequant_matmul`). A `norm_weight` (x's rows
    RMS-normalized first) is exactly [K]. The products in `rope_products` are rank 2 and
    valid `rope` inputs with `rope_cos`/`rope_sin`; those in `cache_products` are rank 2,
    and with `caches` (one each) their results are those caches' shapes (`insert_rows`).
    A `residual` (rows residual + rms_norm(x, residual_norm_weight) replace x) has x's
    shape, its norm weight is [K], and the sum is one more result, last, of x's shape.
    Indices out of range are the verifier's to report; the rule skips them."""
    out = _shared_products(x, weights, scheme, norm_weight)
    if residual is not None:
        check_exact("residual", residual, x, "x's shape")
        check_exact("residual_norm_weight", residual_norm_weight or (), x[-1:],
                    "K = last dim of x")
    for i in (i for i in rope_products if 0 <= i < len(out)):
        check_rank(f"products[{i}]", out[i], (2,))
        rope(out[i], rope_cos or (), rope_sin or (), rope_head_dim, rope_n_rot)
    for j, i in enumerate(cache_products):
        if 0 <= i < len(out):
            check_rank(f"products[{i}]", out[i], (2,))
            if caches is not None and j < len(caches):
                out[i] = insert_rows(caches[j], out[i])
    return out + ([x] if residual is not None else [])


def _shared_products(x: Shape, weights: list[Shape], scheme: str | None,
                     norm_weight: Shape | None) -> list[Shape]:
    if len(weights) < (1 if norm_weight is not None else 2):
        raise ShapeError(f"weights: expected at least 2 (one input shared by several "
                         f"products), or 1 with a norm_weight, got {len(weights)}")
    if norm_weight is not None:
        check_rank("x", x, range(1, 9))
        check_exact("norm_weight", norm_weight, x[-1:], "K = last dim of x")
    out: list[Shape] = []
    for i, w in enumerate(weights):
        try:
            out.append(linear(x, w) if scheme is None else dequant_matmul(x, w, scheme))
        except ShapeError as error:
            raise ShapeError(f"weights[{i}]: {error}") from None
    return out


def shared_linear_pair(x: Shape, w_first: Shape, w_second: Shape) -> tuple[Shape, Shape]:
    """(x @ w_first, x @ w_second) with f32 weights [K, N_1] and [K, N_2]."""
    first, second = shared_input_matmul(x, [w_first, w_second])
    return first, second
