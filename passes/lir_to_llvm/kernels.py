"""The registry of kernel builders: one `llvm.func` builder per lir kernel op.

A builder is `build(op, name, vector_width) -> llvm.FuncOp`. The function takes one
`!llvm.ptr` per memref operand of `op` (definition order, absent optional operands
skipped, the `out` buffer last) and returns nothing, except the kernels in
`CHECKED_KERNELS`, which return an i32 status (`STATUS_OK`, else an error code of
`rlx_mlir.core.abi.ERROR_MESSAGES`).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable

from xdsl.dialects import llvm
from xdsl.ir import Operation

from rlx_mlir.dialects import lir

KernelBuilderFn = Callable[[Operation, str, int], llvm.FuncOp]

_FAMILIES = ("elementwise", "reductions", "matmul", "attention", "indexing", "sequence")
"""Modules of rlx_mlir.passes.lir_to_llvm that export a `BUILDERS` dict."""

CHECKED_KERNELS: tuple[type[Operation], ...] = (lir.GatherOp, lir.DequantGatherOp)
"""Kernels that validate data at run time and return an i32 status."""


@functools.cache
def kernel_builders() -> dict[type[Operation], KernelBuilderFn]:
    """Serial builders: `build(op, name, W)`, one `llvm.func` per kernel."""
    return _collect("BUILDERS")


@functools.cache
def partitioned_builders() -> dict[type[Operation], KernelBuilderFn]:
    """Builders of kernels that take two more i64 arguments `(part, parts)` and compute
    only their share of the output (see passes/lir_to_llvm/parallel.py)."""
    return _collect("PARTITIONED")


@functools.cache
def runtime_dims_kernels() -> frozenset[type[Operation]]:
    """Kernels whose builders read `?` dims at run time themselves (each family's
    `RUNTIME_DIMS`); other dynamic kernels are driven row by row (see dynamic.py)."""
    found: set[type[Operation]] = set()
    for family in _FAMILIES:
        module = importlib.import_module(f"rlx_mlir.passes.lir_to_llvm.{family}")
        found |= set(getattr(module, "RUNTIME_DIMS", ()))
    return frozenset(found)


def _collect(attribute: str) -> dict[type[Operation], KernelBuilderFn]:
    builders: dict[type[Operation], KernelBuilderFn] = {}
    for family in _FAMILIES:
        module = importlib.import_module(f"rlx_mlir.passes.lir_to_llvm.{family}")
        builders.update(getattr(module, attribute, {}))
    return builders

