"""The peers: torch eager and onnxruntime versions of each workload (both optional).

Each `*_runner(workload, inputs, params, threads)` returns a no-argument callable that
computes the workload once (and returns the result as a numpy-convertible array).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.workloads import EPS, Arrays, Workload, causal_bias


def optional_import(name: str):
    try:
        return __import__(name)
    except Exception:  # noqa: BLE001 - any import failure means "peer not available"
        return None


# ---------------------------------------------------------------------------------- torch


def torch_runner(torch, w: Workload, inputs: Arrays, params: Arrays, threads: int) -> Callable[[], Any]:
    """torch eager: same math with torch ops (SDPA for attention, F.rms_norm if present)."""
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    i = {k: torch.from_numpy(v) for k, v in inputs.items()}
    p = {k: torch.from_numpy(v) for k, v in params.items()}

    rms = getattr(F, "rms_norm", None)

    def rms_norm(x, g):
        if rms is not None:
            return rms(x, (x.shape[-1],), g, eps=EPS)
        return x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + EPS) * g

    if w.kind == "matmul":
        return lambda: torch.matmul(i["a"], p["b"])
    if w.kind == "ffn":
        return lambda: (F.silu(i["x"] @ p["gate"]) * (i["x"] @ p["up"])) @ p["down"]
    if w.kind == "llama":
        d = w.dims
        s, h, hkv, hd = d["seq"], d["heads"], d["kv_heads"], d["head_dim"]
        half = hd // 2
        cos, sin = i["cos"][None], i["sin"][None]  # [1, S, D/2] against [H, S, D/2]
        gqa = "enable_gqa" in inspect.signature(F.scaled_dot_product_attention).parameters \
            if _has_signature(F.scaled_dot_product_attention) else False

        def rope(t):
            t1, t2 = t[..., :half], t[..., half:]
            return torch.cat([t1 * cos - t2 * sin, t2 * cos + t1 * sin], dim=-1)

        def block():
            x = i["x"]
            n1 = rms_norm(x, p["ln1_g"])
            q = rope((n1 @ p["q_w"]).view(s, h, hd).transpose(0, 1))
            k = rope((n1 @ p["k_w"]).view(s, hkv, hd).transpose(0, 1))
            v = (n1 @ p["v_w"]).view(s, hkv, hd).transpose(0, 1)
            if gqa:
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            else:
                a = F.scaled_dot_product_attention(
                    q, k.repeat_interleave(h // hkv, 0), v.repeat_interleave(h // hkv, 0),
                    is_causal=True)
            hres = x + a.transpose(0, 1).reshape(s, h * hd) @ p["o_w"]
            n2 = rms_norm(hres, p["ln2_g"])
            return hres + (F.silu(n2 @ p["gate_w"]) * (n2 @ p["up_w"])) @ p["down_w"]
        return block
    if w.kind == "silu_mul_add":
        return lambda: F.silu(i["x"]) * i["z"] + i["w"]
    if w.kind == "rms_norm":
        return lambda: rms_norm(i["x"], p["gamma"])
    if w.kind == "overhead":
        return lambda: i["x"] + 1.0
    raise ValueError(w.kind)


def _has_signature(fn) -> bool:
    try:
        inspect.signature(fn)
        return True
    except (TypeError, ValueError):
        return False


# ---------------------------------------------------------------------------- onnxruntime

OPSET = 17


class _Builder:
    """A small onnx.helper graph builder: unique names, initializers, constants."""

    def __init__(self, onnx):
        self.onnx = onnx
        self.h = onnx.helper
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.count = 0

    def name(self, hint: str) -> str:
        self.count += 1
        return f"{hint}_{self.count}"

    def op(self, op_type: str, *inputs: str, **attrs) -> str:
        out = self.name(op_type.lower())
        self.nodes.append(self.h.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def init(self, name: str, array: np.ndarray) -> str:
        self.inits.append(self.onnx.numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def const(self, array, dtype=np.int64) -> str:
        return self.init(self.name("c"), np.asarray(array, dtype=dtype))

    def model(self, inputs: Arrays, output: str, out_shape) -> bytes:
        h, tp = self.h, self.onnx.TensorProto
        graph = h.make_graph(
            self.nodes, "bench",
            [h.make_tensor_value_info(k, tp.FLOAT, list(v.shape)) for k, v in inputs.items()],
            [h.make_tensor_value_info(output, tp.FLOAT, list(out_shape))],
            initializer=self.inits,
        )
        m = h.make_model(graph, opset_imports=[h.make_opsetid("", OPSET),
                                               h.make_opsetid("com.microsoft", 1)])
        m.ir_version = 8  # accepted by every onnxruntime of the last years
        return m.SerializeToString()


def onnx_model(onnx, w: Workload, inputs: Arrays, params: Arrays, fused_norm: bool) -> bytes:
    """The workload as an ONNX model; params as initializers."""
    b = _Builder(onnx)
    for k, v in params.items():
        b.init(k, v)

    def rms_norm(x: str, g: str) -> str:
        if fused_norm:  # onnxruntime's fused kernel (a contrib op in the default domain)
            return b.op("SimplifiedLayerNormalization", x, g, axis=-1, epsilon=EPS)
        sq = b.op("Mul", x, x)
        ms = b.op("ReduceMean", sq, axes=[-1], keepdims=1)
        rs = b.op("Sqrt", b.op("Add", ms, b.const(EPS, np.float32)))
        return b.op("Mul", b.op("Div", x, rs), g)

    def silu(x: str) -> str:
        return b.op("Mul", x, b.op("Sigmoid", x))

    def ffn(x: str, up: str, gate: str, down: str) -> str:
        return b.op("MatMul", b.op("Mul", silu(b.op("MatMul", x, gate)), b.op("MatMul", x, up)), down)

    if w.kind == "matmul":
        out = b.op("MatMul", "a", "b")
        shape = (w.dims["m"], w.dims["n"])
    elif w.kind == "ffn":
        out = ffn("x", "up", "gate", "down")
        shape = inputs["x"].shape
    elif w.kind == "llama":
        d = w.dims
        s, h, hkv, hd = d["seq"], d["heads"], d["kv_heads"], d["head_dim"]
        groups, half = h // hkv, hd // 2
        cos = b.op("Reshape", "cos", b.const([s, 1, half]))
        sin = b.op("Reshape", "sin", b.const([s, 1, half]))
        first = (b.const([0]), b.const([half]), b.const([2]))
        second = (b.const([half]), b.const([hd]), b.const([2]))

        def rope(t: str) -> str:  # t [S, heads, D]
            t1, t2 = b.op("Slice", t, *first), b.op("Slice", t, *second)
            r1 = b.op("Sub", b.op("Mul", t1, cos), b.op("Mul", t2, sin))
            r2 = b.op("Add", b.op("Mul", t2, cos), b.op("Mul", t1, sin))
            return b.op("Concat", r1, r2, axis=2)

        n1 = rms_norm("x", "ln1_g")
        q = rope(b.op("Reshape", b.op("MatMul", n1, "q_w"), b.const([s, h, hd])))
        k = rope(b.op("Reshape", b.op("MatMul", n1, "k_w"), b.const([s, hkv, hd])))
        v = b.op("Reshape", b.op("MatMul", n1, "v_w"), b.const([s, hkv, hd]))
        q = b.op("Mul", q, b.const(1 / np.sqrt(hd), np.float32))
        qg = b.op("Reshape", b.op("Transpose", q, perm=[1, 0, 2]), b.const([hkv, groups * s, hd]))
        kt = b.op("Transpose", k, perm=[1, 2, 0])  # [hkv, D, S]
        vt = b.op("Transpose", v, perm=[1, 0, 2])  # [hkv, S, D]
        scores = b.op("Add", b.op("MatMul", qg, kt), b.init("causal_bias", causal_bias(s, groups)))
        o = b.op("MatMul", b.op("Softmax", scores, axis=-1), vt)  # [hkv, groups·S, D]
        o = b.op("Transpose", b.op("Reshape", o, b.const([h, s, hd])), perm=[1, 0, 2])
        o = b.op("Reshape", o, b.const([s, h * hd]))
        hres = b.op("Add", "x", b.op("MatMul", o, "o_w"))
        out = b.op("Add", hres, ffn(rms_norm(hres, "ln2_g"), "up_w", "gate_w", "down_w"))
        shape = inputs["x"].shape
    elif w.kind == "silu_mul_add":
        out = b.op("Add", b.op("Mul", silu("x"), "z"), "w")
        shape = inputs["x"].shape
    elif w.kind == "rms_norm":
        out = rms_norm("x", "gamma")
        shape = inputs["x"].shape
    elif w.kind == "overhead":
        out = b.op("Add", "x", b.const(1.0, np.float32))
        shape = inputs["x"].shape
    else:
        raise ValueError(w.kind)
    return b.model(inputs, out, shape)


def ort_runner(ort, onnx, w: Workload, inputs: Arrays, params: Arrays,
               threads: int) -> tuple[Callable[[], Any], dict[str, Any]]:
    """An onnxruntime session (intra-op threads, inter-op 1, all graph optimizations)."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    info: dict[str, Any] = {}
    session = None
    for fused in (True, False):
        try:
            model = onnx_model(onnx, w, inputs, params, fused_norm=fused)
            session = ort.InferenceSession(model, sess_options=opts,
                                           providers=["CPUExecutionProvider"])
            info["rms_norm_op"] = "SimplifiedLayerNormalization" if fused else "decomposed"
            break
        except Exception as err:  # noqa: BLE001 - fall back to the decomposed norm
            info["fallback_reason"] = f"{type(err).__name__}: {str(err)[:200]}"
    if session is None:
        raise RuntimeError(info.get("fallback_reason", "onnxruntime session failed"))
    feeds = dict(inputs)
    return (lambda: session.run(None, feeds)[0]), info
