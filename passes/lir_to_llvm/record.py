"""One record per kernel builder: `@kernel(lir.SomeOp, partitioned=..., runtime_dims=...,
checked=..., along_symbols=...)` on the builder declares everything the lowering needs to
know about it.

A builder is `build(op, name, vector_width, **options) -> llvm.FuncOp`. The function takes
one `!llvm.ptr` per memref operand of `op` (definition order, absent optional operands
skipped, the `out` buffer last) and returns nothing, except `checked` kernels, which
return an i32 status (`STATUS_OK`, else an error code of `rlx_mlir.core.abi.ERROR_MESSAGES`).

This module only collects the records; `kernels.py` imports every family module (so that
their decorators have run) and answers the lowering's questions.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from xdsl.dialects import llvm
from xdsl.ir import Operation

from rlx_mlir.core.errors import RlxError

KernelBuilderFn = Callable[..., llvm.FuncOp]
"""`build(op, name, vector_width, **options) -> llvm.FuncOp`."""


@dataclass(frozen=True)
class KernelRecord:
    """What the lowering knows of the kernel builder of one lir op.

    - `build`: the serial builder `build(op, name, W)`.
    - `partitioned`: `build(..., partitioned=True)` gives a kernel with two more i64
      arguments `(part, parts)` that computes only its share of the output (see
      parallel.py); lir-parallelize splits only such kernels.
    - `runtime_dims`: the builder reads `?` dims at run time itself (ABI of dynamic.py);
      other dynamic kernels are driven row by row.
    - `checked`: the kernel validates data at run time and returns an i32 status (never
      split across threads, unless also `partitioned`: then every part checks all the
      data, not only its share, and returns the same status, so thread 0's stands).
    - `along_symbols`: with `runtime_dims`, the builder reads `?` dims only where the op
      works along a symbol (a reduction or softmax over S); where the op is row-separable
      (`dynamic.row_prefix` >= 0) the row driver serves it as before."""

    op: type[Operation]
    build: KernelBuilderFn
    partitioned: bool = False
    runtime_dims: bool = False
    checked: bool = False
    along_symbols: bool = False

    def reads_dims(self, row_separable: bool) -> bool:
        """Whether the builder itself reads the `?` dims of a dynamic op (else the op is
        driven row by row); `row_separable`: `dynamic.row_prefix(op) >= 0`."""
        return self.runtime_dims and not (self.along_symbols and row_separable)

    @property
    def module(self) -> str:
        """The module that defines the builder (its family)."""
        return self.build.__module__

    def build_partitioned(self) -> KernelBuilderFn:
        """The partitioned builder `build(op, name, W)` (with `(part, parts)` arguments)."""
        if not self.partitioned:
            raise RlxError(f"{self.op.name}: its kernel has no partitioned variant")
        return functools.partial(self.build, partitioned=True)


RECORDS: dict[type[Operation], KernelRecord] = {}
"""Every declared kernel by lir op (filled by `@kernel` as the family modules load)."""


def kernel(*ops: type[Operation], partitioned: bool = False, runtime_dims: bool = False,
           checked: bool = False,
           along_symbols: bool = False) -> Callable[[KernelBuilderFn], KernelBuilderFn]:
    """Declare the decorated function the kernel builder of `ops` (see KernelRecord)."""

    def register(build: KernelBuilderFn) -> KernelBuilderFn:
        for op in ops:
            if op in RECORDS:
                raise RlxError(f"{op.name}: two kernel builders, "
                               f"{RECORDS[op].build.__qualname__} and {build.__qualname__}")
            RECORDS[op] = KernelRecord(op, build, partitioned, runtime_dims, checked, along_symbols)
        return build

    return register
