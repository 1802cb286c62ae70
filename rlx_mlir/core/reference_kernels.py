"""numpy reference kernels: the oracle every compiled rlx-mlir kernel is compared against.

Every function follows docs/semantics.md (the conventions: weight layout, packed heads,
grouped-query attention, masks, rope styles) and works on numpy arrays: float inputs are
converted to float32 and every float result is a fresh float32 array (rank 0 included, never
a numpy scalar).  Where rounding matters (transcendental functions, matmul and reduction
accumulation, norms, softmax, attention, the composite blocks) the value is computed in
float64 and rounded to float32 once, so the oracle sits within half an ulp of the exact
result and a comparison measures only the compiled kernel's error.  The IEEE-exact ops
(add sub mul div max min neg abs relu) are computed in float32 directly.  The ops mir
also allows on integers (add sub mul max min neg abs relu) keep an integer input's dtype
(i32 or i64) and wrap on overflow as numpy does; Python ints next to an integer array take
its dtype.

IEEE special values (inf, nan, division by zero, log of 0) give their IEEE results without
numpy warnings.  Shapes are checked with the shared rules of `rlx_mlir.core.shape_inference`
(`ShapeError`); an unknown activation, reduce kind, rope style, mask kind or quantization
scheme is an `ArgumentError`, as is a negative or out-of-range gather/embedding index.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np

from rlx_mlir.core import quants
from rlx_mlir.core import shape_inference as rules
from rlx_mlir.core.errors import ArgumentError, DTypeError, ShapeError

ArrayLike = Any
F32 = np.float32
F64 = np.float64

# ----------------------------------------------------------------------------- float64 mode

_FLOAT: ContextVar[type[np.floating]] = ContextVar("reference_float", default=F32)
"""The float type the kernels take and return: float32, or float64 inside `float64()`."""


@contextmanager
def float64() -> Iterator[None]:
    """Inside, every kernel computes in float64 and returns float64 (float inputs are
    widened, not rounded to float32 first; integers are untouched): the reference
    executor's `dtype="f64"`, for gradient checks by central differences."""
    token = _FLOAT.set(F64)
    try:
        yield
    finally:
        _FLOAT.reset(token)


def float_type() -> type[np.floating]:
    """The float type the kernels compute in now (float32, or float64 in `float64()`)."""
    return _FLOAT.get()

ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh")
REDUCE_KINDS = ("sum", "max", "min", "mean")
ROPE_STYLES = ("half", "interleaved")
MASK_KINDS = ("none", "causal", "custom", "bias")
QUANT_SCHEMES = ("q8_0", "q4_0")
"""Schemes with a numpy quantizer here (QUANTIZE) and hand-written dequantizers."""
DEQUANT_SCHEMES = tuple(rules.QUANT_BLOCKS)
"""Every scheme dequant_matmul reads (DEQUANTIZE), dequantized by rlx_mlir.core.quants."""
QUANT_ACTIVATIONS = ("f32", "q8")
"""dequant_matmul's activation forms (docs/semantics.md)."""
QK = 32
"""Weights per GGUF block."""
Q8_0_BYTES = 34
Q4_0_BYTES = 18


# ----------------------------------------------------------------------------- helpers


def _quiet(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run `fn` with numpy's floating-point warnings off (IEEE results, no noise)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with np.errstate(all="ignore"):
            return fn(*args, **kwargs)

    return wrapper


def _f32(x: ArrayLike) -> np.ndarray:
    return np.asarray(x, dtype=_FLOAT.get())


def _f64(x: ArrayLike) -> np.ndarray:
    """The input rounded to float32, then widened (exactly) to float64 (under `float64()`:
    the input in float64, not rounded)."""
    return np.asarray(x, dtype=_FLOAT.get()).astype(F64)


def _out(x: ArrayLike) -> np.ndarray:
    """A fresh float32 ndarray (0-d results stay arrays; float64 under `float64()`)."""
    return np.array(x, dtype=_FLOAT.get())


def _data(x: ArrayLike) -> np.ndarray:
    """Data-movement input: keeps integer dtypes, other floats become float32 (float64
    under `float64()`)."""
    a = np.asarray(x)
    if a.dtype.kind == "f" and a.dtype != _FLOAT.get():
        a = a.astype(_FLOAT.get())
    return a


def _is_int_array(x: ArrayLike) -> bool:
    return isinstance(x, np.ndarray | np.generic) and x.dtype.kind in "iu"


def _integers(*xs: ArrayLike) -> bool:
    """Whether an integer op stays integer: some input is an integer numpy array (or numpy
    integer) and the others are too, or Python ints."""
    return any(_is_int_array(x) for x in xs) and all(
        _is_int_array(x) or (isinstance(x, int) and not isinstance(x, bool)) for x in xs
    )


def _numeric(op: Callable[..., Any], *xs: ArrayLike) -> np.ndarray:
    """`op` in the inputs' integer dtype (numpy's wrapping arithmetic) when they are
    integers (`_integers`), else in float32; a fresh array either way."""
    if _integers(*xs):
        with np.errstate(all="ignore"):
            return np.array(op(*(x if isinstance(x, int) else np.asarray(x) for x in xs)))
    return _out(op(*(_f32(x) for x in xs)))


def _check_name(what: str, name: str, allowed: Sequence[str]) -> None:
    if name not in allowed:
        raise ArgumentError(f"{what}: expected one of {', '.join(allowed)}, got {name!r}")


def _shape(x: np.ndarray) -> tuple[int, ...]:
    return tuple(int(d) for d in x.shape)


# ----------------------------------------------------------------------------- float64 cores


def _sigmoid64(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


_ERFC = np.frompyfunc(math.erfc, 1, 1)


def _gelu64(x: np.ndarray) -> np.ndarray:
    # 0.5·x·(1 + erf(x/√2)) written with erfc so the negative tail keeps its precision.
    return 0.5 * x * np.asarray(_ERFC(-x / math.sqrt(2.0)), dtype=F64)


def _gelu_tanh64(x: np.ndarray) -> np.ndarray:
    # 0.5·x·(1 + tanh(u)) == x·sigmoid(2u), u = √(2/π)·(x + 0.044715·x³).
    u = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)
    return x * _sigmoid64(2.0 * u)


_ACT64: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "relu": lambda x: np.maximum(x, 0.0),
    "gelu": _gelu64,
    "gelu_tanh": _gelu_tanh64,
    "silu": lambda x: x * _sigmoid64(x),
    "sigmoid": _sigmoid64,
    "tanh": np.tanh,
}


def _act64(name: str | None, x: np.ndarray) -> np.ndarray:
    if name is None:
        return x
    _check_name("activation", name, ACTIVATIONS)
    return _ACT64[name](x)


