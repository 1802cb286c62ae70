"""hir on numpy: every block runs the reference kernel of its registry record."""

from __future__ import annotations

from xdsl.ir import Operation

from rlx_mlir.dialects.hir import HIR
from rlx_mlir.dialects.registry import HIR_RECORDS, check_complete
from rlx_mlir.interpreters.common import OpImpl, functions_for, implementations_of

HIR_IMPLEMENTATIONS: dict[type[Operation], OpImpl] = implementations_of(HIR_RECORDS, {}, "hir")
"""The implementation of every hir op, by op class."""

check_complete("hir ops with an interpreter", HIR.operations, HIR_IMPLEMENTATIONS)

HirFunctions = functions_for("HirFunctions", HIR_IMPLEMENTATIONS)
