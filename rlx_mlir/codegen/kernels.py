"""The registry of kernel builders: one `llvm.func` builder per lir kernel op.

A builder is `build(op, name, vector_width) -> llvm.FuncOp`. The function takes one
`!llvm.ptr` per memref operand of `op` (definition order, absent optional operands
skipped, the `out` buffer last) and returns nothing, except the kernels in
`CHECKED_KERNELS`, which return an i32 status (0 = ok, else an error code of
`ERROR_MESSAGES`).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable

from xdsl.dialects import llvm
from xdsl.ir import Operation

from rlx_mlir.dialects import lir

KernelBuilderFn = Callable[[Operation, str, int], llvm.FuncOp]

_FAMILIES = ("elementwise", "reductions", "matmul", "attention", "indexing")
"""Modules of rlx_mlir.codegen that export a `BUILDERS` dict."""

CHECKED_KERNELS: tuple[type[Operation], ...] = (lir.GatherOp,)
"""Kernels that validate data at run time and return an i32 status."""

ERROR_MESSAGES = {1: "an index (gather or embedding id) is negative or out of range"}
"""Status codes a compiled graph can return, and what they mean."""


@functools.cache
def kernel_builders() -> dict[type[Operation], KernelBuilderFn]:
    builders: dict[type[Operation], KernelBuilderFn] = {}
    for family in _FAMILIES:
        try:
            module = importlib.import_module(f"rlx_mlir.codegen.{family}")
        except ModuleNotFoundError as err:
            if err.name != f"rlx_mlir.codegen.{family}":
                raise
            continue
        builders.update(module.BUILDERS)
    return builders