def _matmul64(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    rules.matmul(_shape(a), _shape(b))
    return np.matmul(a, b)


def _rms_norm64(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray | None, eps: float):
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * gamma
    return y if beta is None else y + beta


# ----------------------------------------------------------------------------- elementwise


def add(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    return _numeric(np.add, a, b)


def sub(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    return _numeric(np.subtract, a, b)


def mul(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    return _numeric(np.multiply, a, b)


@_quiet
def div(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    return _out(np.divide(_f32(a), _f32(b)))


def maximum(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    """np.maximum (a nan operand gives nan)."""
    return _numeric(np.maximum, a, b)


def minimum(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    """np.minimum (a nan operand gives nan)."""
    return _numeric(np.minimum, a, b)


@_quiet
def power(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    """a**b (powf semantics: negative base with a non-integer exponent is nan)."""
    return _out(np.power(_f64(a), _f64(b)))


def neg(x: ArrayLike) -> np.ndarray:
    """-x (on integers, -MIN wraps to MIN)."""
    return _numeric(np.negative, x)


@_quiet
def exp(x: ArrayLike) -> np.ndarray:
    return _out(np.exp(_f64(x)))


@_quiet
def log(x: ArrayLike) -> np.ndarray:
    return _out(np.log(_f64(x)))


@_quiet
def sqrt(x: ArrayLike) -> np.ndarray:
    return _out(np.sqrt(_f64(x)))


@_quiet
def rsqrt(x: ArrayLike) -> np.ndarray:
    return _out(1.0 / np.sqrt(_f64(x)))


@_quiet
def tanh(x: ArrayLike) -> np.ndarray:
    return _out(np.tanh(_f64(x)))


@_quiet
def sigmoid(x: ArrayLike) -> np.ndarray:
    return _out(_sigmoid64(_f64(x)))


@_quiet
def silu(x: ArrayLike) -> np.ndarray:
    """x·sigmoid(x)."""
    return _out(_ACT64["silu"](_f64(x)))


@_quiet
def gelu(x: ArrayLike) -> np.ndarray:
    """Exact gelu: 0.5·x·(1 + erf(x/√2))."""
    return _out(_gelu64(_f64(x)))


@_quiet
def gelu_tanh(x: ArrayLike) -> np.ndarray:
    """0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))."""
    return _out(_gelu_tanh64(_f64(x)))


def relu(x: ArrayLike) -> np.ndarray:
    """max(x, 0) (nan stays nan)."""
    return _numeric(lambda v: np.maximum(v, v.dtype.type(0)), x)


def absolute(x: ArrayLike) -> np.ndarray:
    """|x| (on integers, |MIN| wraps to MIN)."""
    return _numeric(np.abs, x)


@_quiet
def softplus(x: ArrayLike) -> np.ndarray:
    """log(1 + e^x), as max(x, 0) + log1p(e^-|x|): no overflow for large x, no lost tail
    for very negative x."""
    x64 = _f64(x)
    return _out(np.maximum(x64, 0.0) + np.log1p(np.exp(-np.abs(x64))))


ELEMENTWISE: dict[str, Callable[..., np.ndarray]] = {
    "add": add, "sub": sub, "mul": mul, "div": div, "max": maximum, "min": minimum,
    "pow": power, "neg": neg, "exp": exp, "log": log, "sqrt": sqrt, "rsqrt": rsqrt,
    "tanh": tanh, "sigmoid": sigmoid, "silu": silu, "gelu": gelu, "gelu_tanh": gelu_tanh,
    "relu": relu, "abs": absolute, "softplus": softplus,
}
"""Every mir elementwise op by name: binary ones take (a, b), unary ones (x)."""

BINARY_OPS = tuple(n for n, f in ELEMENTWISE.items() if len(inspect.signature(f).parameters) == 2)
UNARY_OPS = tuple(n for n in ELEMENTWISE if n not in BINARY_OPS)
"""The elementwise names by arity, in the order of `ELEMENTWISE` (their one definition)."""


@_quiet
def activation(name: str | None, x: ArrayLike) -> np.ndarray:
    """One of relu gelu gelu_tanh silu sigmoid tanh; None is the identity."""
    if name is None:
        return _out(x)
    _check_name("activation", name, ACTIVATIONS)
    return ELEMENTWISE[name](x)


# ----------------------------------------------------------------------------- linear algebra


def matmul(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    """np.matmul (1-D operands promoted, batch dims broadcast), float64 accumulation."""
    return _out(_matmul64(_f64(a), _f64(b)))


@_quiet
def fused_matmul(
    a: ArrayLike, b: ArrayLike, bias: ArrayLike | None = None, activation: str | None = None
) -> np.ndarray:
    """activation(a @ b + bias), bias broadcasting against the product."""
    y = _matmul64(_f64(a), _f64(b))
    if bias is not None:
        bias64 = _f64(bias)
        rules.broadcast_to(_shape(bias64), _shape(y))
        y = y + bias64
    return _out(_act64(activation, y))


def linear(
    x: ArrayLike, w: ArrayLike, b: ArrayLike | None = None, activation: str | None = None
) -> np.ndarray:
    """activation(x[..., K] @ w[K, N] + b[N])."""
    x, w = _f32(x), _f32(w)
    rules.linear(_shape(x), _shape(w), None if b is None else _shape(_f32(b)))
    return fused_matmul(x, w, b, activation)


@_quiet
def swiglu_ffn(x: ArrayLike, up: ArrayLike, gate: ArrayLike, down: ArrayLike) -> np.ndarray:
    """(silu(x @ gate) · (x @ up)) @ down."""
    x, up, gate, down = _f64(x), _f64(up), _f64(gate), _f64(down)
    rules.swiglu_ffn(_shape(x), _shape(up), _shape(gate), _shape(down))
    return _out(_swiglu64(x, up, gate, down))


def _swiglu64(x, up, gate, down) -> np.ndarray:
    g = x @ gate
    return (g * _sigmoid64(g) * (x @ up)) @ down


# ----------------------------------------------------------------------------- reductions, norms


@_quiet
def reduce(
    x: ArrayLike, kind: str, axes: int | Sequence[int] | None = None, keepdim: bool = False
) -> np.ndarray:
    """sum | max | min | mean over `axes` (int, tuple, or None for all; negative allowed)."""
    _check_name("kind", kind, REDUCE_KINDS)
    x = _f32(x)
    if axes is None:
        axes = tuple(range(x.ndim))
    rules.reduce(_shape(x), axes, keepdim)
    ax = rules.normalize_axes("axes", axes, x.ndim)
    if kind == "sum":
        y = np.sum(x.astype(F64), axis=ax, keepdims=keepdim)
    elif kind == "mean":
        y = np.mean(x.astype(F64), axis=ax, keepdims=keepdim)
    elif kind == "max":
        y = np.max(x, axis=ax, keepdims=keepdim)
    else:
        y = np.min(x, axis=ax, keepdims=keepdim)
    return _out(y)


@_quiet
def softmax(x: ArrayLike, axis: int = -1) -> np.ndarray:
    """exp(x - max) / sum(exp(x - max)) along `axis` (any axis, negative allowed)."""
    x = _f64(x)
    rules.softmax(_shape(x), axis)
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return _out(e / np.sum(e, axis=axis, keepdims=True))


@_quiet
def rms_norm(
    x: ArrayLike, gamma: ArrayLike, beta: ArrayLike | None = None, eps: float = 1e-5
) -> np.ndarray:
    """x / sqrt(mean(x², -1) + eps) · gamma (+ beta)."""
    x, gamma = _f64(x), _f64(gamma)
    b = None if beta is None else _f64(beta)
    rules.norm(_shape(x), _shape(gamma), None if b is None else _shape(b))
    return _out(_rms_norm64(x, gamma, b, eps))


def residual_rms_norm(
    x: ArrayLike,
    residual: ArrayLike,
    gamma: ArrayLike,
    beta: ArrayLike | None = None,
    eps: float = 1e-5,
) -> np.ndarray:
    """rms_norm(x + residual, ...) (the float32 sum, then the norm); returns the norm only."""
    x, residual = _f32(x), _f32(residual)
    rules.residual_norm(
        _shape(x), _shape(residual), _shape(_f32(gamma)),
        None if beta is None else _shape(_f32(beta)),
    )
    return rms_norm(x + residual, gamma, beta, eps)


@_quiet
def layer_norm(
    x: ArrayLike, gamma: ArrayLike, beta: ArrayLike | None, eps: float = 1e-5
) -> np.ndarray:
    """(x - mean) / sqrt(var + eps) · gamma + beta over the last axis, population variance."""
    x, gamma = _f64(x), _f64(gamma)
    b = None if beta is None else _f64(beta)
    rules.norm(_shape(x), _shape(gamma), None if b is None else _shape(b))
    c = x - np.mean(x, axis=-1, keepdims=True)
    y = c / np.sqrt(np.mean(c * c, axis=-1, keepdims=True) + eps) * gamma
    return _out(y if b is None else y + b)


# ----------------------------------------------------------------------------- transformer blocks


def _rope64(x, cos, sin, head_dim: int, n_rot: int, style: str) -> np.ndarray:
    s, hd = x.shape[-2], x.shape[-1]
    xh = x.reshape(x.shape[:-1] + (hd // head_dim, head_dim))  # [..., S, H, D]
    c = cos.reshape(s, 1, n_rot // 2)
    sn = sin.reshape(s, 1, n_rot // 2)
    if style == "half":
        lo, hi = slice(0, n_rot // 2), slice(n_rot // 2, n_rot)
    else:
        lo, hi = slice(0, n_rot, 2), slice(1, n_rot, 2)
    x1, x2 = xh[..., lo], xh[..., hi]
    out = xh.copy()
    out[..., lo] = x1 * c - x2 * sn
    out[..., hi] = x2 * c + x1 * sn
    return out.reshape(x.shape)


@_quiet
def rope(
    x: ArrayLike,
    cos: ArrayLike,
    sin: ArrayLike,
    head_dim: int,
    n_rot: int | None = None,
    style: str = "half",
) -> np.ndarray:
    """Rotary embedding of x [S, H·D] or [B, S, H·D]; cos, sin [S, n_rot/2].

    In each head the first n_rot dims rotate, the rest pass through.  `half`: pairs
    (x[i], x[i + n_rot/2]); `interleaved`: pairs (x[2i], x[2i+1]); each pair (x1, x2)
    becomes (x1·cos − x2·sin, x2·cos + x1·sin).
    """
    _check_name("style", style, ROPE_STYLES)
    x, cos, sin = _f64(x), _f64(cos), _f64(sin)
    n_rot = head_dim if n_rot is None else n_rot
    rules.rope(_shape(x), _shape(cos), _shape(sin), head_dim, n_rot)
    return _out(_rope64(x, cos, sin, head_dim, n_rot, style))


def _attention64(
    q, k, v, mask, *, num_heads: int, head_dim: int, num_kv_heads: int, mask_kind: str,
    scale: float, window: int | None = None,
) -> np.ndarray:
    unbatched = q.ndim == 2
    if unbatched:
        q, k, v = q[None], k[None], v[None]
    b, s, t = q.shape[0], q.shape[1], k.shape[1]
    group = num_heads // num_kv_heads
    qh = q.reshape(b, s, num_heads, head_dim).transpose(0, 2, 1, 3)  # [B, H, S, D]
    kh = k.reshape(b, t, num_kv_heads, head_dim).transpose(0, 2, 1, 3)  # [B, Hkv, T, D]
    vh = v.reshape(b, t, num_kv_heads, head_dim).transpose(0, 2, 1, 3)
    kh = np.repeat(kh, group, axis=1)  # query head h reads kv head h // group
    vh = np.repeat(vh, group, axis=1)
    scores = scale * (qh @ kh.transpose(0, 1, 3, 2))  # [B, H, S, T]
    if mask_kind == "causal":
        keep = np.arange(t)[None, :] <= np.arange(s)[:, None] + (t - s)
        if window is not None:  # sliding window: also j > i + (T − S) − W
            keep &= np.arange(t)[None, :] > np.arange(s)[:, None] + (t - s) - window
        scores = np.where(keep, scores, -np.inf)
    elif mask_kind == "custom":
        scores = np.where(mask != 0, scores, -np.inf)
    elif mask_kind == "bias":
        scores = scores + mask
    m = np.max(scores, axis=-1, keepdims=True)
    m = np.where(m == -np.inf, 0.0, m)  # a fully dropped row: every exp() below is 0
    e = np.exp(scores - m)
    denom = np.sum(e, axis=-1, keepdims=True)
    p = np.where(denom > 0, e / np.where(denom > 0, denom, 1.0), 0.0)
    out = (p @ vh).transpose(0, 2, 1, 3).reshape(b, s, num_heads * head_dim)
    return out[0] if unbatched else out


@_quiet
def attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    mask: ArrayLike | None = None,
    *,
    num_heads: int,
    head_dim: int,
    num_kv_heads: int | None = None,
    mask_kind: str = "none",
    scale: float | None = None,
    window: int | None = None,
) -> np.ndarray:
    """Grouped-query scaled dot-product attention, heads packed in the last axis.

    q [B, S, H·D], k and v [B, T, Hkv·D] (B may be absent); causal: key j ≤ i + (T − S),
    and with a sliding `window` W also j > i + (T − S) − W; custom: a 0 in the mask
    drops, anything else keeps; bias: the mask is added to the scaled scores.  The mask
    is [S, T] or [1|B, 1|H, S, T].  A row that drops every key yields zeros.  The result
    has q's layout.
    """
    _check_name("mask_kind", mask_kind, MASK_KINDS)
    q, k, v = _f64(q), _f64(k), _f64(v)
    m = None if mask is None else _f64(mask)
    num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    rules.attention(
        _shape(q), _shape(k), _shape(v), None if m is None else _shape(m),
        num_heads=num_heads, head_dim=head_dim, num_kv_heads=num_kv_heads,
        mask_kind=mask_kind, window=window,
    )
    scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    return _out(
        _attention64(
            q, k, v, m, num_heads=num_heads, head_dim=head_dim, num_kv_heads=num_kv_heads,
            mask_kind=mask_kind, scale=scale, window=window,
        )
    )


@_quiet
def llama_decoder_block(
    x: ArrayLike,
    ln1_g: ArrayLike,
    ln1_b: ArrayLike | None,
    q_w: ArrayLike,
    k_w: ArrayLike,
    v_w: ArrayLike,
    o_w: ArrayLike,
    ln2_g: ArrayLike,
    ln2_b: ArrayLike | None,
    gate_w: ArrayLike,
    up_w: ArrayLike,
    down_w: ArrayLike,
    cos: ArrayLike,
    sin: ArrayLike,
    mask: ArrayLike | None = None,
    k_cache: np.ndarray | None = None,
    v_cache: np.ndarray | None = None,
    position: int | None = None,
    *,
    num_heads: int,
    head_dim: int,
    num_kv_heads: int | None = None,
    eps: float = 1e-5,
    mask_kind: str = "causal",
    rope_style: str = "half",
) -> np.ndarray:
    """Pre-norm Llama block: h = x + attn(rms_norm(x)) @ o_w; out = h + swiglu(rms_norm(h)).

    Weights are [in, out]; rope over the whole head (n_rot = head_dim) on q and k;
    attention scale 1/√head_dim. With KV caches (f32 arrays [capacity, Hkv·D], the
    model's state buffers): k and v of the S rows are written IN PLACE at rows
    [position, position + S) and attention reads rows [0, position + S) (cos/sin hold
    the rows of positions position … position + S − 1).
    """
    _check_name("mask_kind", mask_kind, MASK_KINDS)
    _check_name("rope_style", rope_style, ROPE_STYLES)
    num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    w = {
        "ln1_g": ln1_g, "ln1_b": ln1_b, "q_w": q_w, "k_w": k_w, "v_w": v_w, "o_w": o_w,
        "ln2_g": ln2_g, "ln2_b": ln2_b, "gate_w": gate_w, "up_w": up_w, "down_w": down_w,
        "cos": cos, "sin": sin,
    }
    w64 = {n: None if a is None else _f64(a) for n, a in w.items()}
    x = _f64(x)
    m = None if mask is None else _f64(mask)
    rules.llama_decoder_block(
        _shape(x), num_heads=num_heads, head_dim=head_dim, num_kv_heads=num_kv_heads,
        mask=None if m is None else _shape(m), mask_kind=mask_kind,
        **{n: None if a is None else _shape(a) for n, a in w64.items()},
    )
    a = _rms_norm64(x, w64["ln1_g"], w64["ln1_b"], eps)
    q = _rope64(a @ w64["q_w"], w64["cos"], w64["sin"], head_dim, head_dim, rope_style)
    k = _rope64(a @ w64["k_w"], w64["cos"], w64["sin"], head_dim, head_dim, rope_style)
    v = a @ w64["v_w"]
    if k_cache is not None and v_cache is not None:
        k, v = _append_kv(k, v, k_cache, v_cache, position, num_kv_heads, head_dim, mask_kind)
    att = _attention64(
        q, k, v, m, num_heads=num_heads, head_dim=head_dim,
        num_kv_heads=num_kv_heads, mask_kind=mask_kind, scale=1.0 / math.sqrt(head_dim),
    )
    h = x + att @ w64["o_w"]
    n2 = _rms_norm64(h, w64["ln2_g"], w64["ln2_b"], eps)
    return _out(h + _swiglu64(n2, w64["up_w"], w64["gate_w"], w64["down_w"]))


def _append_kv(k: np.ndarray, v: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray,
               position: int | None, num_kv_heads: int, head_dim: int,
               mask_kind: str) -> tuple[np.ndarray, np.ndarray]:
    """Write k, v [S, Hkv·D] into the caches at `position` (in place, as f32) and return
    the cache rows [0, position + S) (f64)."""
    rules.llama_kv_cache(_shape(k), _shape(k_cache), _shape(v_cache), num_kv_heads=num_kv_heads,
                         head_dim=head_dim, mask_kind=mask_kind)
    if position is None:
        raise ArgumentError("llama_decoder_block: kv_cache needs the position, got none")
    end = int(position) + k.shape[0]
    if int(position) < 0 or end > k_cache.shape[0]:
        raise ArgumentError(
            f"llama_decoder_block: rows [{position}, {end}) do not fit in the caches of "
            f"{k_cache.shape[0]} rows (cache full)"
        )
    k_cache[int(position):end] = k
    v_cache[int(position):end] = v
    return _f64(k_cache[:end]), _f64(v_cache[:end])


# ----------------------------------------------------------------------------- data movement
# These keep the input's dtype (f32, i32, i64 or ui8) and always return a fresh array.


def reshape(x: ArrayLike, shape: Sequence[int]) -> np.ndarray:
    """Reshape (at most one -1; `()` for a single element)."""
    x = _data(x)
    return x.reshape(rules.reshape(_shape(x), tuple(shape))).copy()


def transpose(x: ArrayLike, perm: Sequence[int]) -> np.ndarray:
    """np.transpose with a full permutation (negative entries allowed)."""
    x = _data(x)
    rules.transpose(_shape(x), perm)
    return np.array(np.transpose(x, tuple(p % x.ndim for p in perm)), order="C")


def narrow(x: ArrayLike, axis: int, start: int, length: int) -> np.ndarray:
    """x[..., start:start+length, ...] along `axis`."""
    x = _data(x)
    rules.narrow(_shape(x), axis, start, length)
    ax = axis % x.ndim
    index = (slice(None),) * ax + (slice(start, start + length),)
    return x[index].copy()


def concat(values: Sequence[ArrayLike], axis: int) -> np.ndarray:
    """np.concatenate along `axis`."""
    arrays = [_data(v) for v in values]
    rules.concat([_shape(a) for a in arrays], axis)
    return np.concatenate(arrays, axis=axis % arrays[0].ndim)


def broadcast_to(x: ArrayLike, shape: Sequence[int]) -> np.ndarray:
    """np.broadcast_to, materialized."""
    x = _data(x)
    target = rules.broadcast_to(_shape(x), tuple(shape))
    return np.broadcast_to(x, target).copy()


def _check_indices(what: str, indices: ArrayLike, size: int) -> np.ndarray:
    idx = np.asarray(indices)
    if idx.dtype.kind not in "iu":
        raise DTypeError(f"{what}: expected integer indices (i32 or i64), got {idx.dtype}")
    if idx.size and (idx.min() < 0 or idx.max() >= size):
        bad = idx[(idx < 0) | (idx >= size)].flat[0]
        raise ArgumentError(
            f"{what}: index {int(bad)} is out of range [0, {size}) "
            f"(negative and out-of-range indices are errors)"
        )
    return idx


def gather(x: ArrayLike, indices: ArrayLike, axis: int = 0) -> np.ndarray:
    """np.take: x.shape[:axis] + indices.shape + x.shape[axis+1:]; indices must be in range."""
    x = _data(x)
    idx = np.asarray(indices)
    rules.gather(_shape(x), _shape(idx), axis)
    ax = axis % x.ndim
    idx = _check_indices("gather indices", idx, x.shape[ax])
    return np.take(x, idx, axis=ax)


def scatter_add(updates: ArrayLike, indices: ArrayLike, axis: int, dim_size: int) -> np.ndarray:
    """The transpose of `gather`: zeros of `rules.scatter_add`'s shape with each row of
    `updates` added at its index along `axis` (repeated indices accumulate)."""
    u = _f64(updates)
    idx = np.asarray(indices)
    shape = rules.scatter_add(_shape(u), _shape(idx), axis, dim_size)
    ax = axis % len(shape)
    idx = _check_indices("scatter_add indices", idx, dim_size)
    outer, inner = math.prod(shape[:ax]), math.prod(shape[ax + 1:])
    out = np.zeros((outer, dim_size, inner), dtype=F64)
    np.add.at(out, (slice(None), idx.reshape(-1)), u.reshape(outer, idx.size, inner))
    return _out(out.reshape(shape))


def insert_rows(rows: ArrayLike, cache: ArrayLike, position: int) -> np.ndarray:
    """A copy of `cache` [capacity, *tail] with `rows` [S, *tail] at rows
    [position, position + S) (a KV cache append; rows past the capacity are an error)."""
    rows, cache = _data(rows), _data(cache)
    position = int(position)
    rules.insert_rows(_shape(cache), _shape(rows))
    end = position + rows.shape[0]
    if position < 0 or end > cache.shape[0]:
        raise ArgumentError(
            f"insert_rows: rows [{position}, {end}) do not fit in the cache of "
            f"{cache.shape[0]} rows (cache full)"
        )
    out = np.array(cache)
    out[position:end] = rows
    return out


def slot_indices(what: str, slots: ArrayLike, positions: ArrayLike, n_slots: int,
               capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """`slots` in [0, n_slots) and `positions` in [0, capacity), as int64 arrays (an
    ArgumentError names the op and the argument out of range)."""
    checked = []
    for name, value, size in (("slots", slots, n_slots), ("positions", positions, capacity)):
        idx = np.asarray(value)
        if idx.dtype.kind not in "iu":
            raise DTypeError(f"{what}: {name}: expected i32 indices, got {idx.dtype}")
        if idx.size and (idx.min() < 0 or idx.max() >= size):
            bad = idx[(idx < 0) | (idx >= size)].flat[0]
            raise ArgumentError(f"{what}: {name}: {int(bad)} is out of range [0, {size})")
        checked.append(idx.astype(np.int64))
    return checked[0], checked[1]


def cache_scatter(rows: ArrayLike, cache: ArrayLike, slots: ArrayLike,
                  positions: ArrayLike) -> np.ndarray:
    """A copy of the slot cache `cache` [n_slots, capacity, *tail] with row r of `rows`
    [R, *tail] at [slots[r], positions[r]] (in order: a later row wins); rows [B, S, *tail]
    with slots and positions [B, S] are the B·S rows in order."""
    rows, cache = _data(rows), _data(cache)
    rules.cache_scatter(_shape(rows), _shape(cache), _shape(np.asarray(slots)),
                        _shape(np.asarray(positions)))
    slot, position = slot_indices("cache_scatter", slots, positions, *cache.shape[:2])
    out = np.array(cache)
    rows = rows.reshape(-1, *cache.shape[2:])  # [B, S, *tail]: the B·S rows in order
    for r, (s, p) in enumerate(zip(slot.ravel(), position.ravel(), strict=True)):
        out[s, p] = rows[r]
    return out


@_quiet
def slot_attention(q: ArrayLike, keys: ArrayLike, values: ArrayLike, slots: ArrayLike,
                   positions: ArrayLike, *, num_heads: int, head_dim: int,
                   num_kv_heads: int | None = None, scale: float | None = None,
                   window: int | None = None) -> np.ndarray:
    """Row r of q [R, H·D] attends the keys/values [n_slots, capacity, Hkv·D] of slot
    slots[r] at j in [lo, positions[r]] (lo = 0, or with `window` W
    max(0, positions[r] − W + 1)), grouped-query; the result has q's shape. q [B, S, H·D]
    with slots and positions [B, S] is the B·S rows in order."""
    q, k, v = _f64(q), _f64(keys), _f64(values)
    num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    rules.slot_attention(_shape(q), _shape(k), _shape(v), _shape(np.asarray(slots)),
                         _shape(np.asarray(positions)), num_heads=num_heads,
                         head_dim=head_dim, num_kv_heads=num_kv_heads, window=window)
    slot, position = slot_indices("slot_attention", slots, positions, *k.shape[:2])
    slot, position = slot.ravel(), position.ravel()
    scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    shape = q.shape
    q = q.reshape(-1, shape[-1])  # [B, S, H·D]: the B·S rows in order
    out = np.zeros_like(q)
    for r in range(q.shape[0]):
        end = int(position[r]) + 1
        lo = 0 if window is None else max(0, end - window)
        out[r] = _attention64(q[r:r + 1], k[slot[r], lo:end], v[slot[r], lo:end], None,
                              num_heads=num_heads, head_dim=head_dim,
                              num_kv_heads=num_kv_heads, mask_kind="none", scale=scale)[0]
    return _out(out.reshape(shape))


def embedding(table: ArrayLike, ids: ArrayLike) -> np.ndarray:
    """table[V, D][ids] -> [..., D]; ids must lie in [0, V)."""
    table = _f32(table)
    idx = np.asarray(ids)
    rules.embedding(_shape(table), _shape(idx))
    idx = _check_indices("embedding ids", idx, table.shape[0])
    return np.take(table, idx, axis=0)


# ----------------------------------------------------------------------------- GGUF quantization


def _blocks(w_bytes: ArrayLike, k: int | None, block_bytes: int, scheme: str,
            values: int = QK) -> np.ndarray:
    w = np.asarray(w_bytes)
    if w.dtype != np.uint8:
        raise DTypeError(f"w: expected element type ui8 (raw {scheme} blocks), got {w.dtype}")
    rules.check_rank("w", _shape(w), (2,))
    if k is None:
        if w.shape[1] % block_bytes:
            raise ShapeError(
                f"w: row bytes must be a multiple of {block_bytes} ({scheme}), got {w.shape[1]}"
            )
        k = w.shape[1] // block_bytes * values
    if k < 1 or k % values:
        raise ShapeError(f"k: expected a positive multiple of {values}, got {k}")
    rules.check_exact("w", _shape(w), (w.shape[0], k // values * block_bytes), f"{scheme}, K={k}")
    return np.ascontiguousarray(w).reshape(w.shape[0], k // values, block_bytes)


def _scales(blocks: np.ndarray) -> np.ndarray:
    """The little-endian f16 scale of each block as float32, shape [N, K/32, 1]."""
    return np.ascontiguousarray(blocks[..., :2]).view("<f2").astype(F32)


def dequantize_q8_0(w_bytes: ArrayLike, k: int | None = None) -> np.ndarray:
    """GGUF q8_0 blocks ui8 [N, K/32·34] -> f32 [N, K]: value = f16 scale · int8 q."""
    blocks = _blocks(w_bytes, k, Q8_0_BYTES, "q8_0")
    q = np.ascontiguousarray(blocks[..., 2:]).view(np.int8).astype(F32)
    return (q * _scales(blocks)).reshape(blocks.shape[0], -1)


def dequantize_q4_0(w_bytes: ArrayLike, k: int | None = None) -> np.ndarray:
    """GGUF q4_0 blocks ui8 [N, K/32·18] -> f32 [N, K]: value = f16 scale · (nibble − 8).

    Low nibbles of the 16 packed bytes are elements 0–15, high nibbles elements 16–31.
    """
    blocks = _blocks(w_bytes, k, Q4_0_BYTES, "q4_0")
    qs = blocks[..., 2:]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(np.int8) - np.int8(8)
    return (q.astype(F32) * _scales(blocks)).reshape(blocks.shape[0], -1)


def _gguf_dequantizer(scheme: str) -> Callable[..., np.ndarray]:
    """ui8 [N, K/values·bytes] -> f32 [N, K] by rlx_mlir.core.quants (bit-exact with gguf)."""
    values, block_bytes = rules.QUANT_BLOCKS[scheme]

    def dequantize_scheme(w_bytes: ArrayLike, k: int | None = None) -> np.ndarray:
        blocks = _blocks(w_bytes, k, block_bytes, scheme, values)
        return quants.dequantize(blocks.reshape(blocks.shape[0], -1), scheme)

    dequantize_scheme.__name__ = f"dequantize_{scheme}"
    return dequantize_scheme


DEQUANTIZE: dict[str, Callable[..., np.ndarray]] = {
    scheme: _gguf_dequantizer(scheme) for scheme in DEQUANT_SCHEMES
} | {"q8_0": dequantize_q8_0, "q4_0": dequantize_q4_0}
"""Raw blocks ui8 [N, K/values·bytes] (and optionally K) -> f32 [N, K], per scheme."""


def dequant_gather(table: ArrayLike, ids: ArrayLike, scheme: str) -> np.ndarray:
    """Rows `ids` of the raw GGUF table ui8 [V, K/values·bytes], dequantized -> [..., K]
    (only those rows are read); ids must lie in [0, V)."""
    _check_name("scheme", scheme, DEQUANT_SCHEMES)
    table = np.asarray(table)
    if table.dtype != np.uint8:
        raise DTypeError(f"table: expected element type ui8 (raw {scheme} blocks), got {table.dtype}")
    idx = np.asarray(ids)
    shape = rules.dequant_gather(_shape(table), _shape(idx), scheme)
    idx = _check_indices("embedding ids", idx, table.shape[0])
    return quants.dequantize(table[idx.reshape(-1)], scheme).reshape(shape)


def dequant_matmul(x: ArrayLike, w: ArrayLike, scheme: str,
                   activations: str = "f32", *, residual: ArrayLike | None = None) -> np.ndarray:
    """x[..., K] @ dequant(w)ᵀ -> [..., N], w the raw GGUF blocks ui8 [N, K/values·bytes];
    activations "q8": x quantized to the scheme's ggml `vec_dot_type` first, the products
    as ggml's dot products compute them (`quants.q8_matmul`). A `residual` (q8 only, the
    result's shape) is added to the f32 product: residual + product."""
    _check_name("scheme", scheme, DEQUANT_SCHEMES)
    _check_name("activations", activations, QUANT_ACTIVATIONS)
    x = _f32(x)
    w = np.asarray(w)
    rules.dequant_matmul(_shape(x), _shape(w), scheme,
                         None if residual is None else _shape(np.asarray(residual)))
    if activations == "q8":
        if scheme not in quants.VEC_DOT_TYPES:
            raise ArgumentError(f"activations: 'q8' needs a block-quantized scheme "
                                f"({', '.join(quants.VEC_DOT_TYPES)}), got scheme {scheme!r}")
        product = quants.q8_matmul(x, w, scheme)
        return product if residual is None else _f32(residual) + product
    if residual is not None:
        raise ArgumentError("residual: needs activations 'q8' (the q8 kernels' epilogue), "
                            f"got activations {activations!r}")
    wd = DEQUANTIZE[scheme](w, x.shape[-1])
    return _out(x.astype(F64) @ wd.T.astype(F64))


def _quant_rows(w: ArrayLike, name: str) -> np.ndarray:
    w = _f32(w)
    rules.check_rank(name, _shape(w), (2,))
    if w.shape[1] % QK:
        raise ShapeError(f"{name}: K (last dim) must be a multiple of {QK}, got {w.shape[1]}")
    return w.reshape(w.shape[0], w.shape[1] // QK, QK)


def _f16_bytes(d: np.ndarray) -> np.ndarray:
    return d.astype("<f2").view(np.uint8)


@_quiet
def quantize_q8_0(w: ArrayLike) -> np.ndarray:
    """f32 [N, K] -> ui8 [N, K/32·34] GGUF q8_0 blocks, bit-exact with ggml's reference."""
    blocks = _quant_rows(w, "w")
    d = np.max(np.abs(blocks), axis=-1, keepdims=True) / F32(127)
    inv = np.where(d == 0, F32(0), F32(1) / d).astype(F32)
    v = blocks * inv
    a = np.abs(v)
    fl = np.floor(a)
    q = np.sign(v) * (fl + np.floor(2 * (a - fl)))  # round half away from zero, exactly
    qb = q.astype(np.int8).view(np.uint8)
    out = np.concatenate([_f16_bytes(d), qb], axis=-1)
    return out.reshape(blocks.shape[0], -1)


@_quiet
def quantize_q4_0(w: ArrayLike) -> np.ndarray:
    """f32 [N, K] -> ui8 [N, K/32·18] GGUF q4_0 blocks, bit-exact with ggml's reference."""
    blocks = _quant_rows(w, "w")
    imax = np.argmax(np.abs(blocks), axis=-1)[..., None]
    d = np.take_along_axis(blocks, imax, axis=-1) / F32(-8)
    inv = np.where(d == 0, F32(0), F32(1) / d).astype(F32)
    q = np.clip(np.trunc(blocks * inv + F32(8.5)), 0, 15).astype(np.uint8)
    packed = q[..., : QK // 2] | (q[..., QK // 2 :] << np.uint8(4))
    out = np.concatenate([_f16_bytes(d), packed], axis=-1)
    return out.reshape(blocks.shape[0], -1)


QUANTIZE: dict[str, Callable[[ArrayLike], np.ndarray]] = {
    "q8_0": quantize_q8_0, "q4_0": quantize_q4_0,
}


# ----------------------------------------------------------------------------- convolution


@_quiet
def depthwise_conv1d(x_padded: ArrayLike, w: ArrayLike, return_state: bool = False
                     ) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Valid depthwise conv over time: x [B, S+K−1, C], w [K, C] -> y[b, t, c] =
    Σₖ w[k, c]·x[b, t+k, c], shape [B, S, C]; with `return_state` (y, the window
    x[:, S:, :] [B, K−1, C], the last K−1 rows of x)."""
    x, w = _f64(x_padded), _f64(w)
    (b, s, c), _ = rules.depthwise_conv1d(_shape(x), _shape(w), return_state)
    y = np.zeros((b, s, c), dtype=F64)
    for tap in range(w.shape[0]):
        y += w[tap] * x[:, tap : tap + s, :]
    return _sequence_result(y, x[:, s:, :], return_state)


def depthwise_conv1d_causal(
    x: ArrayLike, w: ArrayLike, left_pad: ArrayLike | None = None, return_state: bool = False
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Causal depthwise conv: x [B, S, C], w [K, C], left_pad [B, K−1, C] (zeros if absent);
    y = depthwise_conv1d(concat(left_pad, x) over time, w), shape [B, S, C]; with
    `return_state` (y, the window: the last K−1 rows of concat(left_pad, x), [B, K−1, C],
    for any S — rows of left_pad among them when S < K−1)."""
    x, w = _f32(x), _f32(w)
    pad = None if left_pad is None else _f32(left_pad)
    rules.depthwise_conv1d_causal(_shape(x), _shape(w), None if pad is None else _shape(pad),
                                  return_state)
    if pad is None:
        pad = np.zeros((x.shape[0], w.shape[0] - 1, x.shape[2]), dtype=F32)
    return depthwise_conv1d(np.concatenate([pad, x], axis=1), w, return_state)


# ----------------------------------------------------------------------------- sequence ops


def _sequence_result(out: np.ndarray, state: np.ndarray, return_state: bool
                     ) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """The output, or with `return_state` (output, final state): the op's two results."""
    return (_out(out), _out(state)) if return_state else _out(out)


@_quiet
def selective_scan(x: ArrayLike, delta: ArrayLike, A: ArrayLike, B: ArrayLike, C: ArrayLike,
                   initial_state: ArrayLike | None = None, return_state: bool = False
                   ) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Mamba's selective scan: per step t, state = exp(delta_t·A) ⊙ state +
    (delta_t·x_t) ⊗ B_t and y_t = state · C_t, from `initial_state` [b, h, n] (zeros if
    absent). x, delta [b, s, h], A [h, n], B, C [b, s, n] -> y [b, s, h], or with
    `return_state` (y, the final state [b, h, n])."""
    x, delta, a, b, c = map(_f64, (x, delta, A, B, C))
    init = None if initial_state is None else _f64(initial_state)
    rules.selective_scan(*map(_shape, (x, delta, a, b, c)), None if init is None else _shape(init))
    state = np.zeros(rules.selective_scan_state(_shape(x), _shape(a))) if init is None else init
    y = np.empty_like(x)
    for t in range(x.shape[1]):
        dt = delta[:, t, :, None]                                     # [b, h, 1]
        state = np.exp(dt * a) * state + (dt * x[:, t, :, None]) * b[:, t, None, :]
        y[:, t] = np.einsum("bhn,bn->bh", state, c[:, t])
    return _sequence_result(y, state, return_state)


@_quiet
def gated_delta_net(q: ArrayLike, k: ArrayLike, v: ArrayLike, g: ArrayLike, beta: ArrayLike,
                    initial_state: ArrayLike | None = None, return_state: bool = False
                    ) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """The gated delta rule: per b, head and step t, with S the state [n, m]:
    S = exp(g_t)·S; kv = Sᵀk_t; δ = β_t(v_t − kv); S = S + k_t δᵀ; o_t = Sᵀq_t.
    q, k [b, s, H, n], v [b, s, H, m], g, beta [b, s, H], initial_state [b, H, n, m]
    (zeros if absent) -> out [b, s, H, m], or with `return_state` (out, the final state
    [b, H, n, m])."""
    q, k, v, g, beta = map(_f64, (q, k, v, g, beta))
    init = None if initial_state is None else _f64(initial_state)
    rules.gated_delta_net(*map(_shape, (q, k, v, g, beta)), None if init is None else _shape(init))
    state = np.zeros(rules.gated_delta_net_state(_shape(q), _shape(v))) if init is None else init
    out = np.empty_like(v)
    for t in range(q.shape[1]):
        state = np.exp(g[:, t, :, None, None]) * state                     # [b, H, n, m]
        kv = np.einsum("bhnm,bhn->bhm", state, k[:, t])
        d = beta[:, t, :, None] * (v[:, t] - kv)                            # [b, H, m]
        state = state + k[:, t, :, :, None] * d[:, :, None, :]
        out[:, t] = np.einsum("bhnm,bhn->bhm", state, q[:, t])
    return _sequence_result(out, state, return_state)


@_quiet
def selective_scan_backward(x: ArrayLike, delta: ArrayLike, A: ArrayLike, B: ArrayLike,
                            C: ArrayLike, dy: ArrayLike, d_final_state: ArrayLike,
                            initial_state: ArrayLike | None = None) -> tuple[np.ndarray, ...]:
    """The reverse pass of `selective_scan`: the forward's states are recomputed and kept
    per step (`states` [b, s, h, n], the state before step t), then with the state's
    cotangent dh from `d_final_state`, for t from last to first: dh += dy_t·C_t;
    dC_t = Σ_h dy_t·h_t; dB_t = Σ_h (Δ_t x_t)·dh; du = dh·B_t; dx_t = du·Δ_t;
    dΔ_t = du·x_t + Σ_n dh·h_{t-1}·exp(Δ_t A)·A; dA[b] += Δ_t·dh·h_{t-1}·exp(Δ_t A);
    dh = exp(Δ_t A)⊙dh. -> (dx, d_delta, dA per batch row [b, h, n], dB, dC, states),
    plus d_initial_state (the last dh) when `initial_state` is given."""
    x, delta, a, b, c, dy, d_final = map(_f64, (x, delta, A, B, C, dy, d_final_state))
    init = None if initial_state is None else _f64(initial_state)
    rules.selective_scan_backward(*map(_shape, (x, delta, a, b, c, dy, d_final)),
                                  None if init is None else _shape(init))
    states = np.empty((*x.shape, a.shape[1]))
    state = np.zeros_like(d_final) if init is None else init
    for t in range(x.shape[1]):
        states[:, t] = state
        dt = delta[:, t, :, None]
        state = np.exp(dt * a) * state + (dt * x[:, t, :, None]) * b[:, t, None, :]
    dx, dd, db, dc = (np.zeros_like(v) for v in (x, delta, b, c))
    da = np.zeros((x.shape[0], *a.shape))
    dh = d_final.copy()
    for t in reversed(range(x.shape[1])):
        dt, xt = delta[:, t], x[:, t]                                        # [b, h]
        decay = np.exp(dt[:, :, None] * a)                                   # [b, h, n]
        prev = states[:, t]
        h = decay * prev + (dt * xt)[:, :, None] * b[:, t, None, :]
        dh = dh + dy[:, t, :, None] * c[:, t, None, :]
        dc[:, t] = np.einsum("bhn,bh->bn", h, dy[:, t])
        db[:, t] = np.einsum("bhn,bh->bn", dh, dt * xt)
        du = np.einsum("bhn,bn->bh", dh, b[:, t])
        dx[:, t] = du * dt
        r = dh * prev * decay
        dd[:, t] = du * xt + np.einsum("bhn,hn->bh", r, a)
        da += r * dt[:, :, None]
        dh = dh * decay
    grads = (dx, dd, da, db, dc, states)
    return tuple(map(_out, grads if init is None else (*grads, dh)))


@_quiet
def gated_delta_net_backward(q: ArrayLike, k: ArrayLike, v: ArrayLike, g: ArrayLike,
                             beta: ArrayLike, do: ArrayLike, d_final_state: ArrayLike,
                             initial_state: ArrayLike | None = None) -> tuple[np.ndarray, ...]:
    """The reverse pass of `gated_delta_net`: the forward's states are recomputed and kept
    per step (`states` [b, s, H, n, m], the state before step t); then with the state's
    cotangent dS from `d_final_state`, for t from last to first (S' = exp(g_t)·S_{t-1},
    kv = S'ᵀk, δ = β(v − kv), S_t = S' + kδᵀ): dq = S_t do; dS += q doᵀ; dδ = dSᵀk;
    dk = dS δ + S' dkv with dkv = −β dδ; dv = β dδ; dβ = dδ·(v − kv); dS' = dS + k dkvᵀ;
    dg = Σ S'⊙dS'; dS = exp(g_t)·dS'. -> (dq, dk, dv, dg, dbeta, states), plus
    d_initial_state (the last dS) when `initial_state` is given."""
    q, k, v, g, beta, do, d_final = map(_f64, (q, k, v, g, beta, do, d_final_state))
    init = None if initial_state is None else _f64(initial_state)
    rules.gated_delta_net_backward(*map(_shape, (q, k, v, g, beta, do, d_final)),
                                   None if init is None else _shape(init))
    states = np.empty((*q.shape, v.shape[3]))
    state = np.zeros_like(d_final) if init is None else init
    for t in range(q.shape[1]):
        states[:, t] = state
        state = np.exp(g[:, t, :, None, None]) * state
        d = beta[:, t, :, None] * (v[:, t] - np.einsum("bhnm,bhn->bhm", state, k[:, t]))
        state = state + k[:, t, :, :, None] * d[:, :, None, :]
    dq, dk, dv, dg, dbeta = (np.zeros_like(a) for a in (q, k, v, g, beta))
    ds = d_final.copy()
    for t in reversed(range(q.shape[1])):
        kt, qt, dot = k[:, t], q[:, t], do[:, t]
        bt = beta[:, t, :, None]
        decay = np.exp(g[:, t, :, None, None])
        decayed = decay * states[:, t]                                        # S'
        diff = v[:, t] - np.einsum("bhnm,bhn->bhm", decayed, kt)
        delta = bt * diff
        dq[:, t] = np.einsum("bhnm,bhm->bhn", decayed + kt[..., None] * delta[:, :, None, :], dot)
        ds = ds + qt[..., None] * dot[:, :, None, :]
        d_delta = np.einsum("bhnm,bhn->bhm", ds, kt)
        dbeta[:, t] = (d_delta * diff).sum(-1)
        dv[:, t] = bt * d_delta
        dkv = -bt * d_delta
        dk[:, t] = (np.einsum("bhnm,bhm->bhn", ds, delta)
                    + np.einsum("bhnm,bhm->bhn", decayed, dkv))
        ds = ds + kt[..., None] * dkv[:, :, None, :]                          # dS'
        dg[:, t] = (decayed * ds).sum((-2, -1))
        ds = decay * ds
    grads = (dq, dk, dv, dg, dbeta, states)
    return tuple(map(_out, grads if init is None else (*grads, ds)))


@_quiet
def qwen35_mtp_head(*, num_heads: int, num_kv_heads: int, head_dim: int, n_rot: int,
                    eps: float = 1e-6, schemes: dict[str, str] | None = None,
                    activations: str = "f32", **operands: ArrayLike | None) -> np.ndarray:
    """The Qwen3.5 multi-token-prediction head (docs/semantics.md), operands by name (those
    of `hir.qwen35_mtp_head`) -> logits [B, V]: h = rms_norm(h_pre_norm, hnorm),
    e = rms_norm(embed_w[input_ids], enorm), cur = concat(e, h) @ eh_w, a gated causal
    attention block with per-head q/k norms and partial half rope, a SwiGLU FFN, then the
    row last_token_idx[b] of each batch, rms_norm(head_norm) @ lm_head_w. A matrix named
    in `schemes` holds raw GGUF rows: its products are `dequant_matmul`s (`activations`
    for the block-quantized schemes), the embedding a `dequant_gather`."""
    o = operands
    raw = dict(schemes or {})
    _check_name("activations", activations, QUANT_ACTIVATIONS)
    rules.qwen35_mtp_head(num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim,
                          n_rot=n_rot, schemes=raw,
                          **{k: None if v is None else _shape(np.asarray(v)) for k, v in o.items()})
    batch, steps, _ = np.shape(o["h_pre_norm"])
    idx = np.asarray(o["last_token_idx"])
    if np.any((idx < 0) | (idx >= steps)):
        raise ArgumentError(f"last_token_idx: expected values in [0, {steps}), got {idx.tolist()}")

    def norm(x, name):
        return rms_norm(x, o[f"{name}_w"], o[f"{name}_b"], eps)

    def per_head(x, name, heads):
        shaped = x.reshape(batch, steps, heads, head_dim)
        return norm(shaped, name).reshape(batch, steps, heads * head_dim)

    def project(x, name):
        scheme = raw.get(name)
        if scheme is None:
            return matmul(x, o[name])
        form = activations if scheme in quants.VEC_DOT_TYPES else "f32"
        return dequant_matmul(x, o[name], scheme, form)

    h = norm(o["h_pre_norm"], "hnorm")
    table = (embedding(o["embed_w"], o["input_ids"]) if "embed_w" not in raw
             else dequant_gather(o["embed_w"], o["input_ids"], raw["embed_w"]))
    e = norm(table, "enorm")
    cur = project(np.concatenate([e, h], axis=-1), "eh_w")
    a = norm(cur, "attn_norm")
    q_gate = project(a, "q_gate_w").reshape(batch, steps, num_heads, 2 * head_dim)
    q = per_head(q_gate[..., :head_dim], "q_norm", num_heads)
    gate = q_gate[..., head_dim:].reshape(batch, steps, num_heads * head_dim)
    k = per_head(project(a, "k_w"), "k_norm", num_kv_heads)
    v = project(a, "v_w")
    q = rope(q, o["cos"], o["sin"], head_dim, n_rot)
    k = rope(k, o["cos"], o["sin"], head_dim, n_rot)
    att = attention(q, k, v, num_heads=num_heads, head_dim=head_dim, num_kv_heads=num_kv_heads,
                    mask_kind="causal")
    cur = _out(_f64(cur) + _f64(project(_out(_f64(att) * _f64(sigmoid(gate))), "o_w")))
    post = norm(cur, "post_norm")
    ffn = mul(silu(project(post, "gate_w")), project(post, "up_w"))
    cur = _out(_f64(cur) + _f64(project(ffn, "down_w")))
    last = cur[np.arange(batch), idx]
    return project(norm(last, "head_norm"), "lm_head_w")



# ----------------------------------------------------------------------------- sampling
# NaN policy of argmax and top_k: a NaN is larger than every number (numpy's argmax picks the
# first NaN); equal values rank by the lower index.


def argmax(input: ArrayLike) -> np.ndarray:
    """The index (int32) of the largest value along the last axis; ties to the lower index,
    the first NaN if any."""
    x = _data(input).astype(F32)
    rules.argmax(_shape(x))
    return np.argmax(x, axis=-1).astype(np.int32)


def top_k(input: ArrayLike, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(values f32, indices int32) [..., k]: the k largest values along the last axis,
    sorted descending, equal values by the lower index, NaNs first."""
    x = _data(input).astype(F32)
    rules.top_k(_shape(x), k)
    nan = np.isnan(x)
    index = np.broadcast_to(np.arange(x.shape[-1]), x.shape)
    # np.lexsort's last key is the primary one: NaNs first, then descending, then index.
    order = np.lexsort((index, -np.where(nan, 0, x), ~nan), axis=-1)[..., :k]
    return np.take_along_axis(x, order, -1), order.astype(np.int32)


def order_key(x: np.ndarray) -> np.ndarray:
    """The uint32 key of each float32 that orders as the floats do (-inf < ... < -0 < +0 <
    ... < +inf): the sign bit flipped for positives, every bit for negatives."""
    bits = np.asarray(x, F32).view(np.uint32)
    return np.where(bits >> 31, ~bits, bits | np.uint32(0x80000000)).astype(np.uint32)


def _largest_key(predicate: Callable[[np.uint32], bool]) -> np.uint32:
    """The largest uint32 t with predicate(t) (true at 0, monotone): 32 bisection steps,
    as the kernel searches its thresholds."""
    t = 0
    for bit in range(31, -1, -1):
        if predicate(np.uint32(t | 1 << bit)):
            t |= 1 << bit
    return np.uint32(t)


def _seq_sum(w: np.ndarray) -> float:
    """The float64 sum in index order (the kernel's order)."""
    return float(np.cumsum(w)[-1]) if w.size else 0.0


def _sample_row(x: np.ndarray, temperature: float, top_k: int, top_p: float,
                u: np.float32) -> int:
    best = int(np.argmax(x))
    if not temperature > 0:
        return best
    n = x.size
    key = order_key(x)
    kept = np.ones(n, bool)
    if 0 < top_k < n:  # the k largest; equal values at the threshold by the lower index
        tk = _largest_key(lambda t: int(np.count_nonzero(key >= t)) >= top_k)
        ties = key == tk
        rank = np.cumsum(ties) - 1
        kept = (key > tk) | (ties & (rank < top_k - int(np.count_nonzero(key > tk))))
    m = x[best]
    w = np.where(kept, np.exp(x - m), F32(0)).astype(np.float64)
    if top_p < 1:  # the most likely kept tokens whose mass (of the kept ones) reaches p
        target = float(top_p) * _seq_sum(w)
        vp = _largest_key(lambda t: _seq_sum(np.where(key >= t, w, 0.0)) >= target)
        above = _seq_sum(np.where(key > vp, w, 0.0))
        ties = np.where(kept & (key == vp), w, 0.0)
        before = np.cumsum(np.concatenate([[above], ties]))[:-1]  # sequential from above
        kept = kept & ((key > vp) | ((key == vp) & (before < target)))
    scaled = ((x - m) / F32(temperature)).astype(F32)
    q = np.where(kept, np.exp(scaled), F32(0)).astype(np.float64)
    cumulative = np.cumsum(q)
    target = float(u) * float(cumulative[-1])
    hit = np.flatnonzero(kept & (cumulative > target))
    if hit.size:
        return int(hit[0])
    return int(np.flatnonzero(kept)[-1]) if kept.any() else best


def sample(logits: ArrayLike, temperature: ArrayLike, top_k: ArrayLike, top_p: ArrayLike,
           seed: ArrayLike, position: int | None = None,
           row_positions: ArrayLike | None = None) -> np.ndarray:
    """One token id (int32) per row of `logits` [..., V] (docs/modules.md "Sampling ops"):
    the argmax when temperature <= 0; else top-k (k <= 0 or >= V keeps all), then top-p
    on the softmax of the raw logits of the kept tokens (p >= 1 keeps all), then the
    softmax at the temperature, drawn in index order with the uniform of
    `philox.row_uniform` (keyed by the seed, counted by row and `position`; with
    `row_positions`, row r counted as row 0 at row_positions[r]). Each parameter is rank-0
    or, for logits [R, V], one per row [R]."""
    from rlx_mlir.core import philox

    x = _data(logits).astype(F32)
    params = [np.asarray(a) for a in (temperature, top_k, top_p, seed)]
    rules.sample(_shape(x), *(_shape(a) for a in params),
                 row_positions=None if row_positions is None else _shape(np.asarray(row_positions)))
    rows = x.reshape(-1, x.shape[-1])
    n = rows.shape[0]
    t, k, p, seeds = (np.broadcast_to(a.astype(dtype), (n,)) for a, dtype in
                      zip(params, (F32, np.int64, F32, np.int64), strict=True))
    if row_positions is None:
        u = philox.row_uniform(seeds, np.arange(n), int(position or 0))
    else:
        u = philox.row_uniform(seeds, 0, np.asarray(row_positions, np.int64))
    with np.errstate(invalid="ignore"):  # a row of -inf only: NaN weights (its last id)
        ids = [_sample_row(row, float(t[r]), int(k[r]), float(p[r]), u[r])
               for r, row in enumerate(rows)]
    return np.array(ids, np.int32).reshape(x.shape[:-1])


def shared_input_matmul(x: ArrayLike, weights: list[ArrayLike], scheme: str | None = None,
                        activations: str = "f32", *, norm_weight: ArrayLike | None = None,
                        norm_eps: float = 1e-5, glu: str | None = None,
                        rope_cos: ArrayLike | None = None, rope_sin: ArrayLike | None = None,
                        rope_products: Sequence[int] = (), rope_head_dim: int = 0,
                        rope_n_rot: int = 0, rope_style: str = "interleaved",
                        caches: Sequence[ArrayLike] | None = None, position: int | None = None,
                        cache_products: Sequence[int] = (), residual: ArrayLike | None = None,
                        residual_norm_weight: ArrayLike | None = None,
                        residual_eps: float = 1e-5) -> tuple[np.ndarray, ...]:
    """One result per weight: x @ w_i (f32 weights [K, N_i], as `matmul`) or, with a
    `scheme`, x @ dequant(w_i)ᵀ (raw GGUF blocks, as `dequant_matmul`, same `activations`).
    A `norm_weight` [K] (q8 only) replaces x by `rms_norm(x, norm_weight, eps=norm_eps)`.
    `glu` (an activation of `ACTIVATIONS`; q8, two weights of one N): the first result is
    glu(p_0) * p_1, a gated linear unit (SwiGLU: silu). The products in `rope_products`
    (q8) are then `rope(p_i, rope_cos, rope_sin, rope_head_dim, rope_n_rot, rope_style)`;
    with `caches`, the products in `cache_products` (q8) are
    `insert_rows(p_i, caches[j], position)`; without (an lir kernel, which writes the
    caches in place itself), those products are returned as rows. A `residual` (q8, with
    a norm_weight) first replaces x by s = residual + rms_norm(x, residual_norm_weight,
    eps=residual_eps), and s is one more result, last."""
    summed = None
    if residual is not None:
        if activations != "q8" or norm_weight is None or residual_norm_weight is None:
            raise ArgumentError(f"residual: needs activations 'q8', a residual_norm_weight and "
                                f"a norm_weight, got activations {activations!r}")
        rules.shared_input_matmul(_shape(_f32(x)), [_shape(np.asarray(w)) for w in weights],
                                  scheme, _shape(np.asarray(norm_weight)),
                                  residual=_shape(_f32(residual)),
                                  residual_norm_weight=_shape(np.asarray(residual_norm_weight)))
        summed = add(residual, rms_norm(x, residual_norm_weight, eps=residual_eps))
        x = summed
    products = _shared_products(x, weights, scheme, activations, norm_weight, norm_eps, glu)
    if rope_products or cache_products:
        if activations != "q8":
            raise ArgumentError(f"rope_products, cache_products: need activations 'q8', got "
                                f"activations {activations!r}")
        products = list(products)
        for i in rope_products:
            products[i] = rope(products[i], rope_cos, rope_sin, rope_head_dim, rope_n_rot,
                               rope_style)
        for j, i in enumerate(cache_products if caches is not None else ()):
            products[i] = insert_rows(products[i], caches[j], position)
    return (*products, *(() if summed is None else (summed,)))


def _shared_products(x: ArrayLike, weights: list[ArrayLike], scheme: str | None,
                     activations: str, norm_weight: ArrayLike | None, norm_eps: float,
                     glu: str | None) -> tuple[np.ndarray, ...]:
    """`shared_input_matmul` before its rope and cache edges."""
    rules.shared_input_matmul(_shape(_f32(x)), [_shape(np.asarray(w)) for w in weights], scheme,
                              None if norm_weight is None else _shape(np.asarray(norm_weight)))
    if norm_weight is not None:
        if activations != "q8":
            raise ArgumentError("norm_weight: needs activations 'q8' (the q8 kernels' "
                                f"prologue), got activations {activations!r}")
        x = rms_norm(x, norm_weight, eps=norm_eps)
    if scheme is None:
        products = tuple(matmul(x, w) for w in weights)
    else:
        products = tuple(dequant_matmul(x, w, scheme, activations) for w in weights)
    if glu is None:
        return products
    if activations != "q8" or len(products) != 2 or products[0].shape != products[1].shape:
        raise ArgumentError(f"glu: needs activations 'q8' and two weights of one N, got "
                            f"activations {activations!r} and {len(products)} products of shapes "
                            f"{[p.shape for p in products]}")
    gate, up = products
    return _out(_act64(glu, _f64(gate)) * _f64(up)), up


def shared_linear_pair(x: ArrayLike, w_first: ArrayLike, w_second: ArrayLike
                       ) -> tuple[np.ndarray, np.ndarray]:
    """(x @ w_first, x @ w_second): `shared_input_matmul` of two f32 weights."""
    first, second = shared_input_matmul(x, [w_first, w_second])
    return first, second


__all__ = [
    "ACTIVATIONS", "BINARY_OPS", "DEQUANTIZE", "DEQUANT_SCHEMES", "ELEMENTWISE", "MASK_KINDS", "QUANTIZE",
    "QUANT_SCHEMES", "REDUCE_KINDS", "ROPE_STYLES", "UNARY_OPS",
    "absolute", "activation", "add", "argmax", "sample", "top_k", "attention", "broadcast_to", "concat", "depthwise_conv1d",
    "depthwise_conv1d_causal", "dequant_gather", "dequant_matmul", "dequantize_q4_0", "dequantize_q8_0", "div",
    "embedding", "exp", "fused_matmul", "gather", "gated_delta_net", "gelu", "gelu_tanh", "layer_norm", "linear",
    "llama_decoder_block", "log", "matmul", "maximum", "minimum", "mul", "narrow", "neg",
    "power", "quantize_q4_0", "qwen35_mtp_head", "quantize_q8_0", "reduce", "relu", "reshape", "residual_rms_norm",
    "rms_norm", "rope", "rsqrt", "selective_scan", "selective_scan_backward", "gated_delta_net_backward", "shared_input_matmul", "shared_linear_pair", "sigmoid", "silu", "softmax", "sqrt", "sub", "swiglu_ffn",
    "tanh", "transpose",
]
