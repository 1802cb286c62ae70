"""lir on numpy: buffers are real memory and kernels write into them.

`lir.arena` is one uint8 array filled with 0xff bytes (NaN as f32), `lir.slot` a typed
view of it at the planned offset, `lir.alloc` a fresh NaN-filled array and `lir.view` a
flat view of its source. So a plan that overlaps two live buffers, or a kernel that reads
a buffer nobody wrote, gives wrong numbers instead of passing silently.

Arrays are always in the logical row-major layout: the `packed_rhs` property of
matmul / fused_matmul (lir-pack-weights) only says how the native code's bound copy of a
weight is laid out (packed once at bind time by `CompiledGraph`), so the interpreter
ignores it and a packed module runs on the same (unpacked) params as an unpacked one.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from xdsl.ir import Operation

from rlx_mlir.core.reference_kernels import ELEMENTWISE
from rlx_mlir.dialects.common import dtype_of, shape_of
from rlx_mlir.dialects.lir import LIR
from rlx_mlir.interpreters.arrays import run_scalar_body
from rlx_mlir.interpreters.common import OpImpl, dense_array, functions_for
from rlx_mlir.interpreters.mir import MIR_IMPLEMENTATIONS
from rlx_mlir.signature import NUMPY_DTYPES

POISON_BYTE = 0xFF
"""What unwritten buffer bytes hold: all-ones is a NaN as f32 and -1 as an integer."""


def new_buffer(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """A buffer of poison bytes (NaN / -1), as lir.alloc and output arguments start."""
    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(NUMPY_DTYPES[dtype]).itemsize
    return np.full(nbytes, POISON_BYTE, dtype=np.uint8).view(NUMPY_DTYPES[dtype]).reshape(shape)


def _alloc(op: Operation, args: list[Any], props: dict[str, Any]) -> np.ndarray:
    result = op.results[0]
    return new_buffer(shape_of(result), dtype_of(result))


def _arena(op: Operation, args: list[Any], props: dict[str, Any]) -> np.ndarray:
    return np.full(props["size"], POISON_BYTE, dtype=np.uint8)


def _slot(op: Operation, args: list[Any], props: dict[str, Any]) -> np.ndarray:
    result = op.results[0]
    dtype = np.dtype(NUMPY_DTYPES[dtype_of(result)])
    shape = shape_of(result)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    offset = props["offset"]
    return args[0][offset : offset + nbytes].view(dtype).reshape(shape)


def _view(op: Operation, args: list[Any], props: dict[str, Any]) -> np.ndarray:
    shape = shape_of(op.results[0])
    flat = args[0].reshape(-1)
    assert np.shares_memory(flat, args[0]), "lir.view source must be contiguous"
    offset = props["offset"]
    return flat[offset : offset + int(np.prod(shape, dtype=np.int64))].reshape(shape)


def _writing(compute: OpImpl) -> OpImpl:
    """A destination-passing kernel: compute from the inputs, write into `out` (last operand)."""

    def run(op: Operation, args: list[Any], props: dict[str, Any]) -> None:
        out = args[-1]
        out[...] = compute(op, args[:-1], props)

    return run


def _elementwise(op: Operation, args: list[Any], props: dict[str, Any]) -> np.ndarray:
    return ELEMENTWISE[props["fn"]](*args[0])


def _constant(op: Operation, args: list[Any], props: dict[str, Any]) -> np.ndarray:
    return dense_array(op.value)


def _identity(op: Operation, args: list[Any], props: dict[str, Any]) -> np.ndarray:
    return args[0]


def _fused_elementwise(op: Operation, args: list[Any], props: dict[str, Any]) -> np.ndarray:
    return run_scalar_body(op.body, args[0], shape_of(op.out))


_KERNELS = {
    name: MIR_IMPLEMENTATIONS[name]
    for name in (
        "matmul", "fused_matmul", "reduce", "softmax", "rms_norm", "layer_norm", "rope",
        "attention", "transpose", "narrow", "concat", "gather", "dequant_matmul",
        "depthwise_conv1d",
    )
}

LirFunctions = functions_for(
    LIR,
    {
        "alloc": _alloc,
        "arena": _arena,
        "slot": _slot,
        "view": _view,
        **{name: _writing(fn) for name, fn in _KERNELS.items()},
        "elementwise": _writing(_elementwise),
        "fused_elementwise": _writing(_fused_elementwise),
        "constant": _writing(_constant),
        "copy": _writing(_identity),
        "broadcast_to": _writing(_identity),
    },
    "LirFunctions",
)
