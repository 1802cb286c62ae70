"""mir on numpy: every primitive computes a fresh array with the reference kernel of its
registry record; the few ops whose record has none (`SPECIAL`) are implemented here."""

from __future__ import annotations

from typing import Any

import numpy as np
from xdsl.ir import Operation

from rlx_mlir.dialects import mir
from rlx_mlir.dialects.registry import MIR_RECORDS, check_complete
from rlx_mlir.interpreters.arrays import run_scalar_body
from rlx_mlir.interpreters.common import (
    OpImpl,
    allocated_shape,
    assign_state,
    broadcast_shape,
    dense_array,
    functions_for,
    implementations_of,
    reshaped_shape,
)


def _reshape(op: Operation, args: list[Any], props: dict[str, Any]) -> np.ndarray:
    return np.array(args[0]).reshape(reshaped_shape(op.results[0], op.operands[0], args[0]))


def _broadcast_to(op: Operation, args: list[Any], props: dict[str, Any]) -> np.ndarray:
    return np.array(np.broadcast_to(args[0], broadcast_shape(op.results[0], [args[0]])))


def _constant(op: Operation, args: list[Any], props: dict[str, Any]) -> np.ndarray:
    return dense_array(op.value)


def _fused_elementwise(op: Operation, args: list[Any], props: dict[str, Any]) -> np.ndarray:
    return run_scalar_body(op.body, args[0], broadcast_shape(op.results[0], args[0]))


def _extract_rows(op: Operation, args: list[Any], props: dict[str, Any]) -> np.ndarray:
    """The first rows of the cache: as many as the call binds the op's `size` symbol to."""
    (rows,) = allocated_shape((op.size.data,), op.name)
    return np.array(args[0][:rows])


def _assign(op: Operation, args: list[Any], props: dict[str, Any]) -> None:
    """The state argument's array is the state buffer itself: the value goes there once
    the call is over (`deferred_assigns`), reads of the state until then see the old value."""
    value, state = args
    assign_state(state, value)


def run_scan(op: Operation, args: list[Any], interpreter: Any) -> list[Any]:
    """The carries of a mir or lir scan: the body run on the interpreter itself (an lir
    body reads buffers defined outside it) once per step on (carry, the step's slice of
    each xs, the consts); returns the carry yielded at every step."""
    init, xs, consts = args[:3]
    carry, carries = init, []
    for t in range(op.length.value.data):
        (carry,) = interpreter.run_ssacfg_region(
            op.body, [carry, *(x[t] for x in xs), *consts], op.name)
        carries.append(carry)
    return carries


def _scan(op: Operation, args: list[Any], props: dict[str, Any], interpreter: Any
          ) -> np.ndarray:
    carries = run_scan(op, args, interpreter)
    return np.array(np.stack(carries) if op.trajectory is not None else carries[-1])


SPECIAL: dict[type[Operation], OpImpl] = {
    mir.ReshapeOp: _reshape,
    mir.BroadcastToOp: _broadcast_to,
    mir.ConstantOp: _constant,
    mir.FusedElementwiseOp: _fused_elementwise,
    mir.ScanOp: _scan,
    mir.ExtractRowsOp: _extract_rows,
    mir.AssignOp: _assign,
}
"""The ops whose registry record has no reference kernel: the result type (or the body)
says what they compute."""

MIR_IMPLEMENTATIONS: dict[type[Operation], OpImpl] = implementations_of(
    MIR_RECORDS, SPECIAL, "mir"
)
"""The implementation of every mir op, by op class (the lir twins reuse them)."""

check_complete(
    "mir ops with an interpreter",
    [op for op in mir.MIR.operations if op is not mir.YieldOp],  # yield: FusedBodyFunctions
    MIR_IMPLEMENTATIONS,
)

MirFunctions = functions_for("MirFunctions", MIR_IMPLEMENTATIONS)
