"""The kernel builders of every lir kernel op, as their `@kernel` records declare them
(record.py): importing this module loads every family module.
"""

from __future__ import annotations

import functools

from xdsl.ir import Operation

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
from rlx_mlir.passes.lir_to_llvm.record import RECORDS, KernelBuilderFn, KernelRecord

__all__ = ["KernelBuilderFn", "KernelRecord", "family", "is_checked", "kernel_builders",
           "kernel_record", "partitioned_builders", "runtime_dims_kernels"]


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


def is_checked(op: Operation) -> bool:
    """Whether `op`'s kernel validates data at run time and returns an i32 status."""
    record = RECORDS.get(type(op))
    return record is not None and record.checked


def family(module: str) -> dict[type[Operation], KernelRecord]:
    """The records of the kernels one family module (`matmul`, `rlx_mlir.passes.lir_to_llvm.
    matmul`, ...) defines."""
    name = module if "." in module else f"rlx_mlir.passes.lir_to_llvm.{module}"
    return {op: record for op, record in RECORDS.items() if record.module == name}
