"""The workloads of issue 5's anchors table: shapes, data, the rlx graph and the numpy version.

Every workload is float32. Weights are params (bound at `rlx.jit` time, initializers in
onnxruntime, captured constants in numpy and torch); activations are inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Arrays = dict[str, np.ndarray]


@dataclass(frozen=True)
class Workload:
    name: str
    kind: str
    """matmul | ffn | llama | silu_mul_add | rms_norm | overhead"""
    label: str
    dims: dict[str, int] = field(default_factory=dict)
    quick: bool = True
    """Part of --quick."""
    anchor: str = ""
    """Issue 5's anchor for this workload (best peer, 2 threads | 1 thread)."""
    extra: bool = False
    """Not in the anchors table (reported, no goal)."""

    @property
    def flops(self) -> float | None:
        d = self.dims
        if self.kind == "matmul":
            return 2.0 * d["m"] * d["k"] * d["n"]
        if self.kind == "ffn":
            return 6.0 * d["tokens"] * d["d_model"] * d["d_ff"]
        if self.kind == "llama":
            s, dm, h, hkv, hd, ff = (d["seq"], d["d_model"], d["heads"], d["kv_heads"],
                                     d["head_dim"], d["d_ff"])
            proj = 2.0 * s * dm * (h * hd) * 2 + 2.0 * s * dm * (hkv * hd) * 2  # q, o; k, v
            attn = 4.0 * h * s * s * hd  # q·kᵀ and p·v over the full (unmasked) S×S
            return proj + attn + 6.0 * s * dm * ff
        return None

    @property
    def bytes(self) -> float | None:
        """Bytes that must move through memory at least once per call."""
        d = self.dims
        if self.kind == "matmul":
            return 4.0 * (d["m"] * d["k"] + d["k"] * d["n"] + d["m"] * d["n"])
        if self.kind == "silu_mul_add":
            return 4.0 * 4 * d["n"]  # read x, z, w; write the result
        if self.kind == "rms_norm":
            return 4.0 * 2 * d["rows"] * d["cols"]  # read x, write the result
        return None

    @property
    def memory_bound(self) -> bool:
        return self.kind in ("silu_mul_add", "rms_norm") or (
            self.kind == "matmul" and self.dims["m"] <= 16)


LLAMA = dict(d_model=512, heads=8, kv_heads=2, head_dim=64, d_ff=1408)
EPS = 1e-5


def _all() -> list[Workload]:
    ws = []
    for n, quick, anchor in ((512, True, ""),
                             (1024, True, "7.8 ms · 275 GF/s (numpy) | 17.7 ms · 121 GF/s (torch)"),
                             (2048, False, "62 ms · 277 GF/s (numpy) | 128 ms · 135 GF/s (torch)")):
        ws.append(Workload(f"sgemm_{n}", "matmul", f"sgemm N={n}", dict(m=n, k=n, n=n), quick, anchor))
    ws.append(Workload("decode_m1", "matmul", "matmul M=1 K=N=2048 (decode)",
                       dict(m=1, k=2048, n=2048), True, "321 µs (numpy) | 676 µs (numpy)"))
    ws.append(Workload("matmul_m16", "matmul", "matmul M=16 K=N=2048",
                       dict(m=16, k=2048, n=2048), True, "1.19 ms (torch) | 1.63 ms (torch)"))
    for t, quick, anchor in ((32, True, "683 µs (onnxruntime) | 1.74 ms (torch)"),
                             (128, True, "3.06 ms (onnxruntime) | 5.73 ms (torch)")):
        ws.append(Workload(f"ffn_{t}", "ffn", f"SwiGLU FFN d=512 ff=1408, {t} tokens",
                           dict(tokens=t, d_model=512, d_ff=1408), quick, anchor))
    for s, quick, anchor in ((1, True, "370 µs (onnxruntime) | 571 µs (IREE)"),
                             (32, True, "1.11 ms (onnxruntime) | 2.02 ms (IREE)"),
                             (128, True, "4.56 ms (torch) | 7.10 ms (torch.compile)")):
        ws.append(Workload(f"llama_{s}", "llama", f"Llama block seq {s}", dict(seq=s, **LLAMA),
                           quick, anchor))
    ws.append(Workload("silu_mul_add", "silu_mul_add", "silu(x)·z + w, 16M floats",
                       dict(n=16 * 1024 * 1024), True, "24 ms · 11 GB/s (IREE) | 49 ms (onnxruntime)"))
    ws.append(Workload("rms_norm", "rms_norm", "rms_norm [4096, 4096]",
                       dict(rows=4096, cols=4096), True, "15.6 ms (IREE) | 18.4 ms (onnxruntime)"))
    ws.append(Workload("call_overhead", "overhead", "x + 1 over 1 float (call overhead)",
                       dict(n=1), True, "", extra=True))
    return ws


WORKLOADS: list[Workload] = _all()
BY_NAME: dict[str, Workload] = {w.name: w for w in WORKLOADS}


