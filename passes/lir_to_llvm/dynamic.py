"""Kernels over buffers with `?` dims: their sizes arrive at run time as i64 arguments.

A kernel op with `?` in an operand type is built from its operands' *symbolic* shapes,
which convert-lir-to-llvm puts on the op before calling the builder (the attribute
`rlx.operand_dims`: one `rlx.dims` array per memref operand, in operand order, e.g.
`[["S", 64], [64, 128], ["S", 128]]`). The built function takes

    (ptr memref operand..., i64 index operand..., i64 size of each symbol of
     `kernel_symbols(op)`..., [i64 part, i64 parts])

so one function serves every binding of the symbols. A static op keeps the old signature
(no size arguments). Two ways to build a dynamic kernel:

* natively: the family module lists the op in its `RUNTIME_DIMS` set and its builder
  reads the sizes with `RuntimeDims` (loop bounds, tails and thread shares computed from
  them; tile choices may depend on the static dims and the bounds);
* by rows (`row_separable`): every `?` dim leads its shape and the op computes each row
  of those leading dims from the same rows of its inputs (elementwise, norms, softmax and
  reductions over trailing axes, rope, gather, copies): convert-lir-to-llvm builds the
  kernel for one row and calls it in a loop over the run-time rows (see
  `build_row_driver`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.dialects.builtin import ArrayAttr, MemRefType
from xdsl.ir import Operation, SSAValue

from rlx_mlir.core import shape_inference as si
from rlx_mlir.core.errors import RlxError
from rlx_mlir.dialects.common import dims_attr, dims_from_attr

OPERAND_DIMS = "rlx.operand_dims"
"""Kernel-op attribute during lowering: the symbolic shape of each memref operand."""

Index = int | SSAValue
"""A size known at compile time (int) or read at run time (an i64 value)."""


def memref_operands(op: Operation) -> list[SSAValue]:
    """The operands a kernel takes pointers for (every memref operand, in order)."""
    return [v for v in op.operands if isinstance(v.type, MemRefType)]


def operand_shapes(op: Operation) -> list[si.Shape]:
    """The symbolic shape of each memref operand of `op` (the declared static shapes when
    the op has no `rlx.operand_dims`)."""
    attr = op.attributes.get(OPERAND_DIMS)
    operands = memref_operands(op)
    if attr is None:
        return [tuple(v.type.get_shape()) for v in operands]
    assert isinstance(attr, ArrayAttr) and len(attr.data) == len(operands), (
        f"{op.name}: {OPERAND_DIMS} must hold one shape per memref operand")
    return [dims_from_attr(entry, f"{op.name}: {OPERAND_DIMS}") for entry in attr.data]


def set_operand_shapes(op: Operation, shapes: Sequence[si.Shape]) -> None:
    """Record the symbolic shapes of `op`'s memref operands for its kernel builder."""
    op.attributes[OPERAND_DIMS] = ArrayAttr([dims_attr(s) for s in shapes])


def kernel_symbols(op: Operation) -> tuple[str, ...]:
    """The symbols whose sizes the kernel of `op` takes, sorted by name (empty: static)."""
    return tuple(sorted({d for shape in operand_shapes(op) for d in shape if isinstance(d, str)}))


def is_dynamic(op: Operation) -> bool:
    """Whether an operand of `op` has a `?` dim."""
    return any(not si.is_static_shape(tuple(v.type.get_shape())) for v in memref_operands(op))


@dataclass
class RuntimeDims:
    """The sizes of a dynamic kernel's operands: Python ints for static dims, the i64
    arguments of the kernel for symbols."""

    shapes: list[si.Shape]
    sizes: dict[str, SSAValue]

    @classmethod
    def of(cls, op: Operation, size_args: Sequence[SSAValue]) -> RuntimeDims:
        """`size_args` are the kernel's i64 arguments, one per `kernel_symbols(op)`."""
        symbols = kernel_symbols(op)
        assert len(size_args) == len(symbols), f"{op.name}: expected {len(symbols)} sizes"
        return cls(operand_shapes(op), dict(zip(symbols, size_args, strict=True)))

    def shape(self, index: int) -> tuple[Index, ...]:
        """The dims of memref operand `index` (ints, or i64 values for symbols)."""
        return tuple(self.sizes[d] if isinstance(d, str) else d for d in self.shapes[index])

    def dim(self, index: int, axis: int) -> Index:
        return self.shape(index)[axis]


def leading_symbols(shape: si.Shape) -> int:
    """How many leading dims of `shape` are symbols, if every symbol leads (else -1)."""
    count = 0
    while count < len(shape) and isinstance(shape[count], str):
        count += 1
    return count if all(isinstance(d, int) for d in shape[count:]) else -1


class DynamicKernelError(RlxError):
    """A kernel cannot read a `?` dim where the op has it (named in the message)."""
