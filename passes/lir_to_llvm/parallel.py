"""Multi-threaded execution inside generated code: a spin barrier and serial wrappers.

Every thread of a call runs the same entry function with its thread id `part` and the
thread count `parts`. Each kernel call passes `(part, parts)` on: a partitioned kernel
computes its share of the output; a serial kernel is called through a wrapper that
runs it on thread 0 only. `rlx_barrier(state, part, parts, mode)` separates kernels whose
data crosses threads (full, or one-sided: see `build_barrier`). It spins with `pause` (a
few hundred nanoseconds when the threads are balanced) and yields the CPU after a while,
so an oversubscribed machine still makes progress. The atomics are x86 inline assembly (xDSL's llvm dialect has no atomic ops).
"""

from __future__ import annotations

from xdsl.dialects import llvm
from xdsl.dialects.builtin import i32, i64
from xdsl.ir import Attribute, Region, SSAValue

from rlx_mlir.core.abi import (
    BARRIER,
    SYNC_ARRIVALS_OFFSET,
    SYNC_LINE_BYTES,
    SYNC_RELEASE_OFFSET,
    SYNC_THREADS_OFFSET,
    TICKET_BUMP,
    TICKET_WAIT,
    WORKER_SUFFIX,
)
from rlx_mlir.passes.lir_to_llvm.builder import PTR, KernelBuilder

SCHED_YIELD = "sched_yield"
SPINS_BEFORE_YIELD = 4096


def _asm(kb: KernelBuilder, text: str, constraints: str, operands: list[SSAValue],
         result: Attribute | None = None) -> SSAValue | None:
    op = llvm.InlineAsmOp(text, constraints, operands, [result] if result else None,
                          has_side_effects=True)
    return kb.insert(op)


BARRIER_MODES = {None: 0, "gather": 1, "release": 2}
"""`rlx_barrier`'s `mode` argument per `lir.barrier` kind."""
WORD_BYTES = 8


