"""rlx-mlir: an ML compiler on xDSL (HIR -> MIR -> LIR -> llvm, JIT-compiled SIMD kernels)."""

from rlx_mlir.errors import ArgumentError, DTypeError, GraphError, RlxError, ShapeError

__all__ = ["ArgumentError", "DTypeError", "GraphError", "RlxError", "ShapeError"]
