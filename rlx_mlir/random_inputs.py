"""Reproducible random arguments that are valid for the role each argument plays.

Ids that feed a gather or embedding are drawn within the indexed dimension, GGUF weight
bytes are real quantized blocks (finite f16 scales), custom attention masks hold 0/1,
weight matrices are normal with std 1/sqrt(fan_in), vector params (norm gains,
biases) are near 1, other f32 data is normal(0, 0.5).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue

from rlx_mlir.binding import ArgSpec, Signature
from rlx_mlir.core import reference_kernels as K
from rlx_mlir.core.abi import ROLE_PARAM, entry_function
from rlx_mlir.core.dtypes import numpy_type
from rlx_mlir.core.errors import GraphError
from rlx_mlir.core.shape_inference import (
    QUANT_BLOCKS,
    UNKNOWN,
    evaluate_dim,
    split_symbol,
    symbols_of,
)
from rlx_mlir.dialects.common import shape_of


def random_arguments(module: ModuleOp, specs: Iterable[ArgSpec], seed: int = 0,
                     dims: Mapping[str, int] | None = None) -> dict[str, np.ndarray]:
    """One array per spec, shaped and typed as declared (symbols at their `dims` sizes),
    valid for how `module` uses it."""
    specs = list(specs)
    dims = dict(dims or {})
    shapes = {}
    for spec in specs:
        missing = [d for d in symbols_of(spec.shape) if split_symbol(d)[0] not in dims]
        if missing or UNKNOWN in spec.shape:
            what = ", ".join(missing) or "a ? no symbol names"
            raise GraphError(
                f"{spec.describe()}: random data needs the size of {what} "
                f"(rlx-run --dims {missing[0] if missing else 'S'}=N)"
            )
        shapes[spec.name] = tuple(evaluate_dim(d, dims) for d in spec.shape)
    fn = entry_function(module)
    uses = _argument_uses(fn)
    rng = np.random.default_rng(seed)
    return {spec.name: _random(spec, shapes[spec.name], uses.get(spec.name, []), rng)
            for spec in specs}


def _argument_uses(fn: Operation) -> dict[str, list[tuple[Operation, int]]]:
    """How each argument is used; empty for an llvm-stage entry (uses are kernel calls)."""
    from xdsl.dialects import func


    names = [a.name for a in Signature.of(fn).args] if isinstance(fn, func.FuncOp) else []
    result: dict[str, list[tuple[Operation, int]]] = {}
    for name, arg in zip(names, fn.body.blocks.first.args, strict=False):
        result[name] = [(use.operation, use.index) for use in _uses(arg)]
    return result


def _uses(value: SSAValue):
    for use in value.uses:
        if use.operation.name == "builtin.unrealized_conversion_cast":
            yield from _uses(use.operation.results[0])
        else:
            yield use


def _random(spec: ArgSpec, shape: tuple[int, ...], uses: list[tuple[Operation, int]],
            rng: np.random.Generator) -> np.ndarray:
    for op, index in uses:
        kind = op.name.split(".", 1)[1]
        if kind in ("gather", "embedding") and index == 1:
            table = shape_of(op.operands[0])
            axis = op.axis.value.data if kind == "gather" else 0
            return rng.integers(0, table[axis], shape).astype(numpy_type(spec.dtype))
        if kind == "dequant_matmul" and index == 1:
            return random_blocks(op.scheme.data.value, shape, rng)
        if kind == "dequant_gather":  # a quantized table, ids in its rows
            if index == 0:
                return random_blocks(op.scheme.data.value, shape, rng)
            rows = shape_of(op.operands[0])[0]
            return rng.integers(0, rows, shape).astype(numpy_type(spec.dtype))
        if kind == "qwen35_mtp_head" and index in (1, 4):  # input_ids, last_token_idx
            high = shape_of(op.operands[5])[0] if index == 1 else shape_of(op.operands[0])[1]
            return rng.integers(0, high, shape).astype(numpy_type(spec.dtype))
        if kind == "attention" and op.mask_kind.data.value == "custom" and index == 3:
            return (rng.random(shape) > 0.3).astype(np.float32)
    if spec.dtype == "f32" and spec.role == ROLE_PARAM and len(shape) >= 2:
        # Weights scaled by 1/sqrt(fan_in) keep activations O(1) through deep graphs.
        return (rng.standard_normal(shape) / np.sqrt(shape[-2])).astype(np.float32)
    if spec.dtype == "f32" and spec.role == ROLE_PARAM:
        return (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
    if spec.dtype == "f32":
        return (0.5 * rng.standard_normal(shape)).astype(np.float32)
    return rng.integers(0, 8, shape).astype(numpy_type(spec.dtype))


F16_FIELDS: dict[str, dict[int, float]] = {
    "q4_1": {0: 0.1, 2: 0.8}, "q5_0": {0: 0.1}, "q5_1": {0: 0.05, 2: 0.8},
    "q4_k": {0: 0.002, 2: 0.002}, "q5_k": {0: 0.001, 2: 0.002}, "q6_k": {208: 0.001},
    "q2_k": {80: 0.01, 82: 0.01}, "q3_k": {108: 0.002}, "iq4_nl": {0: 0.001},
    "iq4_xs": {0: 0.0002},
}
"""Byte offsets of the f16 scale/min fields of a block, with the magnitude of random ones."""


def random_blocks(scheme: str, shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """Raw GGUF data ui8 [N, row_bytes] of `scheme` with finite values: quantized normal
    weights where reference_kernels quantizes (q8_0, q4_0), normal weights for f16/bf16,
    else random quant bytes with random finite f16 scale and min fields (F16_FIELDS)."""
    rows, row_bytes = shape
    values, block_bytes = QUANT_BLOCKS[scheme]
    k = row_bytes // block_bytes * values
    if scheme in K.QUANTIZE:
        return K.QUANTIZE[scheme](rng.standard_normal((rows, k)).astype(np.float32))
    if scheme in ("f16", "bf16"):
        weights = rng.standard_normal((rows, k)).astype(np.float32)
        if scheme == "f16":
            return weights.astype("<f2").view(np.uint8)
        return (weights.view(np.uint32) >> 16).astype("<u2").view(np.uint8)
    blocks = rng.integers(0, 256, (rows, k // values, block_bytes), dtype=np.uint8)
    for offset, magnitude in F16_FIELDS[scheme].items():
        field = (magnitude * rng.standard_normal((rows, k // values, 1))).astype("<f2")
        blocks[..., offset:offset + 2] = field.view(np.uint8)
    return blocks.reshape(rows, row_bytes)
