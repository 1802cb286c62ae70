"""arith and math ops on whole numpy arrays: how the reference executor runs the scalar
body of a `fused_elementwise` once for all elements (instead of once per element)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from xdsl.dialects import arith
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import FloatAttr, IntegerAttr, ModuleOp
from xdsl.interpreter import (
    Interpreter,
    InterpreterFunctions,
    ReturnedValues,
    impl,
    impl_terminator,
    register_impls,
)
from xdsl.ir import Operation, Region

from rlx_mlir.core.errors import RlxError
from rlx_mlir.core.reference_kernels import float_type
from rlx_mlir.dialects import lir, mir

_erf = np.frompyfunc(math.erf, 1, 1)


def _erf32(x: np.ndarray) -> np.ndarray:
    """erf in float64, rounded to the kernels' float type (float32 unless `float64()`)."""
    return np.asarray(_erf(np.asarray(x, dtype=np.float64)), dtype=np.float64).astype(
        float_type())


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return np.float32(1) / np.sqrt(x)


def _unordered(compare: Any) -> Any:
    """The unordered form of a comparison: true when either operand is NaN."""
    return lambda a, b: compare(a, b) | np.isnan(a) | np.isnan(b)


_ORDERED = {
    "oeq": np.equal, "ogt": np.greater, "oge": np.greater_equal, "olt": np.less,
    "ole": np.less_equal, "one": lambda a, b: np.less(a, b) | np.greater(a, b),
    "ord": lambda a, b: ~(np.isnan(a) | np.isnan(b)),
}
_CMPF = {
    **_ORDERED,
    **{"u" + name[1:]: _unordered(fn) for name, fn in _ORDERED.items() if name != "ord"},
    "une": np.not_equal,
    "uno": lambda a, b: np.isnan(a) | np.isnan(b),
    "false": lambda a, b: np.zeros(np.broadcast(a, b).shape, bool),
    "true": lambda a, b: np.ones(np.broadcast(a, b).shape, bool),
}
_CMPI = {
    "eq": np.equal, "ne": np.not_equal, "slt": np.less, "sle": np.less_equal,
    "sgt": np.greater, "sge": np.greater_equal,
}

_ARRAY_OPS: dict[type[Operation], Any] = {
    arith.AddfOp: np.add, arith.SubfOp: np.subtract, arith.MulfOp: np.multiply,
    arith.DivfOp: np.divide, arith.NegfOp: np.negative,
    arith.MaximumfOp: np.maximum, arith.MinimumfOp: np.minimum,
    arith.MaxnumfOp: np.fmax, arith.MinnumfOp: np.fmin,
    arith.AddiOp: np.add, arith.SubiOp: np.subtract, arith.MuliOp: np.multiply,
    arith.MaxSIOp: np.maximum, arith.MinSIOp: np.minimum,
    arith.SelectOp: np.where,
    xmath.ExpOp: np.exp, xmath.LogOp: np.log, xmath.SqrtOp: np.sqrt, xmath.RsqrtOp: _rsqrt,
    xmath.TanhOp: np.tanh, xmath.AbsFOp: np.abs, xmath.AbsIOp: np.abs, xmath.ErfOp: _erf32,
    xmath.PowFOp: np.power, xmath.FmaOp: lambda a, b, c: a * b + c,
}


def _array_impl(fn: Any):
    def run(self: InterpreterFunctions, interpreter: Interpreter, op: Operation,
            args: tuple[Any, ...]) -> tuple[Any, ...]:
        with np.errstate(all="ignore"):
            return (fn(*args),)

    return run


def _constant(self: InterpreterFunctions, interpreter: Interpreter, op: arith.ConstantOp,
              args: tuple[Any, ...]) -> tuple[Any, ...]:
    value = op.value
    if isinstance(value, FloatAttr):
        return (np.float32(value.value.data),)
    if isinstance(value, IntegerAttr):
        return (np.int64(value.value.data),)
    raise RlxError(f"'arith.constant': expected a scalar float or integer value, got {value}")


def _cmpf(self: InterpreterFunctions, interpreter: Interpreter, op: arith.CmpfOp,
          args: tuple[Any, ...]) -> tuple[Any, ...]:
    predicate = arith.CMPF_COMPARISON_OPERATIONS[op.predicate.value.data]
    return (_CMPF[predicate](*args),)


def _cmpi(self: InterpreterFunctions, interpreter: Interpreter, op: arith.CmpiOp,
          args: tuple[Any, ...]) -> tuple[Any, ...]:
    predicate = arith.CMPI_COMPARISON_OPERATIONS[op.predicate.value.data]
    if predicate not in _CMPI:
        raise RlxError(f"'arith.cmpi': unsigned predicate {predicate!r} is not supported here")
    return (_CMPI[predicate](*args),)


ArrayArithFunctions = register_impls(
    type(
        "ArrayArithFunctions",
        (InterpreterFunctions,),
        {
            **{f"run_{cls.__name__}": impl(cls)(_array_impl(fn)) for cls, fn in _ARRAY_OPS.items()},
            "run_constant": impl(arith.ConstantOp)(_constant),
            "run_cmpf": impl(arith.CmpfOp)(_cmpf),
            "run_cmpi": impl(arith.CmpiOp)(_cmpi),
        },
    )
)
"""Array-valued implementations of the scalar arith/math ops a fused body may hold."""


def run_scalar_body(body: Region, inputs: Sequence[np.ndarray], shape: Sequence[int]) -> np.ndarray:
    """Run a fused_elementwise body once on whole arrays; the result has `shape`."""
    interpreter = Interpreter(ModuleOp([]))
    interpreter.register_implementations(ArrayArithFunctions())
    interpreter.register_implementations(FusedBodyFunctions())
    arrays = [np.asarray(x) for x in inputs]
    (result,) = interpreter.run_ssacfg_region(body, arrays, "fused_elementwise")
    dtype = arrays[0].dtype if arrays else np.float32
    return np.array(np.broadcast_to(np.asarray(result, dtype=dtype), tuple(shape)))


def _yield(self: InterpreterFunctions, interpreter: Interpreter, op: Operation,
           args: tuple[Any, ...]) -> tuple[ReturnedValues, tuple[Any, ...]]:
    return ReturnedValues(args), ()


FusedBodyFunctions = register_impls(
    type(
        "FusedBodyFunctions",
        (InterpreterFunctions,),
        {"run_mir_yield": impl_terminator(mir.YieldOp)(_yield),
         "run_lir_yield": impl_terminator(lir.YieldOp)(_yield)},
    )
)
"""The terminators of fused bodies hand the yielded array back."""
