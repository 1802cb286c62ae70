"""`mir-inline-functions`: every `func.call` of a function of the module is replaced by a
copy of the function's body, and the private functions nothing calls any more are erased.

`Graph.custom_fn` builds a private `func.func @name` and calls it; the call stays through
hir and mir (it names the sub-graph) and is inlined here, first in the lir stage, because
bufferization and the arena plan work on the one graph function. xDSL 0.74 has no inliner
for `func.call` (only the stencil and snrt ones), hence this small pass.

Provenance: an inlined op keeps its own location under the call's as a scope, so the
profile and the kernel origins show it under the function's name: inside a call located
`mlp#1`, `matmul#0/gelu` becomes `mlp#1.matmul#0/gelu` (each name of a fused location
likewise). A call without a location names its ops after the callee.

The ops computing results of a call that nothing uses are erased (side-effect-free ops
without uses, as canonicalize's DCE does: it ran before the inlining and a call is not
side-effect free). Calls inside an inlined body are inlined in turn (custom functions may call others, not
recursively: a call of the function it is in is an error). A call of a declaration (a
function without a body) is left alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import FusedLoc, ModuleOp, NameLoc, NoneAttr
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint
from xdsl.traits import SymbolTable
from xdsl.transforms.dead_code_elimination import dce

from rlx_mlir.core.errors import GraphError
from rlx_mlir.core.locations import loc_names, name_loc


def scoped_location(location: Attribute, scope: str) -> Attribute:
    """`location` with `scope.` before each of its names (unknown locations stay)."""
    if isinstance(location, NameLoc):
        return name_loc(f"{scope}.{location.desc.data}")
    if isinstance(location, FusedLoc):
        return FusedLoc([scoped_location(inner, scope) for inner in location.locations.data],
                        NoneAttr())
    return location


def _callee(call: func.CallOp) -> func.FuncOp | None:
    """The function `call` calls, when the module defines it with a body."""
    callee = SymbolTable.lookup_symbol(call, call.callee)
    return callee if isinstance(callee, func.FuncOp) and not callee.is_declaration else None


def _enclosing_function(op: Operation) -> func.FuncOp | None:
    parent = op.parent_op()
    while parent is not None and not isinstance(parent, func.FuncOp):
        parent = parent.parent_op()
    return parent


@dataclass
class InlineCall(RewritePattern):
    """`func.call @f(args)` -> the ops of f's body on `args`, its returned values in place
    of the call's results."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: func.CallOp, rewriter: PatternRewriter, /) -> None:
        callee = _callee(op)
        if callee is None:
            return
        if callee is _enclosing_function(op):
            raise GraphError(f"mir-inline-functions: @{callee.sym_name.data} calls itself; "
                             "a recursive function cannot be inlined")
        names = loc_names(op.location)
        scope = names[0] if names else callee.sym_name.data
        block = callee.body.clone().block
        ret = block.last_op
        if not isinstance(ret, func.ReturnOp):
            raise GraphError(f"mir-inline-functions: @{callee.sym_name.data}: expected its body "
                             f"to end with func.return, got {ret.name if ret else 'nothing'}")
        results = [_argument_or(value, block, op.arguments) for value in ret.arguments]
        rewriter.erase(ret)
        for arg in block.args:
            arg.name_hint = None  # else the call's arguments take the callee's names
        for inner in block.walk():
            inner.location = scoped_location(inner.location, scope)
        rewriter.inline_block(block, InsertPoint.before(op), op.arguments)
        rewriter.replace(op, [], results)


def _argument_or(value: SSAValue, block: Block, arguments: tuple[SSAValue, ...] | list[SSAValue]
                 ) -> SSAValue:
    """The call's argument for a block argument of the inlined body, else `value`."""
    if value.owner is block:
        return arguments[block.args.index(value)]  # pyright: ignore[reportArgumentType]
    return value


def erase_uncalled(module: ModuleOp) -> None:
    """Erase the private functions no `func.call` of the module names."""
    called = {op.callee.root_reference.data for op in module.walk() if isinstance(op, func.CallOp)}
    for fn in list(module.ops):
        if (isinstance(fn, func.FuncOp) and fn.sym_visibility is not None
                and fn.sym_visibility.data == "private" and fn.sym_name.data not in called):
            fn.detach()
            fn.erase()


@dataclass(frozen=True)
class MirInlineFunctionsPass(ModulePass):
    """Inline every call of a function with a body; erase the private functions left
    uncalled (see the module doc)."""

    name = "mir-inline-functions"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(InlineCall(), apply_recursively=True).rewrite_module(op)
        erase_uncalled(op)
        dce(op)  # results of a call nothing used: canonicalize's DCE ran before the inlining


__all__ = ["InlineCall", "MirInlineFunctionsPass", "erase_uncalled", "scoped_location"]
