"""mir on numpy: every primitive computes a fresh array with its reference kernel."""

from __future__ import annotations

from typing import Any

import numpy as np
from xdsl.ir import Operation

from rlx_mlir.core import reference_kernels as K
from rlx_mlir.dialects.common import shape_of
from rlx_mlir.dialects.mir import MIR
from rlx_mlir.interpreters.arrays import run_scalar_body
from rlx_mlir.interpreters.common import OpImpl, call_kernel, dense_array, functions_for

_KERNEL_NAMES = (
    "matmul", "fused_matmul", "reduce", "softmax", "rms_norm", "layer_norm", "rope",
    "attention", "transpose", "narrow", "concat", "gather", "dequant_matmul", "depthwise_conv1d",
)


def _kernel(kernel: Any) -> OpImpl:
    return lambda op, args, props: call_kernel(kernel, args, props)


def _reshape(op: Operation, args: list[Any], props: dict[str, Any]) -> np.ndarray:
    return np.array(args[0]).reshape(shape_of(op.results[0]))


def _broadcast_to(op: Operation, args: list[Any], props: dict[str, Any]) -> np.ndarray:
    return np.array(np.broadcast_to(args[0], shape_of(op.results[0])))


def _constant(op: Operation, args: list[Any], props: dict[str, Any]) -> np.ndarray:
    return dense_array(op.value)


def _fused_elementwise(op: Operation, args: list[Any], props: dict[str, Any]) -> np.ndarray:
    return run_scalar_body(op.body, args[0], shape_of(op.results[0]))


MIR_IMPLEMENTATIONS: dict[str, OpImpl] = {
    **{name: _kernel(fn) for name, fn in K.ELEMENTWISE.items()},
    **{name: _kernel(getattr(K, name)) for name in _KERNEL_NAMES},
    "reshape": _reshape,
    "broadcast_to": _broadcast_to,
    "constant": _constant,
    "fused_elementwise": _fused_elementwise,
}
"""Implementations by op name (without `mir.`); lir kernels reuse them."""

MirFunctions = functions_for(MIR, MIR_IMPLEMENTATIONS, "MirFunctions")
