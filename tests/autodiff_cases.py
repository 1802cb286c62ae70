"""Gradient-check cases shared by tests/test_autodiff.py (central differences in float64
on the reference executor) and tests/test_autodiff_torch.py (torch.autograd).

A case is one op (or a small composition) on its own inputs. The cases of a family are
built into ONE graph (one compile): each case's result y is weighed by a random input
`<case>__ct` of y's shape and summed, and the loss is the sum over the cases; since the
cases share no inputs, the gradient of the loss with respect to a case's input is the
gradient of that case alone (`<case>__ct` is its cotangent).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import rlx_mlir as rlx

Build = Callable[..., rlx.Value]
"""build(g, *inputs) -> the case's result."""
TorchFn = Callable[..., Any]
"""torch_fn(torch, *tensors) -> the same result computed by torch."""


@dataclass(frozen=True)
class Case:
    name: str
    shapes: Sequence[tuple[int, ...]]
    build: Build
    torch: TorchFn
    data: Callable[[np.random.Generator, tuple[int, ...], int], np.ndarray] | None = None
    """data(rng, shape, i) -> input i (default: standard normal)."""
    wrt: Sequence[int] | None = None
    """The inputs differentiated (default: all)."""
    tol: dict[str, float] = field(default_factory=dict)

    def arrays(self, rng: np.random.Generator) -> list[np.ndarray]:
        make = self.data or (lambda r, s, i: r.standard_normal(s))
        return [np.asarray(make(rng, tuple(s), i), dtype=np.float32)
                for i, s in enumerate(self.shapes)]

    def differentiated(self) -> list[int]:
        return list(range(len(self.shapes))) if self.wrt is None else list(self.wrt)


def positive(rng: np.random.Generator, shape: tuple[int, ...], i: int) -> np.ndarray:
    return rng.uniform(0.5, 2.0, shape)


def with_zeros(rng: np.random.Generator, shape: tuple[int, ...], i: int) -> np.ndarray:
    """Normal values with every third one exactly 0 (the non-smooth point)."""
    x = rng.standard_normal(shape)
    x.reshape(-1)[::3] = 0.0
    return x


def ties(rng: np.random.Generator, shape: tuple[int, ...], i: int) -> np.ndarray:
    """Values from a small set, so maxima tie (reduce max/min, maximum/minimum)."""
    return rng.integers(-2, 3, shape).astype(np.float64)


def rounded(rng: np.random.Generator, shape: tuple[int, ...], i: int) -> np.ndarray:
    """Values that round to a grid of 1/4, so that two operands tie here and there."""
    return np.round(rng.standard_normal(shape) * 4) / 4


def _all_axes(y: rlx.Value) -> tuple[int, ...]:
    return tuple(range(y.rank))


