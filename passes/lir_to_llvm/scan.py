"""`lir.scan` -> a native loop in the entry function, around the kernels of its body.

Runs in convert-lir-to-llvm after the graph function became an `llvm.func` and before
the kernels, slots and views are lowered, so the body's ops are lowered afterwards like
any others (one call per kernel, GEPs for its arena slots). The scan's block becomes the
loop body:

    pre:     ...                                   br header(0, status)
    header(t, status): t < length ? body : exit
    body:    carry = t == 0 ? init : out (trajectory: row t - 1 of out)
             x = &xs[t] (one slice each), consts as they are
             ... the body's kernels ...
             lir.copy ins(yielded) outs(out, or row t of out)
             br header(t + 1, status | the statuses of the body's checked calls)
    exit:    the ops after the scan (status: the header's)

Buffers keep their memref types across the new blocks through
`builtin.unrealized_conversion_cast`s of the pointers, which the pass reconciles at the
end. Every thread of a call runs the loop; the body's kernels are serial (lir-parallelize
leaves a region op serial), so thread 0 computes every step in order.

Statuses: the loop carries the OR of the statuses of checked kernels (an out-of-range
gather index) in the header's second argument. Once the kernels are calls,
`CarryScanStatus` ORs the statuses of the calls of a block ending in one of the loop's
branches into the status it passes; the pre block passes on its own incoming status, and
`incoming_status(block)` gives the entry's return (in the exit block or a later one)
the statuses of every call before it.
"""

from __future__ import annotations

from xdsl.dialects import llvm
from xdsl.dialects.builtin import (
    IntegerAttr,
    MemRefType,
    UnitAttr,
    UnrealizedConversionCastOp,
    i1,
    i8,
    i32,
    i64,
)
from xdsl.ir import Block, Operation, SSAValue
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern

from rlx_mlir.dialects import lir
from rlx_mlir.dialects.llvm_vector import VectorSelectOp
from rlx_mlir.passes.lir_to_llvm.builder import PTR


def _insert(block: Block, ops: list[Operation], before: Operation | None = None) -> None:
    for op in ops:
        if before is None:
            block.add_op(op)
        else:
            block.insert_op_before(op, before)


def _cast(value: SSAValue, ty) -> UnrealizedConversionCastOp:
    return UnrealizedConversionCastOp.get([value], [ty])


def _constant(value: int, ty=i64) -> llvm.ConstantOp:
    return llvm.ConstantOp(IntegerAttr(value, ty), ty)


def _bytes(memref) -> int:
    assert isinstance(memref, MemRefType)
    return lir.byte_size(memref)


SCAN_STATUS = "rlx.loop_status"
"""On a branch into a scan's header until `CarryScanStatus` added the statuses of the
calls of its block to the status it passes."""

SCAN_HEADER = "rlx.loop_header"
"""On the conditional branch ending a scan's header (its arguments: step, status)."""


def incoming_status(block: Block) -> SSAValue | None:
    """The status of the checked calls that ran before `block`: the carried status of
    the scan whose header branches to it (its body or its exit), or None (the entry block:
    none ran)."""
    predecessors = block.predecessors()
    if len(predecessors) != 1:
        return None
    header = predecessors[0]
    terminator = header.last_op
    if terminator is None or SCAN_HEADER not in terminator.attributes:
        return None
    return header.args[1]


def _status_after(block: Block, before: Operation, status: SSAValue | None
                  ) -> tuple[list[Operation], SSAValue | None]:
    """OR of `status` and the statuses of the checked calls of `block` before `before`."""
    ops: list[Operation] = []
    for call in block.ops:
        if call is before:
            break
        if isinstance(call, llvm.CallOp) and call.returned is not None:
            if status is None:
                status = call.returned
            else:
                ops.append(combined := llvm.OrOp(status, call.returned))
                status = combined.results[0]
    return ops, status


def _row(ptr: SSAValue, index: SSAValue, row_bytes: int) -> list[Operation]:
    """&ptr[index·row_bytes] (bytes): the ops, the last one's result is the address."""
    size = _constant(row_bytes)
    offset = llvm.MulOp(index, size.results[0])
    gep = llvm.GEPOp.from_mixed_indices(ptr, [offset.results[0]], i8, inbounds=True)
    return [size, offset, gep]


