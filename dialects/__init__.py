"""The rlx dialects: `hir` (model blocks), `mir` (tensor primitives), `lir` (buffer kernels)
and `rlx` (the enum attributes the three share)."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.context import Context
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


def _llvm() -> Dialect:
    from rlx_mlir.dialects.llvm_vector import LLVM

    return LLVM


def get_all_dialects() -> dict[str, Callable[[], Dialect]]:
    """Lazy factories of the rlx dialects, by name (imported on first use); "llvm" is
    xDSL's llvm dialect with vector-capable fcmp/select and replaces the upstream one."""
    return {"hir": _hir, "mir": _mir, "lir": _lir, "rlx": _rlx, "llvm": _llvm}


def register_all_dialects(ctx: Context) -> None:
    """Register xDSL's dialects and the rlx ones (overriding "llvm") in `ctx`, lazily."""
    from xdsl.universe import Universe

    ours = get_all_dialects()
    for name, factory in Universe.get_multiverse().all_dialects.items():
        ctx.register_dialect(name, ours.get(name, factory))
    for name, factory in ours.items():
        if name not in ctx.registered_dialect_names:
            ctx.register_dialect(name, factory)