@dataclass
class Family:
    """The cases of one graph: built, compiled or referenced once."""

    cases: Sequence[Case]
    seed: int = 0

    def __post_init__(self) -> None:
        rng = np.random.default_rng(self.seed)
        self.arrays: dict[str, np.ndarray] = {}
        for case in self.cases:
            for i, a in enumerate(case.arrays(rng)):
                self.arrays[f"{case.name}__{i}"] = a
        self._rng = rng

    def wrt(self) -> list[str]:
        return [f"{c.name}__{i}" for c in self.cases for i in c.differentiated()]

    def loss_graph(self) -> tuple[rlx.Graph, rlx.Value]:
        """The graph whose output is the weighted sum over the cases."""
        g = rlx.Graph("cases")
        loss = None
        for case in self.cases:
            inputs = [g.input(f"{case.name}__{i}", s) for i, s in enumerate(case.shapes)]
            y = case.build(g, *inputs)
            ct = g.input(f"{case.name}__ct", y.shape)
            if f"{case.name}__ct" not in self.arrays:
                self.arrays[f"{case.name}__ct"] = self._rng.standard_normal(y.shape).astype(
                    np.float32)
            term = g.mul(y, ct)
            term = g.reduce_sum(term, _all_axes(term)) if term.rank else term
            loss = term if loss is None else g.add(loss, term)
        assert loss is not None
        g.output(loss)
        return g, loss

    def grad_graph(self) -> rlx.Graph:
        g, loss = self.loss_graph()
        return rlx.grad(g, loss, self.wrt())

    def split(self, grads: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        """The gradients (outputs after the loss) by input name."""
        return dict(zip(self.wrt(), grads, strict=True))


def _rope(g: rlx.Graph, x: rlx.Value, cos: rlx.Value, sin: rlx.Value) -> rlx.Value:
    """HF rotate-half rope of x [..., D] from primitives (cos/sin [S, D/2])."""
    half = x.shape[-1] // 2
    x1, x2 = g.narrow(x, -1, 0, half), g.narrow(x, -1, half, half)
    return g.concat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def _torch_rope(t: Any, x: Any, cos: Any, sin: Any) -> Any:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return t.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


# ----------------------------------------------------------------------------- elementwise

ELEMENTWISE: list[Case] = [
    Case("neg", [(5, 17)], lambda g, x: -x, lambda t, x: -x),
    Case("exp", [(5, 17)], lambda g, x: g.exp(x), lambda t, x: t.exp(x)),
    Case("log", [(33,)], lambda g, x: g.log(x), lambda t, x: t.log(x), positive),
    Case("sqrt", [(5, 17)], lambda g, x: g.sqrt(x), lambda t, x: t.sqrt(x), positive),
    Case("rsqrt", [(17,)], lambda g, x: g.rsqrt(x), lambda t, x: t.rsqrt(x), positive),
    Case("tanh", [(5, 17)], lambda g, x: g.tanh(x), lambda t, x: t.tanh(x)),
    Case("sigmoid", [(5, 17)], lambda g, x: g.sigmoid(x), lambda t, x: t.sigmoid(x)),
    Case("silu", [(33,)], lambda g, x: g.silu(x), lambda t, x: t.nn.functional.silu(x)),
    Case("gelu", [(5, 17)], lambda g, x: g.gelu(x), lambda t, x: t.nn.functional.gelu(x)),
    Case("gelu_tanh", [(5, 17)], lambda g, x: g.gelu_tanh(x),
         lambda t, x: t.nn.functional.gelu(x, approximate="tanh")),
    Case("relu", [(5, 17)], lambda g, x: g.relu(x), lambda t, x: t.relu(x), with_zeros),
    Case("abs", [(5, 17)], lambda g, x: g.abs(x), lambda t, x: t.abs(x), with_zeros),
    Case("softplus", [(5, 17)], lambda g, x: g.softplus(x * 10.0),
         lambda t, x: t.nn.functional.softplus(x * 10.0)),
    Case("add_bcast", [(5, 17), (17,)], lambda g, a, b: a + b, lambda t, a, b: a + b),
    Case("sub_bcast", [(3, 1, 5), (4, 5)], lambda g, a, b: a - b, lambda t, a, b: a - b),
    Case("mul_bcast", [(5, 1), (1, 17)], lambda g, a, b: a * b, lambda t, a, b: a * b),
    Case("mul_rank0", [(), (5, 17)], lambda g, a, b: a * b, lambda t, a, b: a * b),
    Case("div_bcast", [(5, 17), (17,)], lambda g, a, b: a / b, lambda t, a, b: a / b,
         lambda r, s, i: r.standard_normal(s) if i == 0 else r.uniform(0.5, 2.0, s)),
    Case("maximum", [(5, 17), (5, 17)], lambda g, a, b: g.maximum(a, b),
         lambda t, a, b: t.maximum(a, b), rounded),
    Case("minimum_bcast", [(33,), (1,)], lambda g, a, b: g.minimum(a, b),
         lambda t, a, b: t.minimum(a, b)),
    Case("pow", [(5, 17), (17,)], lambda g, a, b: a ** b, lambda t, a, b: a ** b,
         lambda r, s, i: r.uniform(0.5, 2.0, s) if i == 0 else r.uniform(-2.0, 2.0, s)),
    Case("scalar_ops", [(5, 17)], lambda g, x: (2.0 - x) * 3.0 / (x * x + 1.0),
         lambda t, x: (2.0 - x) * 3.0 / (x * x + 1.0)),
]
"""Every unary and binary elementwise op; broadcasting, rank-0 and size-1 axes."""

# ----------------------------------------------------------------------------- linalg etc.

LINALG: list[Case] = [
    Case("matmul", [(5, 17), (17, 33)], lambda g, a, b: a @ b, lambda t, a, b: a @ b),
    Case("matmul_batched_w", [(2, 5, 17), (17, 3)], lambda g, a, b: a @ b,
         lambda t, a, b: a @ b),
    Case("matmul_bcast_batch", [(2, 1, 5, 4), (3, 4, 6)], lambda g, a, b: a @ b,
         lambda t, a, b: a @ b),
    Case("matmul_vec_lhs", [(17,), (17, 5)], lambda g, a, b: a @ b, lambda t, a, b: a @ b),
    Case("matmul_vec_rhs", [(5, 17), (17,)], lambda g, a, b: a @ b, lambda t, a, b: a @ b),
    Case("linear_bias_gelu", [(5, 17), (17, 33), (33,)],
         lambda g, x, w, b: g.linear(x, w, b, activation="gelu"),
         lambda t, x, w, b: t.nn.functional.gelu(x @ w + b)),
    Case("linear_fused_silu", [(2, 5, 17), (17, 5), (5,)],
         lambda g, x, w, b: g.linear_fused(x, w, b, activation="silu"),
         lambda t, x, w, b: t.nn.functional.silu(x @ w + b)),
    Case("linear_fused_sigmoid", [(5, 17), (17, 3)],
         lambda g, x, w: g.linear_fused(x, w, activation="sigmoid"),
         lambda t, x, w: t.sigmoid(x @ w)),
    Case("shared_linear_pair", [(5, 17), (17, 4), (17, 6)],
         lambda g, x, a, b: g.concat(list(g.shared_linear_pair(x, a, b)), -1),
         lambda t, x, a, b: t.cat([x @ a, x @ b], -1)),
    Case("swiglu_ffn", [(5, 8), (8, 17), (8, 17), (17, 8)],
         lambda g, x, u, gt, d: g.swiglu_ffn(x, u, gt, d),
         lambda t, x, u, gt, d: (t.nn.functional.silu(x @ gt) * (x @ u)) @ d),
    Case("reduce_sum", [(5, 17)], lambda g, x: g.reduce_sum(x, 1), lambda t, x: x.sum(1)),
    Case("reduce_sum_keep", [(3, 5, 4)], lambda g, x: g.reduce_sum(x, (0, 2), keepdim=True),
         lambda t, x: x.sum((0, 2), keepdim=True)),
    Case("reduce_mean_all", [(5, 17)], lambda g, x: g.reduce_mean(x, (0, 1)),
         lambda t, x: x.mean()),
    Case("reduce_max_ties", [(5, 17)], lambda g, x: g.reduce_max(x, 1),
         lambda t, x: t.amax(x, 1), ties),
    Case("reduce_min_keep", [(5, 33)], lambda g, x: g.reduce_min(x, 0, keepdim=True),
         lambda t, x: t.amin(x, 0, keepdim=True)),
    Case("softmax", [(5, 17)], lambda g, x: g.softmax(x), lambda t, x: t.softmax(x, -1)),
    Case("softmax_axis0", [(5, 3, 4)], lambda g, x: g.softmax(x, 0),
         lambda t, x: t.softmax(x, 0)),
    Case("rms_norm", [(5, 17), (17,)], lambda g, x, w: g.rms_norm(x, w, eps=1e-5),
         lambda t, x, w: x * t.rsqrt((x * x).mean(-1, keepdim=True) + 1e-5) * w),
    Case("rms_norm_beta", [(2, 3, 33), (33,), (33,)],
         lambda g, x, w, b: g.rms_norm(x, w, b, eps=1e-5),
         lambda t, x, w, b: x * t.rsqrt((x * x).mean(-1, keepdim=True) + 1e-5) * w + b),
    Case("residual_rms_norm", [(5, 17), (5, 17), (17,)],
         lambda g, x, r, w: g.residual_rms_norm(x, r, w, eps=1e-5),
         lambda t, x, r, w: (x + r) * t.rsqrt(((x + r) ** 2).mean(-1, keepdim=True) + 1e-5) * w),
    Case("layer_norm", [(5, 17), (17,), (17,)], lambda g, x, w, b: g.layer_norm(x, w, b),
         lambda t, x, w, b: t.nn.functional.layer_norm(x, (17,), w, b, eps=1e-5)),
    Case("transpose", [(2, 5, 3)], lambda g, x: g.transpose(x, (2, 0, 1)),
         lambda t, x: x.permute(2, 0, 1)),
    Case("reshape", [(5, 6)], lambda g, x: g.reshape(x, (3, 10)) * 2.0,
         lambda t, x: x.reshape(3, 10) * 2.0),
    Case("narrow", [(5, 17)], lambda g, x: g.narrow(x, 1, 3, 9), lambda t, x: x[:, 3:12]),
    Case("narrow_edge", [(5, 17)], lambda g, x: g.narrow(x, 0, 0, 2), lambda t, x: x[:2]),
    Case("concat", [(5, 3), (5, 1), (5, 4)], lambda g, a, b, c: g.concat([a, b, c], 1),
         lambda t, a, b, c: t.cat([a, b, c], 1)),
    Case("broadcast_to", [(1, 17)], lambda g, x: g.broadcast_to(x, (3, 5, 17)),
         lambda t, x: x.expand(3, 5, 17)),
    Case("constant", [(5,)], lambda g, x: x * g.constant(np.arange(5, dtype=np.float32)),
         lambda t, x: x * t.arange(5, dtype=t.float32)),
]
"""matmul (1-D, batched, broadcast batch), fused and hir linears, reductions, norms,
data movement."""


# ----------------------------------------------------------------------------- blocks


def swiglu(g: rlx.Graph, x: rlx.Value, gate: rlx.Value, up: rlx.Value, down: rlx.Value
           ) -> rlx.Value:
    return (g.silu(x @ gate) * (x @ up)) @ down


def torch_swiglu(t: Any, x: Any, gate: Any, up: Any, down: Any) -> Any:
    return (t.nn.functional.silu(x @ gate) * (x @ up)) @ down


SEQ, DIM, HEADS, HEAD_DIM, HIDDEN = 5, 16, 2, 8, 24


def _causal(seq: int) -> np.ndarray:
    return np.triu(np.full((seq, seq), -1e9, dtype=np.float32), 1)


def _tables(seq: int, head_dim: int) -> tuple[np.ndarray, np.ndarray]:
    inv = 1.0 / 10000 ** (np.arange(0, head_dim, 2) / head_dim)
    angles = np.outer(np.arange(seq), inv)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def llama_block(g: rlx.Graph, x: rlx.Value, ln1: rlx.Value, wq: rlx.Value, wk: rlx.Value,
                wv: rlx.Value, wo: rlx.Value, ln2: rlx.Value, gate: rlx.Value, up: rlx.Value,
                down: rlx.Value) -> rlx.Value:
    """A pre-norm Llama decoder block of primitives: rms_norm, q/k/v matmuls, rope,
    causal softmax attention per head, o projection, residual, rms_norm, SwiGLU FFN."""
    cos_np, sin_np = _tables(SEQ, HEAD_DIM)
    cos, sin = g.constant(cos_np), g.constant(sin_np)
    a = g.rms_norm(x, ln1, eps=1e-5)

    def heads(v: rlx.Value) -> rlx.Value:  # [S, H*D] -> [H, S, D]
        return g.transpose(g.reshape(v, (SEQ, HEADS, HEAD_DIM)), (1, 0, 2))

    q, k, v = heads(a @ wq), heads(a @ wk), heads(a @ wv)
    q, k = _rope(g, q, cos, sin), _rope(g, k, cos, sin)
    scores = q @ g.transpose(k, (0, 2, 1)) * (1.0 / HEAD_DIM ** 0.5) + g.constant(_causal(SEQ))
    att = g.softmax(scores) @ v
    att = g.reshape(g.transpose(att, (1, 0, 2)), (SEQ, HEADS * HEAD_DIM))
    h = x + att @ wo
    return h + swiglu(g, g.rms_norm(h, ln2, eps=1e-5), gate, up, down)


def torch_llama_block(t: Any, x: Any, ln1: Any, wq: Any, wk: Any, wv: Any, wo: Any, ln2: Any,
                      gate: Any, up: Any, down: Any) -> Any:
    cos_np, sin_np = _tables(SEQ, HEAD_DIM)
    cos, sin = t.tensor(cos_np), t.tensor(sin_np)

    def rms(v: Any, w: Any) -> Any:
        return v * t.rsqrt((v * v).mean(-1, keepdim=True) + 1e-5) * w

    def heads(v: Any) -> Any:
        return v.reshape(SEQ, HEADS, HEAD_DIM).permute(1, 0, 2)

    a = rms(x, ln1)
    q, k, v = heads(a @ wq), heads(a @ wk), heads(a @ wv)
    q, k = _torch_rope(t, q, cos, sin), _torch_rope(t, k, cos, sin)
    scores = q @ k.permute(0, 2, 1) * (1.0 / HEAD_DIM ** 0.5) + t.tensor(_causal(SEQ))
    att = (t.softmax(scores, -1) @ v).permute(1, 0, 2).reshape(SEQ, HEADS * HEAD_DIM)
    h = x + att @ wo
    return h + torch_swiglu(t, rms(h, ln2), gate, up, down)


def _scaled(rng: np.random.Generator, shape: tuple[int, ...], i: int) -> np.ndarray:
    """Weights of scale 1/sqrt(fan-in); norm gains near 1; x normal."""
    if len(shape) == 1:
        return 1.0 + 0.1 * rng.standard_normal(shape)
    if i == 0:
        return rng.standard_normal(shape)
    return rng.standard_normal(shape) / np.sqrt(shape[0])


BLOCKS: list[Case] = [
    Case("swiglu_ffn_block", [(SEQ, DIM), (DIM, HIDDEN), (DIM, HIDDEN), (HIDDEN, DIM)],
         swiglu, torch_swiglu, _scaled),
    Case("llama_block", [(SEQ, DIM), (DIM,), (DIM, HEADS * HEAD_DIM), (DIM, HEADS * HEAD_DIM),
                         (DIM, HEADS * HEAD_DIM), (HEADS * HEAD_DIM, DIM), (DIM,),
                         (DIM, HIDDEN), (DIM, HIDDEN), (HIDDEN, DIM)],
         llama_block, torch_llama_block, _scaled),
]
"""Whole blocks of primitives (mir.attention and mir.rope have rules of another family)."""
