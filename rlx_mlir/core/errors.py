"""The exceptions rlx-mlir raises on purpose; all derive from `RlxError`."""

from __future__ import annotations


class RlxError(Exception):
    """Base class of every error rlx-mlir raises on purpose."""


class ShapeError(RlxError, ValueError):
    """A shape, rank or axis does not fit the op it is given to."""


class DTypeError(RlxError, TypeError):
    """An element type is not one the op or argument accepts."""


class GraphError(RlxError):
    """The graph is malformed (unknown value, duplicate name, no output, ...)."""


class ArgumentError(RlxError):
    """A call-time argument is missing, unknown or does not match its declaration."""


class OptionError(RlxError, ValueError):
    """A compile option (jit, compile_mlir, a pass option) is not one of its valid values."""
