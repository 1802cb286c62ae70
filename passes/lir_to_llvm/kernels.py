"""The kernel builders of every lir kernel op, as their `@kernel` records declare them
(record.py): importing this module loads every family module.
"""

from __future__ import annotations

import functools

from xdsl.ir import Operation

from rlx_mlir.dialects import lir
from rlx_mlir.passes.lir_to_llvm import (  # noqa: F401  (each registers its kernels)
    attention,
    dequant,
    elementwise,
    indexing,
    matmul,
    reductions,
    sampling,
    sequence,
    shared_matmul,
)
from rlx_mlir.passes.lir_to_llvm.dynamic import OPERAND_DIMS, memref_operands, row_prefix
from rlx_mlir.passes.lir_to_llvm.record import RECORDS, KernelBuilderFn, KernelRecord

__all__ = ["KernelBuilderFn", "KernelRecord", "family", "is_checked", "kernel_builders",
           "kernel_record", "partitioned_builders", "reads_dims", "runtime_dims_kernels"]


def kernel_record(op_type: type[Operation]) -> KernelRecord | None:
    """The record of the kernel builder of a lir op type (None: no kernel)."""
    return RECORDS.get(op_type)


@functools.cache
def kernel_builders() -> dict[type[Operation], KernelBuilderFn]:
    """Serial builders: `build(op, name, W)`, one `llvm.func` per kernel."""
    return {op: record.build for op, record in RECORDS.items()}


@functools.cache
def partitioned_builders() -> dict[type[Operation], KernelBuilderFn]:
    """Builders of kernels that take two more i64 arguments `(part, parts)` and compute
    only their share of the output (see passes/lir_to_llvm/parallel.py)."""
    return {op: record.build_partitioned() for op, record in RECORDS.items()
            if record.partitioned}


@functools.cache
def runtime_dims_kernels() -> frozenset[type[Operation]]:
    """Kernels whose builders read `?` dims at run time themselves; other dynamic kernels
    are driven row by row (see dynamic.py)."""
    return frozenset(op for op, record in RECORDS.items() if record.runtime_dims)


def reads_dims(op: Operation) -> bool:
    """Whether the kernel of `op` (an lir kernel with `?` dims) reads the sizes itself
    (its record's `runtime_dims`; an `along_symbols` one only where the op is not
    row-separable); else convert-lir-to-llvm drives it row by row (dynamic.py)."""
    record = RECORDS.get(type(op))
    if record is None or not record.runtime_dims:
        return False
    shapes = None if OPERAND_DIMS in op.attributes else \
        [lir.buffer_dims(v) for v in memref_operands(op)]
    return record.reads_dims(row_prefix(op, shapes) >= 0)


def is_checked(op: Operation) -> bool:
    """Whether `op`'s kernel validates data at run time and returns an i32 status."""
    record = RECORDS.get(type(op))
    return record is not None and record.checked


def family(module: str) -> dict[type[Operation], KernelRecord]:
    """The records of the kernels one family module (`matmul`, `rlx_mlir.passes.lir_to_llvm.
    matmul`, ...) defines."""
    name = module if "." in module else f"rlx_mlir.passes.lir_to_llvm.{module}"
    return {op: record for op, record in RECORDS.items() if record.module == name}
