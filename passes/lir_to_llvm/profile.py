"""The instrumented build of `convert-lir-to-llvm{profile=true}`: time stamps around
every kernel call of the entry, written by each thread into an event log after the arena.

The normal build is never instrumented; `CompiledGraph.profile` compiles this variant.
At every call site of the entry (a kernel, its serial wrapper or row driver, or
`rlx_barrier`) the entry reads the time stamp counter before and after the call and
calls `rlx_profile_record(log, part, site, t0, t1)`. Each call site carries, while it is
in the llvm dialect, the discardable attribute `rlx.profile_site`: a JSON object naming
its kernel (`kernel`: the llvm function, `op`: the lir op, `origin`, the operands'
symbolic `shapes` and `element_bytes`, `serial`: runs on thread 0 only, `phase`: the
kernel's `rlx.phase`, see `rlx_mlir.passes.phases`; a barrier takes the phase of the
kernel before it, whose stragglers it waits for).

The log's layout (where it lives in the arena buffer, its events) is
`rlx_mlir.core.profile_log`, shared with the profiler that reads it.
"""

from __future__ import annotations

import json
from typing import Any

from xdsl.dialects import llvm
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, StringAttr, i8, i64
from xdsl.ir import Operation, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from rlx_mlir.core.abi import (
    ARENA_BYTES,
    ARG_ROLE,
    BARRIER,
    ENTRY_EXTRA_ROLES,
    ROLE_ARENA,
    ROLE_PART,
    SERIAL_SUFFIX,
)
from rlx_mlir.core.dtypes import element_bytes
from rlx_mlir.core.locations import origin
from rlx_mlir.core.profile_log import (
    CLOCK,
    EVENT_BYTES,
    LOG_HEADER_BYTES,
    PROFILE_SITE,
    RECORD,
    log_offset,
)
from rlx_mlir.dialects import lir
from rlx_mlir.passes.lir_to_llvm.builder import PTR, KernelBuilder
from rlx_mlir.passes.lir_to_llvm.dynamic import memref_operands, operand_shapes
from rlx_mlir.passes.phases import Phase, attached_phase

ORIGIN = "rlx.origin"
"""Discardable attribute of a kernel op: the user's block it came from."""
_RDTSC = "rdtsc\n\tshlq $$32, %rdx\n\torq %rdx, %rax"


def kernel_origins(fn: Operation) -> dict[Operation, str]:
    """The origin of every lir kernel op under `fn`: the names of its location (see
    `rlx_mlir.passes.provenance`), else its `rlx.origin` attribute, else its op name and
    a counter in schedule order (`matmul#2`: the third matmul without a location)."""
    origins: dict[Operation, str] = {}
    counts: dict[str, int] = {}
    for op in fn.walk():
        if isinstance(op, lir.KernelOp):
            short = op.name.split(".", 1)[1]
            number = counts.get(short, 0)
            counts[short] = number + 1
            attr = op.attributes.get(ORIGIN)
            located = origin(op)
            origins[op] = (located if located is not None else attr.data
                           if isinstance(attr, StringAttr) else f"{short}#{number}")
    return origins


def name_origins(module: ModuleOp) -> None:
    """Give every lir kernel op without one an `rlx.origin` (see `kernel_origins`)."""
    for op, name in kernel_origins(module).items():
        op.attributes[ORIGIN] = StringAttr(name)


def mark_site(call: llvm.CallOp, op: Operation) -> None:
    """Record on the call that replaces the kernel op `op` what the profile reports of it."""
    origin = op.attributes.get(ORIGIN)
    info = {
        "kernel": call.callee.string_value(),
        "op": op.name.split(".", 1)[1],
        "origin": origin.data if isinstance(origin, StringAttr) else op.name.split(".", 1)[1],
        "shapes": [list(shape) for shape in operand_shapes(op)],
        "element_bytes": [element_bytes(v.type.get_element_type()) for v in memref_operands(op)],
        "serial": call.callee.string_value().endswith(SERIAL_SUFFIX),
        "phase": (attached_phase(op) or Phase.STEADY_STATE).value,
    }
    call.attributes[PROFILE_SITE] = StringAttr(json.dumps(info))


def _entries(module: ModuleOp) -> list[llvm.FuncOp]:
    """The graph entries: llvm functions with an arena argument."""
    found = []
    for fn in module.ops:
        if isinstance(fn, llvm.FuncOp) and fn.body.blocks and fn.arg_attrs is not None:
            roles = [a.data.get(ARG_ROLE) for a in fn.arg_attrs.data]
            if StringAttr(ROLE_ARENA) in roles:
                found.append(fn)
    return found


