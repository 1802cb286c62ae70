"""`lir.scan` -> a native loop in the entry function, around the kernels of its body.

Runs in convert-lir-to-llvm after the graph function became an `llvm.func` and before
the kernels, slots and views are lowered, so the body's ops are lowered afterwards like
any others (one call per kernel, GEPs for its arena slots). The scan's block becomes the
loop body:

    pre:     ...                                   br header(0)
    header(t): t < length ? body : exit
    body:    carry = t == 0 ? init : out (trajectory: row t - 1 of out)
             x = &xs[t] (one slice each), consts as they are
             ... the body's kernels ...
             lir.copy ins(yielded) outs(out, or row t of out)   br header(t + 1)
    exit:    the ops after the scan

Buffers keep their memref types across the new blocks through
`builtin.unrealized_conversion_cast`s of the pointers, which the pass reconciles at the
end. Every thread of a call runs the loop; the body's kernels are serial (lir-parallelize
leaves a region op serial), so thread 0 computes every step in order. A checked kernel
(gather) inside a body does not report its status yet.
"""

from __future__ import annotations

from xdsl.dialects import llvm
from xdsl.dialects.builtin import IntegerAttr, MemRefType, UnrealizedConversionCastOp, i1, i8, i64
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
        zero = _constant(0)
        header = Block(arg_types=[i64])
        region.insert_block_after(header, pre)
        _insert(pre, [zero], before=op)
        body = op.body.block
        op.body.detach_block(body)
        region.insert_block_after(body, header)

        # header(t): t < length ? body : exit
        t = header.args[0]
        stop = _constant(length)
        cond = llvm.ICmpOp(t, stop.results[0], IntegerAttr(
            llvm.ICmpPredicateFlag("slt").to_int(), i64))
        _insert(header, [stop, cond, llvm.CondBrOp(cond.results[0], body, [], exit_, [])])

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
        _insert(body, [*dest_ops, lir.CopyOp(yielded.arguments[0], destination), one, step,
                       llvm.BrOp(header, step.results[0])], before=yielded)
        rewriter.erase(yielded)

        rewriter.replace(op, llvm.BrOp(header, zero.results[0]), new_results=[])

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


__all__ = ["LowerScan"]
