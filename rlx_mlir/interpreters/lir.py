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

from rlx_mlir.core.dtypes import numpy_type
from rlx_mlir.core.errors import ArgumentError
from rlx_mlir.core.reference_kernels import slot_indices
from rlx_mlir.dialects import lir, mir
from rlx_mlir.dialects.common import dims_from_attr, dtype_of, shape_of
from rlx_mlir.dialects.registry import (
    ELEMENTWISE_BY_FN,
    LIR_KERNEL_OPS,
    MIR_OF_KERNEL,
    RegistryError,
    check_complete,
)
from rlx_mlir.dialects.rlx import ElementwiseFn
from rlx_mlir.interpreters.arrays import run_scalar_body
from rlx_mlir.interpreters.common import (
    OpImpl,
    allocated_shape,
    broadcast_shape,
    dense_array,
    functions_for,
    reshaped_shape,
)
from rlx_mlir.interpreters.mir import MIR_IMPLEMENTATIONS

POISON_BYTE = 0xFF
"""What unwritten buffer bytes hold: all-ones is a NaN as f32 and -1 as an integer."""


def new_buffer(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """A buffer of poison bytes (NaN / -1), as lir.alloc and output arguments start."""
    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(numpy_type(dtype)).itemsize
    return np.full(nbytes, POISON_BYTE, dtype=np.uint8).view(numpy_type(dtype)).reshape(shape)


def _alloc(op: Operation, args: list[Any], props: dict[str, Any]) -> np.ndarray:
    result = op.results[0]
    shape = shape_of(result)
    if "dims" in op.properties:  # a dynamic buffer: sized by the call's symbols
        shape = allocated_shape(dims_from_attr(op.properties["dims"], "dims"), op.name)
    return new_buffer(shape, dtype_of(result))


def _arena(op: Operation, args: list[Any], props: dict[str, Any]) -> np.ndarray:
    return np.full(props["size"], POISON_BYTE, dtype=np.uint8)


def _slot(op: Operation, args: list[Any], props: dict[str, Any]) -> np.ndarray:
    result = op.results[0]
    dtype = np.dtype(numpy_type(dtype_of(result)))
    shape = shape_of(result)
    if "dims" in op.properties:  # a dynamic slot: its start, sized by the call's symbols
        shape = allocated_shape(dims_from_attr(op.properties["dims"], "dims"), op.name)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    offset = props["offset"]
    return args[0][offset : offset + nbytes].view(dtype).reshape(shape)


def _view(op: Operation, args: list[Any], props: dict[str, Any]) -> np.ndarray:
    if "dims" in op.properties:  # sized by the call's symbols (e.g. a cache's first T rows)
        shape = allocated_shape(dims_from_attr(op.properties["dims"], "dims"), op.name)
    else:
        shape = reshaped_shape(op.results[0], op.operands[0], args[0])
    flat = args[0].reshape(-1)
    assert np.shares_memory(flat, args[0]), "lir.view source must be contiguous"
    offset = props["offset"]
    return flat[offset : offset + int(np.prod(shape, dtype=np.int64))].reshape(shape)


def _writing(compute: OpImpl) -> OpImpl:
    """A destination-passing kernel: compute from the inputs, write each result into its
    out (the last operands: `out`, then the extra outs present; a variadic out, e.g.
    `lir.shared_input_matmul`'s products, is a list of buffers, one per result)."""

    def run(op: Operation, args: list[Any], props: dict[str, Any]) -> None:
        assert isinstance(op, lir.KernelOp)
        count = len(op.result_names())
        result = compute(op, args[:-count], props)
        results = result if isinstance(result, tuple) else (result,)
        outs = [buffer for out in args[-count:] if out is not None
                for buffer in (out if isinstance(out, list) else [out])]
        for out, value in zip(outs, results, strict=True):
            out[...] = value

    return run


def _elementwise(op: Operation, args: list[Any], props: dict[str, Any]) -> np.ndarray:
    reference = ELEMENTWISE_BY_FN[ElementwiseFn(props["fn"])].reference
    assert reference is not None, "every elementwise record has a reference kernel"
    return reference(*args[0])


def _constant(op: Operation, args: list[Any], props: dict[str, Any]) -> np.ndarray:
    return dense_array(op.value)


def _identity(op: Operation, args: list[Any], props: dict[str, Any]) -> np.ndarray:
    return args[0]


def _fused_elementwise(op: Operation, args: list[Any], props: dict[str, Any]) -> np.ndarray:
    return run_scalar_body(op.body, args[0], broadcast_shape(op.out, args[0]))


def _insert_rows(op: Operation, args: list[Any], props: dict[str, Any]) -> None:
    """Write the rows into the cache buffer `out` in place, at the position."""
    rows, position, out = args
    position = int(position)
    end = position + rows.shape[0]
    if position < 0 or end > out.shape[0]:
        raise ArgumentError(
            f"{op.name}: rows [{position}, {end}) do not fit in the cache of {out.shape[0]} "
            "rows (cache full)"
        )
    out[position:end] = rows


def _shared_input_matmul(op: Operation, args: list[Any], props: dict[str, Any]) -> None:
    """The products into their outs; those in `cache_products` into their caches (the
    outs) at rows position.. in place, as the kernel writes them."""
    *inputs, outs = args
    products = MIR_IMPLEMENTATIONS[mir.SharedInputMatmulOp](op, inputs, props)
    cached = props.get("cache_products", ())
    position = 0 if op.position is None else int(inputs[-1])  # pyright: ignore[reportAttributeAccessIssue]
    for index, (out, product) in enumerate(zip(outs, products, strict=True)):
        if index not in cached:
            out[...] = product
            continue
        end = position + product.shape[0]
        if position < 0 or end > out.shape[0]:
            raise ArgumentError(f"{op.name}: rows [{position}, {end}) of out[{index}] do not fit "
                                f"in the cache of {out.shape[0]} rows (cache full)")
        out[position:end] = product


def _cache_scatter(op: Operation, args: list[Any], props: dict[str, Any]) -> None:
    """Write the rows into the slot cache buffer `out` in place (checked first: nothing
    is written when a slot or position is out of range)."""
    rows, slots, positions, out = args
    slot, position = slot_indices(op.name, slots, positions, *out.shape[:2])
    rows = rows.reshape(-1, *out.shape[2:])  # [B, S, *tail]: the B·S rows in order
    for r, (s, p) in enumerate(zip(slot.ravel(), position.ravel(), strict=True)):
        out[s, p] = rows[r]


def _barrier(op: Operation, args: list[Any], props: dict[str, Any]) -> None:
    """The interpreter runs every kernel whole on one thread: nothing to wait for."""


def _scan(op: Operation, args: list[Any], props: dict[str, Any], interpreter: Any) -> None:
    """Step t runs the body on (carry, xs[t] views, consts) and copies the yielded buffer
    to `out` (or row t of it with `trajectory`); the carry is `init` at step 0, then `out`
    (or its row t - 1)."""
    init, xs, consts, out = args
    trajectory = op.trajectory is not None
    for t in range(op.length.value.data):
        carry = init if t == 0 else (out[t - 1] if trajectory else out)
        (new,) = interpreter.run_ssacfg_region(
            op.body, [carry, *(x[t] for x in xs), *consts], op.name)
        (out[t] if trajectory else out)[...] = new


SPECIAL: dict[type[Operation], OpImpl] = {
    lir.AllocOp: _alloc,
    lir.ArenaOp: _arena,
    lir.SlotOp: _slot,
    lir.ViewOp: _view,
    lir.BarrierOp: _barrier,
    lir.ScanOp: _scan,
    lir.InsertRowsOp: _insert_rows,
    lir.CacheScatterOp: _cache_scatter,
    lir.SharedInputMatmulOp: _shared_input_matmul,
    lir.ElementwiseOp: _writing(_elementwise),
    lir.FusedElementwiseOp: _writing(_fused_elementwise),
    lir.ConstantOp: _writing(_constant),
    lir.CopyOp: _writing(_identity),
    lir.BroadcastToOp: _writing(_identity),
}
"""The buffer ops and the kernels that are not a mir reference kernel writing into `out`."""


def _kernel_implementation(kernel: type[Operation]) -> OpImpl:
    """A kernel's implementation: its special one, else the implementation of the mir op
    it is the twin of (registry record), writing into `out`."""
    if kernel in SPECIAL:
        return SPECIAL[kernel]
    record = MIR_OF_KERNEL.get(kernel)
    if record is None or record.reference is None:
        raise RegistryError(
            f"lir interpreter of '{kernel.name}': expected a special implementation or a mir "
            f"registry record with a reference kernel, got neither"
        )
    return _writing(MIR_IMPLEMENTATIONS[record.op])


LIR_IMPLEMENTATIONS: dict[type[Operation], OpImpl] = {
    **SPECIAL,
    **{kernel: _kernel_implementation(kernel) for kernel in LIR_KERNEL_OPS},
}
"""The implementation of every lir op, by op class."""

check_complete(
    "lir ops with an interpreter",
    [op for op in lir.LIR.operations if op is not lir.YieldOp],  # yield: FusedBodyFunctions
    LIR_IMPLEMENTATIONS,
)

LirFunctions = functions_for("LirFunctions", LIR_IMPLEMENTATIONS)