def select(names: list[str] | None, quick: bool) -> list[Workload]:
    if names:
        unknown = [n for n in names if n not in BY_NAME]
        if unknown:
            raise SystemExit(f"unknown workload(s) {', '.join(unknown)}; "
                             f"known: {', '.join(BY_NAME)}")
        return [BY_NAME[n] for n in names]
    return [w for w in WORKLOADS if w.quick or not quick]


# ---------------------------------------------------------------------------------- data


def rope_tables(seq: int, head_dim: int, base: float = 10000.0) -> tuple[np.ndarray, np.ndarray]:
    """HF rope cos/sin cut to their first half: [seq, head_dim/2]."""
    inv = base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    angles = np.arange(seq, dtype=np.float64)[:, None] * inv[None, :]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def make_data(w: Workload, seed: int = 0) -> tuple[Arrays, Arrays]:
    """(inputs, params) of a workload, deterministic."""
    rng = np.random.default_rng(seed)

    def normal(shape, scale=1.0):
        return (rng.standard_normal(shape, dtype=np.float32) * np.float32(scale))

    d = w.dims
    if w.kind == "matmul":
        return ({"a": normal((d["m"], d["k"]))},
                {"b": normal((d["k"], d["n"]), 1 / np.sqrt(d["k"]))})
    if w.kind == "ffn":
        dm, ff = d["d_model"], d["d_ff"]
        return ({"x": normal((d["tokens"], dm))},
                {"up": normal((dm, ff), dm ** -0.5), "gate": normal((dm, ff), dm ** -0.5),
                 "down": normal((ff, dm), ff ** -0.5)})
    if w.kind == "llama":
        s, dm, h, hkv, hd, ff = (d["seq"], d["d_model"], d["heads"], d["kv_heads"],
                                 d["head_dim"], d["d_ff"])
        cos, sin = rope_tables(s, hd)
        params = {
            "ln1_g": 1 + normal((dm,), 0.1),
            "q_w": normal((dm, h * hd), dm ** -0.5),
            "k_w": normal((dm, hkv * hd), dm ** -0.5),
            "v_w": normal((dm, hkv * hd), dm ** -0.5),
            "o_w": normal((h * hd, dm), (h * hd) ** -0.5),
            "ln2_g": 1 + normal((dm,), 0.1),
            "gate_w": normal((dm, ff), dm ** -0.5),
            "up_w": normal((dm, ff), dm ** -0.5),
            "down_w": normal((ff, dm), ff ** -0.5),
        }
        return {"x": normal((s, dm)), "cos": cos, "sin": sin}, params
    if w.kind == "silu_mul_add":
        n = d["n"]
        return {"x": normal((n,)), "z": normal((n,)), "w": normal((n,))}, {}
    if w.kind == "rms_norm":
        return {"x": normal((d["rows"], d["cols"]))}, {"gamma": 1 + normal((d["cols"],), 0.1)}
    if w.kind == "overhead":
        return {"x": normal((d["n"],))}, {}
    raise ValueError(w.kind)


# ------------------------------------------------------------------------------ rlx graph


