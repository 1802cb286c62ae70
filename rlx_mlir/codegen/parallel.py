"""Multi-threaded execution inside generated code: a spin barrier and serial wrappers.

Every thread of a call runs the same entry function with its thread id `part` and the
thread count `parts`. Each kernel call passes `(part, parts)` on: a partitioned kernel
computes its share of the output; a serial kernel is called through a wrapper that
runs it on thread 0 only. `rlx_barrier(state, parts)` separates kernels whose data
crosses threads. It spins with `pause` (a few hundred nanoseconds when the threads are
balanced) and yields the CPU after a while, so an oversubscribed machine still makes
progress. The atomics are x86 inline assembly (xDSL's llvm dialect has no atomic ops).
"""

from __future__ import annotations

from xdsl.dialects import llvm
from xdsl.dialects.builtin import i32, i64
from xdsl.ir import Attribute, Region, SSAValue

from rlx_mlir.codegen.builder import PTR, KernelBuilder

BARRIER = "rlx_barrier"
SERIAL_SUFFIX = "__serial"
"""Name suffix of the wrappers that run a serial kernel on thread 0 only."""
SCHED_YIELD = "sched_yield"
SYNC_BYTES = 128
"""Bytes of barrier state per graph: the arrival count and the generation, on two cache lines."""
SPINS_BEFORE_YIELD = 4096


def _asm(kb: KernelBuilder, text: str, constraints: str, operands: list[SSAValue],
         result: Attribute | None = None) -> SSAValue | None:
    op = llvm.InlineAsmOp(text, constraints, operands, [result] if result else None,
                          has_side_effects=True)
    return kb.insert(op)


def build_barrier() -> list[llvm.FuncOp]:
    """`void rlx_barrier(ptr state, i64 parts)` (sense-reversing, generation-counted) and the
    declaration of libc's sched_yield it calls."""
    kb = KernelBuilder(BARRIER, [PTR, i64], vector_width=4, noalias=[False, False])
    state, parts = kb.args
    with kb.if_(kb.icmp("sgt", parts, 1)):
        generation_ptr = kb.gep(state, 8, i64)  # 64 bytes further: its own cache line
        generation = _asm(kb, "movq ($1), $0", "=r,r,~{memory}", [generation_ptr], i64)
        arrived = _asm(kb, "lock xaddq $0, ($2)", "=r,0,r,~{memory}", [kb.index(1), state], i64)
        last = kb.icmp("eq", arrived, kb.sub(parts, 1))
        with kb.if_(last):
            _asm(kb, "movq $0, ($1)", "r,r,~{memory}", [kb.index(0), state])
            _asm(kb, "lock addq $0, ($1)", "r,r,~{memory}", [kb.index(1), generation_ptr])
        with kb.if_(_not(kb, last)):
            _spin_until_changed(kb, generation_ptr, generation)
    kb.ret()
    declaration = llvm.FuncOp(SCHED_YIELD, llvm.LLVMFunctionType([], i32),
                              linkage=llvm.LinkageAttr("external"), body=Region())
    return [kb.finish(), declaration]


def _not(kb: KernelBuilder, flag: SSAValue) -> SSAValue:
    return kb.insert(llvm.XOrOp(flag, kb.constant(1, flag.type)))


def _spin_until_changed(kb: KernelBuilder, address: SSAValue, seen: SSAValue) -> None:
    """while (*address == seen) { pause; every SPINS_BEFORE_YIELD rounds sched_yield(); }"""
    header = kb.new_block([i64])
    body = kb.new_block()
    done = kb.new_block()
    kb.insert(llvm.BrOp(header, kb.index(0)))
    kb.move_to(header)
    (count,) = header.args
    current = _asm(kb, "movq ($1), $0", "=r,r,~{memory}", [address], i64)
    kb.insert(llvm.CondBrOp(kb.icmp("eq", current, seen), body, [], done, []))
    kb.move_to(body)
    _asm(kb, "pause", "~{memory}", [])
    with kb.if_(kb.icmp("eq", kb.srem(count, SPINS_BEFORE_YIELD), SPINS_BEFORE_YIELD - 1)):
        kb.call(SCHED_YIELD, [], i32)
    kb.insert(llvm.BrOp(header, kb.add(count, 1)))
    kb.move_to(done)


def build_serial_wrapper(name: str, kernel: llvm.FuncOp) -> llvm.FuncOp:
    """`name(args..., part, parts)`: calls `kernel(args...)` on part 0 only."""
    arg_types = list(kernel.function_type.inputs.data)
    result = kernel.function_type.output
    checked = not isinstance(result, llvm.LLVMVoidType)
    kb = KernelBuilder(name, [*arg_types, i64, i64], vector_width=4,
                       result_type=i32 if checked else None,
                       noalias=[False] * (len(arg_types) + 2))
    *args, part, _parts = kb.args
    if not checked:
        with kb.if_(kb.icmp("eq", part, 0)):
            kb.call(kernel.sym_name.data, args)
        kb.ret()
        return kb.finish()
    then, merge = kb.new_block(), kb.new_block([i32])
    kb.insert(llvm.CondBrOp(kb.icmp("eq", part, 0), then, [], merge, [kb.constant(0, i32)]))
    kb.move_to(then)
    status = kb.call(kernel.sym_name.data, args, i32)
    kb.insert(llvm.BrOp(merge, status))
    kb.move_to(merge)
    kb.ret(merge.args[0])
    return kb.finish()