def _arena_bytes(entry: llvm.FuncOp) -> int:
    for attrs in entry.arg_attrs.data:
        if ARENA_BYTES in attrs.data:
            return attrs.data[ARENA_BYTES].value.data
    return 0


def _rdtsc() -> llvm.InlineAsmOp:
    return llvm.InlineAsmOp(_RDTSC, "={ax},~{dx},~{flags},~{memory}", [], [i64],
                           has_side_effects=True)


def instrument_entries(module: ModuleOp) -> None:
    """Time every kernel and barrier call of every entry (see the module docstring), and
    add `rlx_profile_record` and `rlx_profile_clock` to the module."""
    entries = _entries(module)
    for entry in entries:
        _instrument(entry)
    if entries:
        module.body.block.add_ops([_build_record(), _build_clock()])


def _instrument(entry: llvm.FuncOp) -> None:
    first = entry.body.blocks.first
    assert first is not None and first.first_op is not None
    args = first.args[-len(ENTRY_EXTRA_ROLES):]
    arena = args[ENTRY_EXTRA_ROLES.index(ROLE_ARENA)]
    part = args[ENTRY_EXTRA_ROLES.index(ROLE_PART)]
    offset = llvm.ConstantOp(IntegerAttr(log_offset(_arena_bytes(entry)), i64), i64)
    log = llvm.GEPOp.from_mixed_indices(arena, [offset.result], i8, inbounds=True)
    Rewriter.insert_op([offset, log], InsertPoint.at_start(first))
    calls = [op for op in entry.walk() if isinstance(op, llvm.CallOp)
             and (PROFILE_SITE in op.attributes or op.callee.string_value() == BARRIER)]
    phase = Phase.PROLOGUE.value  # of a barrier before any kernel
    for site, call in enumerate(calls):
        if PROFILE_SITE not in call.attributes:
            call.attributes[PROFILE_SITE] = StringAttr(json.dumps(
                {"kernel": BARRIER, "op": "barrier", "origin": "barrier", "shapes": [],
                 "element_bytes": [], "serial": False, "phase": phase}))
        phase = json.loads(call.attributes[PROFILE_SITE].data)["phase"]
        _time_call(call, site, log.result, part)


def _time_call(call: llvm.CallOp, site: int, log: SSAValue, part: SSAValue) -> None:
    start, end = _rdtsc(), _rdtsc()
    number = llvm.ConstantOp(IntegerAttr(site, i64), i64)
    record = llvm.CallOp(RECORD, log, part, number.result, start.results[0], end.results[0])
    Rewriter.insert_op(start, InsertPoint.before(call))
    Rewriter.insert_op([end, number, record], InsertPoint.after(call))


def _build_record() -> llvm.FuncOp:
    """`void rlx_profile_record(ptr log, i64 part, i64 site, i64 t0, i64 t1)`."""
    kb = KernelBuilder(RECORD, [PTR, i64, i64, i64, i64], vector_width=4,
                       noalias=[False] * 5)
    log, part, site, start, end = kb.args
    stride = kb.load(log, element=i64)
    with kb.if_(kb.icmp("sgt", stride, 0)):
        thread = kb.gep(log, kb.add(kb.mul(part, stride), LOG_HEADER_BYTES), i8)
        count = kb.load(thread, element=i64)
        capacity = kb.load(thread, 1, element=i64)
        with kb.if_(kb.icmp("slt", count, capacity)):
            event = kb.gep(thread, kb.add(kb.mul(count, EVENT_BYTES), LOG_HEADER_BYTES), i8)
            for word, value in enumerate((site, start, end)):
                kb.store(value, event, word, element=i64)
        kb.store(kb.add(count, 1), thread, element=i64)
    kb.ret()
    return kb.finish()


def _build_clock() -> llvm.FuncOp:
    """`i64 rlx_profile_clock()`: the time stamp counter."""
    kb = KernelBuilder(CLOCK, [], vector_width=4, result_type=i64, noalias=[])
    kb.ret(kb.insert(_rdtsc()))
    return kb.finish()


def profile_sites(module: ModuleOp) -> list[dict[str, Any]]:
    """The call sites of the (first) instrumented entry of `module`, in site order."""
    for entry in _entries(module):
        sites = [json.loads(op.attributes[PROFILE_SITE].data) for op in entry.walk()
                 if isinstance(op, llvm.CallOp) and PROFILE_SITE in op.attributes]
        if sites:
            return sites
    return []