def build_barrier() -> list[llvm.FuncOp]:
    """`void rlx_barrier(ptr state, i64 part, i64 parts, i64 mode)` and the declaration of
    libc's sched_yield it calls.

    The state is `sync_bytes(parts)` (core/abi.py): the release epoch, the arrival count,
    and a line per thread that only it touches: the barriers it passed (its epoch e) and
    the counting ones among them (c). Every thread passes the same barriers, so the k-th
    barrier of a call has the same e and c on every thread. A full barrier and a gather
    count: each thread adds 1 to the arrivals (`lock xadd`), so all have arrived at the
    c-th counting barrier when the count reaches c·parts (a thread past a gather cannot
    count again before thread 0 releases it: the next barrier after a gather is a
    release, or the call ends and the next starts only after thread 0 returned). Full: the last to arrive publishes e as the release epoch and
    the others wait for it. Gather: thread 0 waits for the count, the others go on.
    Release: thread 0 publishes e, the others wait for it. x86's stores are seen in
    program order, so an arrival (a release) is seen after the kernel's writes before it."""
    kb = KernelBuilder(BARRIER, [PTR, i64, i64, i64], vector_width=4, noalias=[False] * 4)
    state, part, parts, mode = kb.args
    with kb.if_(kb.icmp("sgt", parts, 1)):
        release = kb.gep(state, SYNC_RELEASE_OFFSET // WORD_BYTES, i64)
        arrivals = kb.gep(state, SYNC_ARRIVALS_OFFSET // WORD_BYTES, i64)
        own = kb.gep(state, kb.add(kb.mul(part, SYNC_LINE_BYTES // WORD_BYTES),
                                   SYNC_THREADS_OFFSET // WORD_BYTES), i64)
        own_count = kb.gep(own, 1, i64)
        epoch = kb.add(_load(kb, own), 1)
        _store(kb, epoch, own)
        leader = kb.icmp("eq", part, 0)
        with kb.if_(kb.icmp("ne", mode, BARRIER_MODES["release"])):
            count = kb.add(_load(kb, own_count), 1)
            _store(kb, count, own_count)
            arrived = _asm(kb, "lock xaddq $0, ($2)", "=r,0,r,~{memory},~{flags}",
                           [kb.index(1), arrivals], i64)
            everyone = kb.mul(count, parts)
            with kb.if_(kb.icmp("eq", mode, BARRIER_MODES[None])):
                with kb.if_(kb.icmp("eq", kb.add(arrived, 1), everyone)):
                    _store(kb, epoch, release)
                _spin_while_below(kb, release, epoch)
            gather = kb.icmp("eq", mode, BARRIER_MODES["gather"])
            with kb.if_(kb.insert(llvm.AndOp(leader, gather))):
                _spin_while_below(kb, arrivals, everyone)
        with kb.if_(kb.icmp("eq", mode, BARRIER_MODES["release"])):
            with kb.if_(leader):
                _store(kb, epoch, release)
            _spin_while_below(kb, release, epoch)
    kb.ret()
    declaration = llvm.FuncOp(SCHED_YIELD, llvm.LLVMFunctionType([], i32),
                              linkage=llvm.LinkageAttr("external"), body=Region())
    return [kb.finish(), declaration]


def _load(kb: KernelBuilder, address: SSAValue) -> SSAValue:
    return _asm(kb, "movq ($1), $0", "=r,r,~{memory}", [address], i64)


def _store(kb: KernelBuilder, value: SSAValue, address: SSAValue) -> None:
    _asm(kb, "movq $0, ($1)", "r,r,~{memory}", [value, address])


def _spin_while_below(kb: KernelBuilder, address: SSAValue, epoch: SSAValue) -> None:
    """while (*address < epoch) { pause; every SPINS_BEFORE_YIELD rounds sched_yield(); }"""
    header = kb.new_block([i64])
    body = kb.new_block()
    done = kb.new_block()
    kb.insert(llvm.BrOp(header, kb.index(0)))
    kb.move_to(header)
    (count,) = header.args
    kb.insert(llvm.CondBrOp(kb.icmp("slt", _load(kb, address), epoch), body, [], done, []))
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



def build_ticket_functions() -> list[llvm.FuncOp]:
    """The runtime's wake-up word, for workers that spin a little before sleeping:

    - `i64 rlx_ticket_wait(ptr word, i64 seen, i64 spins)`: the word's value as soon as it
      differs from `seen`, or `seen` after `spins` rounds of `pause`;
    - `i64 rlx_ticket_bump(ptr word)`: atomically add 1, return the new value.
    """
    wait = KernelBuilder(TICKET_WAIT, [PTR, i64, i64], vector_width=4, result_type=i64,
                         noalias=[False, False, False])
    word, seen, spins = wait.args
    header, body, done = wait.new_block([i64]), wait.new_block(), wait.new_block([i64])
    wait.insert(llvm.BrOp(header, wait.index(0)))
    wait.move_to(header)
    (count,) = header.args
    current = _load(wait, word)
    changed = wait.or_(wait.icmp("ne", current, seen), wait.icmp("sge", count, spins))
    wait.insert(llvm.CondBrOp(changed, done, [current], body, []))
    wait.move_to(body)
    _asm(wait, "pause", "~{memory}", [])
    wait.insert(llvm.BrOp(header, wait.add(count, 1)))
    wait.move_to(done)
    wait.ret(done.args[0])

    bump = KernelBuilder(TICKET_BUMP, [PTR], vector_width=4, result_type=i64, noalias=[False])
    (word,) = bump.args
    old = _asm(bump, "lock xaddq $0, ($2)", "=r,0,r,~{memory},~{flags}", [bump.index(1), word], i64)
    bump.ret(bump.add(old, 1))
    return [wait.finish(), bump.finish()]


def build_worker_loop(entry: llvm.FuncOp) -> llvm.FuncOp:
    """`i64 <entry>__worker(ptr ticket, ptr argblock, i64 part, i64 parts, i64 seen, i64 spins)`.

    A worker thread stays in this loop between calls, without the GIL: it spins on the
    ticket word; when the ticket moves it loads the call's arguments from `argblock`
    (the entry's arguments up to the arena in order, one 64-bit word each: pointers,
    run-time sizes and the position; the barrier state last) and runs
    its part of the entry; after `spins` idle rounds it returns the last ticket it served
    so the Python side can go to sleep.
    """
    inputs = list(entry.function_type.inputs.data)
    pointer_count = len(inputs) - 3  # graph args + arena; then part, parts, sync
    kb = KernelBuilder(entry.sym_name.data + WORKER_SUFFIX, [PTR, PTR, i64, i64, i64, i64],
                       vector_width=4, result_type=i64, noalias=[False] * 6)
    ticket, argblock, part, parts, seen0, spins = kb.args
    header = kb.new_block([i64, i64])
    check_timeout, spin, run, done = kb.new_block(), kb.new_block(), kb.new_block([i64]), kb.new_block()
    kb.insert(llvm.BrOp(header, seen0, kb.index(0)))
    kb.move_to(header)
    seen, count = header.args
    current = _load(kb, ticket)
    kb.insert(llvm.CondBrOp(kb.icmp("ne", current, seen), run, [current], check_timeout, []))
    kb.move_to(check_timeout)
    kb.insert(llvm.CondBrOp(kb.icmp("sge", count, spins), done, [], spin, []))
    kb.move_to(spin)
    _asm(kb, "pause", "~{memory}", [])
    kb.insert(llvm.BrOp(header, seen, kb.add(count, 1)))
    kb.move_to(run)
    word_types = [*inputs[:pointer_count], PTR]  # pointers, sizes, position; sync last
    pointers = [kb.insert(llvm.LoadOp(kb.gep(argblock, i, i64), ty, alignment=8))
                for i, ty in enumerate(word_types)]
    kb.call(entry.sym_name.data, [*pointers[:-1], part, parts, pointers[-1]], i32)
    kb.insert(llvm.BrOp(header, run.args[0], kb.index(0)))
    kb.move_to(done)
    kb.ret(seen)
    return kb.finish()