def build_graph(w: Workload, seq: int | str | None = None, cache: int | None = None):
    """The rlx_mlir.Graph of a workload (weights as params). For the Llama block, `seq`
    overrides the sequence length (a symbol such as "S" compiles once for every length)
    and `cache` gives it KV caches of that many rows (states; decoding)."""
    import rlx_mlir as rlx

    d = w.dims
    g = rlx.Graph(w.name)
    if w.kind == "matmul":
        g.output(g.matmul(g.input("a", (d["m"], d["k"])), g.param("b", (d["k"], d["n"]))))
    elif w.kind == "ffn":
        dm, ff = d["d_model"], d["d_ff"]
        x = g.input("x", (d["tokens"], dm))
        up, gate, down = g.param("up", (dm, ff)), g.param("gate", (dm, ff)), g.param("down", (ff, dm))
        g.output(g.swiglu_ffn(x, up, gate, down))
    elif w.kind == "llama":
        # the same graph as examples/llama_block.py build_llama_block()
        s, dm, h, hkv, hd, ff = (d["seq"] if seq is None else seq, d["d_model"], d["heads"],
                                 d["kv_heads"], d["head_dim"], d["d_ff"])
        x = g.input("x", (s, dm))
        kv_cache = None if cache is None else (g.state("k_cache", (cache, hkv * hd)),
                                               g.state("v_cache", (cache, hkv * hd)))
        cos, sin = g.input("cos", (s, hd // 2)), g.input("sin", (s, hd // 2))
        p = {
            "ln1_g": g.param("ln1_g", (dm,)),
            "q_w": g.param("q_w", (dm, h * hd)),
            "k_w": g.param("k_w", (dm, hkv * hd)),
            "v_w": g.param("v_w", (dm, hkv * hd)),
            "o_w": g.param("o_w", (h * hd, dm)),
            "ln2_g": g.param("ln2_g", (dm,)),
            "gate_w": g.param("gate_w", (dm, ff)),
            "up_w": g.param("up_w", (dm, ff)),
            "down_w": g.param("down_w", (ff, dm)),
        }
        g.output(g.llama_decoder_block(
            x, p["ln1_g"], None, p["q_w"], p["k_w"], p["v_w"], p["o_w"], p["ln2_g"], None,
            p["gate_w"], p["up_w"], p["down_w"], cos, sin,
            num_heads=h, head_dim=hd, num_kv_heads=hkv, eps=EPS, kv_cache=kv_cache))
    elif w.kind == "silu_mul_add":
        n = d["n"]
        x, z, ww = g.input("x", (n,)), g.input("z", (n,)), g.input("w", (n,))
        g.output(g.silu(x) * z + ww)
    elif w.kind == "rms_norm":
        x = g.input("x", (d["rows"], d["cols"]))
        g.output(g.rms_norm(x, g.param("gamma", (d["cols"],)), eps=EPS))
    elif w.kind == "overhead":
        g.output(g.input("x", (d["n"],)) + 1.0)
    else:
        raise ValueError(w.kind)
    return g


# ---------------------------------------------------------------------------------- numpy


def _rms_norm(x: np.ndarray, gamma: np.ndarray, eps: float = EPS) -> np.ndarray:
    ms = np.mean(np.square(x), axis=-1, keepdims=True)
    ms += np.float32(eps)
    np.sqrt(ms, out=ms)
    y = x / ms
    y *= gamma
    return y


def _silu(x: np.ndarray) -> np.ndarray:
    t = np.negative(x)
    np.exp(t, out=t)
    t += np.float32(1)
    np.divide(x, t, out=t)
    return t


def _rope(t: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """t [S, H, D] (half style): (t1·cos − t2·sin, t2·cos + t1·sin)."""
    half = t.shape[-1] // 2
    c, s = cos[:, None, :], sin[:, None, :]
    t1, t2 = t[..., :half], t[..., half:]
    return np.concatenate([t1 * c - t2 * s, t2 * c + t1 * s], axis=-1)


def _softmax(x: np.ndarray) -> np.ndarray:
    x = x - np.max(x, axis=-1, keepdims=True)
    np.exp(x, out=x)
    x /= np.sum(x, axis=-1, keepdims=True)
    return x


def causal_bias(seq: int, groups: int) -> np.ndarray:
    """[groups·seq, seq]: 0 where query i (row mod seq) sees key j ≤ i, else −1e30."""
    keep = np.tril(np.ones((seq, seq), dtype=bool))
    return np.tile(np.where(keep, np.float32(0), np.float32(-1e30)), (groups, 1))


def numpy_llama(x, cos, sin, p, dims, mask_bias):
    s, h, hkv, hd = dims["seq"], dims["heads"], dims["kv_heads"], dims["head_dim"]
    groups = h // hkv
    n1 = _rms_norm(x, p["ln1_g"])
    q = _rope((n1 @ p["q_w"]).reshape(s, h, hd), cos, sin)
    k = _rope((n1 @ p["k_w"]).reshape(s, hkv, hd), cos, sin)
    v = (n1 @ p["v_w"]).reshape(s, hkv, hd)
    # query heads of one kv head stacked: [hkv, groups·s, hd] (head h reads kv head h // groups)
    qg = q.transpose(1, 0, 2).reshape(hkv, groups * s, hd)
    scores = qg @ k.transpose(1, 2, 0)  # [hkv, groups·s, s]
    scores *= np.float32(1 / np.sqrt(hd))
    scores += mask_bias
    o = _softmax(scores) @ v.transpose(1, 0, 2)  # [hkv, groups·s, hd]
    o = o.reshape(h, s, hd).transpose(1, 0, 2).reshape(s, h * hd)
    hres = x + o @ p["o_w"]
    n2 = _rms_norm(hres, p["ln2_g"])
    return hres + (_silu(n2 @ p["gate_w"]) * (n2 @ p["up_w"])) @ p["down_w"]


def numpy_fn(w: Workload, inputs: Arrays, params: Arrays) -> Callable[[], Any]:
    """A no-argument callable computing the workload with plain numpy."""
    i, p = inputs, params
    if w.kind == "matmul":
        return lambda: i["a"] @ p["b"]
    if w.kind == "ffn":
        return lambda: (_silu(i["x"] @ p["gate"]) * (i["x"] @ p["up"])) @ p["down"]
    if w.kind == "llama":
        bias = causal_bias(w.dims["seq"], w.dims["heads"] // w.dims["kv_heads"])
        return lambda: numpy_llama(i["x"], i["cos"], i["sin"], p, w.dims, bias)
    if w.kind == "silu_mul_add":
        def silu_mul_add():
            t = _silu(i["x"])
            t *= i["z"]
            t += i["w"]
            return t
        return silu_mul_add
    if w.kind == "rms_norm":
        return lambda: _rms_norm(i["x"], p["gamma"])
    if w.kind == "overhead":
        return lambda: i["x"] + np.float32(1)
    raise ValueError(w.kind)
