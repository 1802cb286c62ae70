"""Helpers shared by the rlx passes (module-level functions and tables, no pass state)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TypeVar

from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseIntOrFPElementsAttr,
    DictionaryAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
    f32,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.utils.exceptions import PassFailedException

from rlx_mlir.core import shape_inference as si
from rlx_mlir.core.abi import ARG_DIMS, CACHE_DIMS
from rlx_mlir.dialects import mir
from rlx_mlir.dialects.rlx import Activation

OpT = TypeVar("OpT", bound=Operation)

ACTIVATION_OPS: dict[Activation, type[mir.UnaryElementwiseOp]] = {
    Activation.RELU: mir.ReluOp,
    Activation.GELU: mir.GeluOp,
    Activation.GELU_TANH: mir.GeluTanhOp,
    Activation.SILU: mir.SiluOp,
    Activation.SIGMOID: mir.SigmoidOp,
    Activation.TANH: mir.TanhOp,
}
"""The unary mir op computing each activation."""


class OpSequence:
    """New ops in program order, built one after the other and inserted together
    (`rewriter.replace(op, seq.ops)` puts them where `op` was)."""

    def __init__(self) -> None:
        self.ops: list[Operation] = []
        """The ops emitted so far, in order."""

    def emit(self, op: Operation) -> SSAValue:
        """Append `op` and return its (single) result."""
        self.ops.append(op)
        return op.results[0]

    @property
    def result(self) -> SSAValue:
        """The result of the last op emitted."""
        return self.ops[-1].results[0]


REMOVED_BY: dict[str, str] = {
    "hir": "convert-hir-to-mir",
    "func.call": "mir-inline-functions",
    "mir": "convert-mir-to-lir",
    "lir.alloc": "lir-plan-arena",
}
"""The pass that removes each dialect's ops (or one op): what must run before a pass that
expects none of them."""


def require_lowered(module: Operation, pass_name: str, *removed: str) -> None:
    """Refuse a module that still has ops of the dialects (or the op names) in `removed`,
    naming them and the pass that must run first (the pipeline run out of order).

    Called at the start of a pass's `apply`, it turns the verifier error of a half-lowered
    module into one diagnostic, e.g. "convert-mir-to-lir: the module still has hir ops
    (hir.linear); run convert-hir-to-mir first".
    """
    found: dict[str, set[str]] = {key: set() for key in removed}
    for op in module.walk():
        for key in removed:
            if op.name == key or op.name.startswith(key + "."):
                found[key].add(op.name)
    for key in removed:  # earliest stage first: that pass runs before the others
        if found[key]:
            names = sorted(found[key])
            listed = ", ".join(names[:4]) + (f", ... ({len(names)} kinds)" if len(names) > 4 else "")
            what = f"{key} ops ({listed})" if "." not in key else f"{key} ops"
            raise PassFailedException(
                f"{pass_name}: the module still has {what}; run {REMOVED_BY[key]} first"
            )


def parse_max_dims(text: str, pass_name: str) -> dict[str, int]:
    """The bounds of a `max-dims` option, `S=2048,T=512` (or space-separated; a
    PassFailedException names a malformed entry)."""
    bounds: dict[str, int] = {}
    for entry in filter(None, re.split(r"[,\s]+", text)):  # rlx-opt turns {a,b} into {a b}
        name, _, value = entry.partition("=")
        try:
            bound = int(value)
        except ValueError:
            bound = 0
        if not name.strip().isidentifier() or bound < 1:
            raise PassFailedException(
                f"{pass_name}: max-dims: expected SYMBOL=BOUND entries with a bound >= 1 "
                f"(e.g. S=2048), got {entry!r}")
        bounds[name.strip()] = bound
    return bounds


def symbol_bounds(fn: Operation, max_dims: Mapping[str, int]) -> dict[str, int]:
    """The bound of every symbol of `fn`: `max_dims`, else the capacity of the KV cache it
    indexes (`rlx.cache_dims`), else DEFAULT_SYMBOL_BOUND."""
    bounds: dict[str, int] = {}
    cache = fn.attributes.get(CACHE_DIMS)
    if isinstance(cache, DictionaryAttr):
        for name, entry in cache.data.items():
            if isinstance(entry, ArrayAttr) and len(entry.data) == 2:
                capacity = entry.data[1]
                if isinstance(capacity, IntegerAttr):
                    bounds[name] = capacity.value.data
    names = fn_symbols(fn)
    for name in names:
        bounds.setdefault(name, si.DEFAULT_SYMBOL_BOUND)
    bounds.update((name, bound) for name, bound in max_dims.items() if name in names)
    return {name: bounds[name] for name in names}


def fn_symbols(fn: Operation) -> list[str]:
    """The symbols named anywhere in `fn` (argument `rlx.dims`, `dims` of ops), sorted."""
    names: set[str] = set()

    def collect(attr: Attribute | None) -> None:
        if isinstance(attr, ArrayAttr):
            names.update(si.split_symbol(d.data)[0] for d in attr.data
                         if isinstance(d, StringAttr) and d.data != si.UNKNOWN)

    arg_attrs = getattr(fn, "arg_attrs", None)
    for attrs in arg_attrs.data if arg_attrs is not None else ():
        collect(attrs.data.get(ARG_DIMS))
    for op in fn.walk():
        collect(op.properties.get("dims"))
        collect(op.attributes.get(ARG_DIMS))
    names.discard(si.UNKNOWN)
    return sorted(names)


def splat_constant(
    shape: Sequence[int], value: float = 0.0, element_type: Attribute = f32
) -> mir.ConstantOp:
    """A `mir.constant` of the given shape with every element `value`."""
    ty = TensorType(element_type, shape)
    return mir.ConstantOp(DenseIntOrFPElementsAttr.from_list(ty, [value]))


__all__ = [
    "ACTIVATION_OPS", "REMOVED_BY", "OpSequence", "fn_symbols", "parse_max_dims",
    "require_lowered", "splat_constant", "symbol_bounds",
]
