"""The rlx dialects: `hir` (model blocks), `mir` (tensor primitives), `lir` (buffer kernels)
and `rlx` (the enum attributes the three share)."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.ir import Dialect


def _hir() -> Dialect:
    from rlx_mlir.dialects.hir import HIR

    return HIR


def _mir() -> Dialect:
    from rlx_mlir.dialects.mir import MIR

    return MIR


def _lir() -> Dialect:
    from rlx_mlir.dialects.lir import LIR

    return LIR


def _rlx() -> Dialect:
    from rlx_mlir.dialects.rlx import RLX

    return RLX


def get_all_dialects() -> dict[str, Callable[[], Dialect]]:
    """Lazy factories of the rlx dialects, by name (imported on first use)."""
    return {"hir": _hir, "mir": _mir, "lir": _lir, "rlx": _rlx}
