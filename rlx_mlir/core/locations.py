"""Source locations that name the user's block an op came from (provenance).

The Graph builder names each op with a `NameLoc` (`name_loc`); module text without
locations gets the same fallback names when the pipeline starts (`name_unlocated`); the
passes derive the locations of the ops they create (`rlx_mlir.passes.provenance`); the
profile and the arena picture read them back as text (`origin`).
"""

from __future__ import annotations

from xdsl.dialects import func
from xdsl.dialects.builtin import FusedLoc, ModuleOp, NameLoc, NoneAttr, StringAttr
from xdsl.ir import Attribute, Operation

ORIGIN_SEPARATOR = " + "
"""Between the names of a fused location in `origin`."""


def name_loc(name: str) -> NameLoc:
    """The location `loc("name")`."""
    return NameLoc(StringAttr(name), NoneAttr())


def loc_names(location: Attribute | None) -> list[str]:
    """The names in a location (one for a NameLoc, each of a FusedLoc's; none if unknown)."""
    if isinstance(location, NameLoc):
        return [location.desc.data]
    if isinstance(location, FusedLoc):
        return [name for inner in location.locations.data for name in loc_names(inner)]
    return []


def origin(op: Operation) -> str | None:
    """The op's provenance as text (fused names joined by " + "), None when unknown."""
    names = loc_names(op.location)
    return ORIGIN_SEPARATOR.join(dict.fromkeys(names)) if names else None


def _method(op: Operation) -> str:
    """What names an op without a location: the callee of a `func.call` (its inlined ops
    are scoped under it), else the op name without the dialect."""
    if isinstance(op, func.CallOp):
        return op.callee.string_value()
    return op.name.split(".", 1)[-1]


def fallback_name(op: Operation, count: int) -> str:
    """The name of an op no scope names: its method (the op name without the dialect,
    or a call's callee) and a counter, `matmul#3`, as the Graph builder names it."""
    return f"{_method(op)}#{count}"


def name_unlocated(module: ModuleOp) -> None:
    """Give every op of the module's functions that has no location (`loc(unknown)`,
    e.g. hand-written or location-free text) its fallback name, in place, counting per
    method past the names already taken, so that every kernel made from it has an
    origin. The functions' terminators and nested bodies keep theirs."""
    fns = [op for op in module.ops if isinstance(op, func.FuncOp)]
    ops = [op for fn in fns for block in fn.body.blocks for op in block.ops
           if not isinstance(op, func.ReturnOp)]
    taken = {name for op in ops for name in loc_names(op.location)}
    counters: dict[str, int] = {}
    for op in ops:
        if loc_names(op.location):
            continue
        method = _method(op)
        count = counters.get(method, 0)
        while fallback_name(op, count) in taken:
            count += 1
        op.location = name_loc(fallback_name(op, count))
        counters[method] = count + 1