class LowerScan(RewritePattern):
    """lir.scan -> the loop of the module docstring."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: lir.ScanOp, rewriter: PatternRewriter, /):
        pre = op.parent_block()
        region = pre.parent
        assert region is not None and op.next_op is not None
        exit_ = pre.split_before(op.next_op)
        length = op.length.value.data
        trajectory = op.trajectory is not None
        carry_type = op.init.type
        carry_bytes = _bytes(carry_type)

        # Pointers of the scan's operands, taken before the loop.
        pointers = [_cast(v, PTR) for v in (op.init, *op.xs, op.out)]
        _insert(pre, pointers, before=op)
        init_p, *xs_p, out_p = (c.results[0] for c in pointers)
        zero, no_error = _constant(0), _constant(0, i32)
        header = Block(arg_types=[i64, i32])
        region.insert_block_after(header, pre)
        _insert(pre, [zero, no_error], before=op)
        body = op.body.block
        op.body.detach_block(body)
        region.insert_block_after(body, header)

        # header(t): t < length ? body : exit
        t = header.args[0]
        stop = _constant(length)
        cond = llvm.ICmpOp(t, stop.results[0], IntegerAttr(
            llvm.ICmpPredicateFlag("slt").to_int(), i64))
        branch = llvm.CondBrOp(cond.results[0], body, [], exit_, [])
        branch.attributes[SCAN_HEADER] = UnitAttr()
        _insert(header, [stop, cond, branch])

        # The body's arguments: the carry, the xs slices, the consts.
        first = body.first_op
        carry_ops = self._carry(t, init_p, out_p, carry_bytes, trajectory)
        carry = _cast(carry_ops[-1].results[0], carry_type)
        ops: list[Operation] = [*carry_ops, carry]
        args = [carry.results[0]]
        for x_p, x, arg in zip(xs_p, op.xs, body.args[1:], strict=False):
            row = _row(x_p, t, _bytes(x.type) // length)
            view = _cast(row[-1].results[0], arg.type)
            ops += [*row, view]
            args.append(view.results[0])
        args += list(op.consts)
        _insert(body, ops, before=first)
        for arg, value in zip(list(body.args), args, strict=True):
            rewriter.replace_all_uses_with(arg, value)
        for arg in reversed(list(body.args)):
            body.erase_arg(arg)

        # yield y -> copy y to out (or its row t), then the next step.
        yielded = body.last_op
        assert isinstance(yielded, lir.YieldOp)
        if trajectory:
            dest_ops = _row(out_p, t, carry_bytes)
            dest = _cast(dest_ops[-1].results[0], carry_type)
            dest_ops.append(dest)
            destination = dest.results[0]
        else:
            dest_ops, destination = [], op.out
        one = _constant(1)
        step = llvm.AddOp(t, one.results[0])
        back = llvm.BrOp(header, step.results[0], header.args[1])
        back.attributes[SCAN_STATUS] = UnitAttr()
        _insert(body, [*dest_ops, lir.CopyOp(yielded.arguments[0], destination), one, step,
                       back], before=yielded)
        rewriter.erase(yielded)

        status_in = incoming_status(pre) or no_error.results[0]
        enter = llvm.BrOp(header, zero.results[0], status_in)
        enter.attributes[SCAN_STATUS] = UnitAttr()
        rewriter.replace(op, enter, new_results=[])

    @staticmethod
    def _carry(t: SSAValue, init_p: SSAValue, out_p: SSAValue, carry_bytes: int,
               trajectory: bool) -> list[Operation]:
        """The carry of step t: init at t = 0, else out (or its row t - 1)."""
        ops: list[Operation] = []
        previous = out_p
        if trajectory:
            one = _constant(1)
            back = llvm.SubOp(t, one.results[0])
            row = _row(out_p, back.results[0], carry_bytes)
            ops += [one, back, *row]
            previous = row[-1].results[0]
        zero = _constant(0)
        first = llvm.ICmpOp(t, zero.results[0], IntegerAttr(
            llvm.ICmpPredicateFlag("eq").to_int(), i64))
        assert first.results[0].type == i1
        choice = VectorSelectOp(first.results[0], init_p, previous)
        return [*ops, zero, first, choice]


class CarryScanStatus(RewritePattern):
    """A branch into a scan's header passes its status OR the statuses of the checked
    calls of its block (run once the kernels are calls)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: llvm.BrOp, rewriter: PatternRewriter, /):
        if SCAN_STATUS not in op.attributes:
            return
        block = op.parent_block()
        assert block is not None
        step, status = op.operands
        ops, combined = _status_after(block, op, status)
        branch = llvm.BrOp(op.successor, step, combined or status)
        rewriter.replace(op, [*ops, branch], new_results=[])


def return_status(block: Block, before: Operation) -> tuple[list[Operation], SSAValue | None]:
    """The ops computing the status a return ending `block` reports (the statuses of every
    checked call before it, scans included), and that status (None: no checked call)."""
    return _status_after(block, before, incoming_status(block))


__all__ = ["CarryScanStatus", "LowerScan", "incoming_status", "return_status"]
