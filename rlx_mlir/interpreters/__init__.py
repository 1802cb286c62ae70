"""numpy implementations of the rlx dialects for xDSL's interpreter: the reference executor.

`hir` and `mir` ops compute fresh arrays; `lir` kernels write into numpy views of real
buffers (one byte arena laid out by the plan), so a bad plan gives wrong numbers. The
scalar bodies of `fused_elementwise` run once, on whole arrays (`arrays.py`).

The tables (one `@impl` per op) are built from the op registry
(`rlx_mlir.dialects.registry`): an op runs its record's reference kernel, or a special
implementation in `hir.py`/`mir.py`/`lir.py` when its record has none; an op with neither
is an error at import.
"""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp
from xdsl.interpreter import Interpreter
from xdsl.interpreters.func import FuncFunctions

from rlx_mlir.interpreters.arrays import ArrayArithFunctions, FusedBodyFunctions
from rlx_mlir.interpreters.hir import HirFunctions
from rlx_mlir.interpreters.lir import LirFunctions
from rlx_mlir.interpreters.mir import MirFunctions


def make_interpreter(module: ModuleOp) -> Interpreter:
    """An Interpreter for `module` that runs func, hir, mir, lir and array-valued arith/math."""
    interpreter = Interpreter(module)
    for functions in (FuncFunctions(), ArrayArithFunctions(), HirFunctions(), MirFunctions(),
                      LirFunctions(), FusedBodyFunctions()):  # the yields end scan bodies
        interpreter.register_implementations(functions)
    return interpreter
