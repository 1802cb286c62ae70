"""The entry ABI: how a graph function's arguments are named, what they are for, and what
a compiled entry returns. Every layer that reads or writes these attributes (the Graph
builder, the passes, the compiled-graph runtime, the tools) takes the names from here.

A graph function's argument carries the argument attributes

    {rlx.name = "x", rlx.role = "input" | "param" | "output" | "state"}

and, once lowered to llvm (`convert-lir-to-llvm`), the entry point is

    llvm.func @graph(ptr %arg {rlx.name, rlx.role, rlx.type[, rlx.layout]}...,
                     ptr %arena {rlx.role = "arena", rlx.arena_bytes, rlx.naive_bytes},
                     i64 %part {rlx.role = "part"}, i64 %parts {rlx.role = "parts"},
                     ptr %sync {rlx.role = "sync"}) -> i32

returning `STATUS_OK` or one of the codes of `ERROR_MESSAGES`. A graph that splits work
across threads also has `@<graph>__worker` (`WORKER_SUFFIX`), the native loop a worker
thread waits in; every thread of a call shares the `sync_bytes(threads)` of barrier state.

`entry_function` finds a module's graph function; `name_arguments` gives hand-written
arguments their default names and roles (the pipeline and `rlx-lower` start with it).

`EntryABI.from_llvm` reads all of it back from the llvm entry into one typed value (what a
compiled model needs to call its machine code), which the disk cache stores as JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from xdsl.dialects import func, llvm
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    FunctionType,
    IntegerAttr,
    ModuleOp,
    StringAttr,
)

from rlx_mlir.core import shape_inference as rules
from rlx_mlir.core.dtypes import element_name
from rlx_mlir.core.errors import GraphError, RlxError
from rlx_mlir.core.profile_log import PROFILE_SITE

# ----------------------------------------------------------------------------- attribute names

ARG_NAME = "rlx.name"
"""Argument attribute holding an argument's name (survives every stage)."""
ARG_ROLE = "rlx.role"
"""Argument attribute holding an argument's role (one of the `ROLE_*` values)."""
ARG_TYPE = "rlx.type"
"""llvm-entry argument attribute: the memref type the pointer stands for."""
ARG_DIMS = "rlx.dims"
"""Argument (and result) attribute of a value with symbolic dims: its shape with the
symbol names, an array of sizes and names, `["S", 64]` for `tensor<?x64xf32>`. Only
symbolic shapes carry it (a static shape is its type)."""
ARG_LAYOUT = "rlx.layout"
"""Argument attribute naming a non-default layout of the argument's buffer (`LAYOUT_*`)."""
ARENA_BYTES = "rlx.arena_bytes"
"""Arena-argument attribute: the bytes the caller must pass."""
NAIVE_BYTES = "rlx.naive_bytes"
"""Arena-argument attribute: the bytes all intermediates would take without reuse."""
MAX_DIMS = "rlx.max_dims"
"""Function attribute set by lir-plan-arena on a graph with symbols: the bound of each
symbol its plan holds for (a dictionary, `{S = 2048 : i64}`)."""
ARG_BOUND = "rlx.bound"
"""llvm-entry attribute of a size argument (role `dim`): the largest size the arena was
planned for."""
ARG_UPDATE = "rlx.update"
"""llvm-entry attribute of a state argument: how a call changes it, `UPDATE_APPEND` (rows
[P, P+S) of a KV cache) or `UPDATE_ASSIGN` (the whole state)."""
UPDATE_APPEND = "append"
UPDATE_ASSIGN = "assign"
ARG_ROLLBACK = "rlx.rollback"
"""Argument attribute of a state declared with `g.state(..., rollback=False)` (weights,
optimizer moments), present only then and `false`: a call that fails does not restore it
(no snapshot copy) and `reset()` does not zero it. It survives every stage."""
CACHE_DIMS = "rlx.cache_dims"
"""Function attribute of a graph that appends to KV caches: a dictionary from each symbol
the appends define (`"T"`) to `[appended, capacity]`, the size of the rows appended (a
symbol or an int) and the cache capacity, so T = position + appended <= capacity."""
PARALLEL = "rlx.parallel"
"""Discardable unit attribute on an lir kernel op (set by `lir-parallelize`): its work is
split across the threads of a call (it is lowered with its partitioned builder)."""

# ----------------------------------------------------------------------------- roles

ROLE_INPUT = "input"
"""A graph input, passed on every call."""
ROLE_PARAM = "param"
"""A weight: passed on every call or bound once at compile time."""
ROLE_OUTPUT = "output"
"""A result buffer the callee writes (in lir and llvm, where results are arguments)."""
ROLE_STATE = "state"
"""A buffer that persists across calls and is updated in place (coming with state ops)."""
ROLE_POSITION = "position"
"""The model's position P (an `index` argument; i64 in the llvm entry): where the next
rows of every KV cache go. The caller owns it and advances it by S after a call."""
ROLE_DIM = "dim"
"""An llvm-entry i64 argument holding the run-time size of the symbol in its `rlx.name`
(one per symbol of the graph, sorted by name, after the graph's own arguments)."""
ROLE_ARENA = "arena"
"""The llvm entry's pointer to the planned arena of intermediate buffers."""
ROLE_PART = "part"
"""The llvm entry's thread id, in [0, parts)."""
ROLE_PARTS = "parts"
"""The llvm entry's thread count."""
ROLE_SYNC = "sync"
"""The llvm entry's pointer to the barrier state shared by the threads of a call."""

GRAPH_ROLES = (ROLE_INPUT, ROLE_PARAM, ROLE_OUTPUT, ROLE_STATE)
"""Roles of a graph's own arguments."""
ENTRY_EXTRA_ROLES = (ROLE_ARENA, ROLE_PART, ROLE_PARTS, ROLE_SYNC)
"""The llvm entry's arguments after the graph's own, in order."""
SCALAR_ROLES = (ROLE_POSITION, ROLE_DIM)
"""Roles of the llvm entry's i64 arguments the caller passes (not buffers)."""

INDEX_DTYPE = "index"
"""The dtype of a scalar argument (the position, a symbol's size) in the ABI."""

# ----------------------------------------------------------------------------- layouts

LAYOUT_PACKED_RHS = "packed_rhs"
"""`rlx.layout` of a weight in the prepacked matmul-rhs panel layout
(`rlx_mlir.core.packing.pack_rhs`), packed once when it is bound."""

LAYOUT_INTERLEAVED = "interleaved"
"""Prefix of the `rlx.layout` of GGUF block rows interleaved W rows at a time for the int8
kernels, `interleaved:<scheme>:<W>` (`rlx_mlir.core.packing.interleave_blocks`), packed
once when it is bound."""

# ----------------------------------------------------------------------------- threads

WORKER_SUFFIX = "__worker"
"""Name suffix of a graph's native worker loop, `@<graph>__worker`."""
SYNC_RELEASE_OFFSET, SYNC_ARRIVALS_OFFSET, SYNC_THREADS_OFFSET = 0, 128, 256
"""Byte offsets in the barrier state: the release epoch, the arrival count (128 bytes
apart: Intel's adjacent-line prefetcher pairs lines), then a cache line per thread (see
passes/lir_to_llvm/parallel.py)."""
SYNC_LINE_BYTES = 64


def sync_bytes(threads: int) -> int:
    """Bytes of barrier state of a graph run by `threads` threads."""
    return SYNC_THREADS_OFFSET + SYNC_LINE_BYTES * threads


BARRIER = "rlx_barrier"
"""`void rlx_barrier(ptr sync, i64 part, i64 parts, i64 mode)`: the spin barrier between
kernels (mode: full, gather or release)."""
SERIAL_SUFFIX = "__serial"
"""Name suffix of the wrappers that run a serial kernel on thread 0 only."""
TICKET_WAIT = "rlx_ticket_wait"
"""`i64 rlx_ticket_wait(ptr word, i64 seen, i64 spins)`: the word's value as soon as it
differs from `seen`, or `seen` after `spins` rounds of `pause`."""
TICKET_BUMP = "rlx_ticket_bump"
"""`i64 rlx_ticket_bump(ptr word)`: atomically add 1, return the new value (wakes the
workers spinning on the word for the next call)."""

# ----------------------------------------------------------------------------- status codes

STATUS_OK = 0
"""What the entry returns when every checked kernel succeeded."""
STATUS_INDEX_OUT_OF_RANGE = 1
"""A gather (or embedding) index is negative or not below the gathered dimension."""

STATUS_SLOT_OUT_OF_RANGE = 2
"""A slot or position of a slot cache (`cache_append` with slots, `slot_attention`) is
negative or not below the cache's slots or capacity."""

ERROR_MESSAGES = {
    STATUS_INDEX_OUT_OF_RANGE: "an index (gather or embedding id) is negative or out of range",
    STATUS_SLOT_OUT_OF_RANGE: "a slot or position of a slot cache (cache_append with slots, "
                              "slot_attention) is negative or out of range",
}
"""Non-zero status codes a compiled graph can return, and what they mean. The entry ORs
the statuses of its checked kernels, so every code is a distinct bit."""


# ----------------------------------------------------------------------------- the graph function


def entry_function(module: Any) -> func.FuncOp | llvm.FuncOp:
    """The graph function of a module: its only public `func.func` (or the only one), or
    after convert-lir-to-llvm the `llvm.func` that takes the arena."""
    ops = list(module.body.block.ops)
    funcs = [op for op in ops if isinstance(op, func.FuncOp)]
    public = [f for f in funcs if f.sym_visibility is None or f.sym_visibility.data == "public"]
    candidates = public or funcs or [op for op in ops if isinstance(op, llvm.FuncOp) and _is_entry(op)]
    if len(candidates) != 1:
        names = ", ".join(f.sym_name.data for f in candidates) or "none"
        raise GraphError(f"expected exactly one graph function in the module, got {len(candidates)} ({names})")
    return candidates[0]


def keep_results(module: ModuleOp, names: tuple[str, ...]) -> None:
    """Make the graph function (at hir or mir) return only the results `names`, in that
    order, in place: another entry of the same graph (e.g. a decoder's sampled ids without
    its logits). Each kept result keeps its `rlx.name`; what only the dropped results used
    is left for the pipeline's dead-code elimination. An unknown name is a GraphError."""
    fn = entry_function(module)
    if not isinstance(fn, func.FuncOp) or not fn.function_type.outputs.data:
        raise GraphError("keep_results: expected a graph function with results (hir or mir)")
    old_attrs = list(fn.res_attrs.data) if fn.res_attrs is not None else []
    count = len(fn.function_type.outputs.data)
    old_attrs += [DictionaryAttr({})] * (count - len(old_attrs))
    known = [_string(a.data, ARG_NAME) or f"out{i}" for i, a in enumerate(old_attrs)]
    unknown = [n for n in names if n not in known]
    if unknown or not names or len(set(names)) != len(names):
        raise GraphError(f"keep_results: expected distinct result names among "
                         f"{', '.join(known)}, got {', '.join(names) or 'none'}")
    keep = [known.index(n) for n in names]
    ret = fn.body.block.last_op
    assert isinstance(ret, func.ReturnOp)
    values = [ret.operands[i] for i in keep]
    ret.detach()
    ret.erase()
    fn.body.block.add_op(func.ReturnOp(*values))
    fn.function_type = FunctionType.from_lists(
        list(fn.function_type.inputs.data), [v.type for v in values])
    fn.res_attrs = ArrayAttr([DictionaryAttr({**old_attrs[i].data, ARG_NAME: StringAttr(known[i])})
                              for i in keep])


def _is_entry(fn: llvm.FuncOp) -> bool:
    attrs = fn.arg_attrs.data if fn.arg_attrs is not None else ()
    return any(_string(a.data, ARG_ROLE) == ROLE_ARENA for a in attrs)


def default_name(arg: Any, index: int) -> str:
    """The name of an argument that has no `rlx.name`: its SSA name when that is a Python
    identifier (`%x` -> "x"), else `arg<index>`."""
    hint = arg.name_hint
    return hint if hint and hint.isidentifier() else f"arg{index}"


def name_arguments(module: Any) -> None:
    """Give the graph function's arguments that lack them their `rlx.name` (see
    `default_name`) and `rlx.role` ("input"), in place, so hand-written modules compile.

    Roles cannot be guessed at the lir stage, where outputs are arguments too, nor in an
    llvm-stage entry: there a missing name or role is a GraphError naming the argument.
    """
    fn = entry_function(module)
    if isinstance(fn, llvm.FuncOp):
        _check_llvm_entry_names(fn)
        return
    block_args = fn.body.block.args if not fn.is_declaration else ()
    count = len(fn.function_type.inputs.data)
    old = list(fn.arg_attrs.data) if fn.arg_attrs is not None else []
    old += [DictionaryAttr({})] * (count - len(old))
    lir_stage = not fn.function_type.outputs.data
    taken = {_string(a.data, ARG_NAME) for a in old}
    attrs = []
    for i, entry in enumerate(old):
        data = dict(entry.data)
        if ARG_ROLE not in data:
            if lir_stage:
                raise GraphError(
                    f"@{fn.sym_name.data}: argument {i} has no rlx.role; a function at the lir "
                    "stage (no results) has its outputs among its arguments, so give every "
                    'argument {rlx.name = "...", rlx.role = "input" | "param" | "output"}'
                )
            data[ARG_ROLE] = StringAttr(ROLE_INPUT)
        if ARG_NAME not in data:
            name = default_name(block_args[i], i) if block_args else f"arg{i}"
            if name in taken:
                name = f"arg{i}"
            if name in taken:
                raise GraphError(f"@{fn.sym_name.data}: argument {i} has no rlx.name, and the "
                                 f"default {name!r} is taken; name it with rlx.name")
            taken.add(name)
            data[ARG_NAME] = StringAttr(name)
        attrs.append(DictionaryAttr(data))
    fn.arg_attrs = ArrayAttr(attrs)


def _check_llvm_entry_names(fn: llvm.FuncOp) -> None:
    for i, entry in enumerate(fn.arg_attrs.data if fn.arg_attrs is not None else ()):
        if ARG_TYPE in entry.data and not (
            _string(entry.data, ARG_NAME) and _string(entry.data, ARG_ROLE)
        ):
            raise GraphError(
                f"@{fn.sym_name.data}: argument {i} has no rlx.name or rlx.role; name the "
                "arguments before lowering (a module lowered from unnamed arguments)"
            )


def _string(attrs: Mapping[str, Any] | DictionaryAttr, key: str) -> str | None:
    value = attrs.get(key)
    return value.data if isinstance(value, StringAttr) else None


# ----------------------------------------------------------------------------- the entry ABI

Dims = tuple[int | str, ...]


@dataclass(frozen=True)
class EntryArg:
    """One argument of an llvm entry the caller passes: a buffer (input, param, output or
    state; `shape` with the symbol names of its `rlx.dims`), the position, or a symbol's
    size (role `dim`, dtype `INDEX_DTYPE`)."""

    name: str
    role: str
    shape: Dims = ()
    dtype: str = INDEX_DTYPE
    layout: str | None = None
    """`rlx.layout`: a non-default layout of a bound weight (`LAYOUT_*`)."""
    bound: int | None = None
    """`rlx.bound` of a symbol's size: the largest size the arena was planned for."""
    update: str | None = None
    """`rlx.update` of a state: `UPDATE_APPEND` or `UPDATE_ASSIGN`."""
    rollback: bool = True
    """False for a state with `rlx.rollback = false` (see `ARG_ROLLBACK`)."""

    @property
    def is_buffer(self) -> bool:
        return self.role not in SCALAR_ROLES


@dataclass(frozen=True)
class CacheDim:
    """A symbol a cache append defines: `symbol` = P + `appended` <= `capacity`."""

    symbol: str
    appended: rules.Dim
    """The rows each call appends: an int, or the symbol of the rows' first dim."""
    capacity: int


@dataclass(frozen=True)
class EntryABI:
    """Everything about a compiled entry its caller needs, read from the llvm entry alone
    (`from_llvm`): its arguments in call order (then the arena, the thread id and count,
    the barrier state: `ENTRY_EXTRA_ROLES`), the arena's size, whether it has a worker
    loop, the KV-cache symbols, and in an instrumented build its profiled call sites."""

    name: str
    args: tuple[EntryArg, ...]
    arena_bytes: int
    naive_bytes: int
    parallel: bool = False
    """Whether the module has `@<name>__worker` (some kernel splits its work)."""
    cache_dims: tuple[CacheDim, ...] = ()
    profile_sites: tuple[dict[str, Any], ...] = ()
    """The `rlx.profile_site` of each timed call site, in site order (instrumented builds)."""

    @classmethod
    def from_llvm(cls, module_or_entry: ModuleOp | llvm.FuncOp) -> EntryABI:
        """The ABI of an llvm-stage module's entry (or of the entry itself)."""
        entry = module_or_entry if isinstance(module_or_entry, llvm.FuncOp) \
            else entry_function(module_or_entry)
        if not isinstance(entry, llvm.FuncOp):
            raise RlxError(f"@{entry.sym_name.data}: expected an llvm entry (a module lowered "
                           f"to the llvm stage), got a {entry.name}")
        name = entry.sym_name.data
        args, arena, naive = [], -1, -1
        for attrs in (entry.arg_attrs.data if entry.arg_attrs is not None else ()):
            data = attrs.data
            if ARENA_BYTES in data:
                arena, naive = _int(data[ARENA_BYTES]), _int(data[NAIVE_BYTES])
            arg = _entry_arg(name, data)
            if arg is not None:
                args.append(arg)
        if arena < 0:
            raise RlxError(f"@{name}: the arena argument has no {ARENA_BYTES} attribute, so "
                           "the size of the arena to pass is unknown")
        module = entry.parent_op()
        worker = name + WORKER_SUFFIX
        parallel = isinstance(module, ModuleOp) and any(
            isinstance(op, llvm.FuncOp) and op.sym_name.data == worker for op in module.ops)
        sites = tuple(json.loads(op.attributes[PROFILE_SITE].data) for op in entry.walk()
                      if isinstance(op, llvm.CallOp) and PROFILE_SITE in op.attributes)
        return cls(name, tuple(args), arena, naive, parallel, tuple(cache_dims_of(entry)), sites)

    # ------------------------------------------------------------------ views

    @property
    def buffers(self) -> tuple[EntryArg, ...]:
        """The pointer arguments (inputs, params, outputs, states), in call order."""
        return tuple(a for a in self.args if a.is_buffer)

    def with_role(self, role: str) -> tuple[EntryArg, ...]:
        return tuple(a for a in self.args if a.role == role)

    @property
    def layouts(self) -> dict[str, str]:
        """Argument name -> its non-default layout (weights packed at bind time)."""
        return {a.name: a.layout for a in self.args if a.layout is not None}

    @property
    def bounds(self) -> dict[str, int]:
        """Symbol -> the largest size a call may give it."""
        return {a.name: a.bound for a in self.args if a.bound is not None}

    def updated(self, update: str) -> frozenset[str]:
        """The states a call changes by `update` (`UPDATE_APPEND`, `UPDATE_ASSIGN`)."""
        return frozenset(a.name for a in self.args if a.update == update)

    # ------------------------------------------------------------------ the disk cache

    def to_json(self) -> str:
        return json.dumps({
            "name": self.name, "arena_bytes": self.arena_bytes, "naive_bytes": self.naive_bytes,
            "parallel": self.parallel, "profile_sites": list(self.profile_sites),
            "cache_dims": [[d.symbol, d.appended, d.capacity] for d in self.cache_dims],
            "args": [{"name": a.name, "role": a.role, "shape": list(a.shape), "dtype": a.dtype,
                      "layout": a.layout, "bound": a.bound, "update": a.update,
                      "rollback": a.rollback}
                     for a in self.args]})

    @classmethod
    def from_json(cls, text: str) -> EntryABI:
        """The ABI `to_json` wrote (ValueError if `text` is not one)."""
        try:
            data = json.loads(text)
            return cls(data["name"],
                       tuple(EntryArg(**{**a, "shape": tuple(a["shape"])}) for a in data["args"]),
                       data["arena_bytes"], data["naive_bytes"], data["parallel"],
                       tuple(CacheDim(*d) for d in data["cache_dims"]),
                       tuple(data["profile_sites"]))
        except (KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"not an entry ABI: {err}") from err


def _entry_arg(entry: str, data: Mapping[str, Any]) -> EntryArg | None:
    """The argument an llvm entry argument's attributes describe; None for the arena, the
    thread id and count and the barrier state."""
    role = _string(data, ARG_ROLE) or ""
    name = _string(data, ARG_NAME) or ""
    if role in SCALAR_ROLES:
        bound = data.get(ARG_BOUND)
        return EntryArg(name, role, bound=_int(bound) if bound is not None else None)
    ty = data.get(ARG_TYPE)
    if ty is None:
        return None
    shape = (_dims(data[ARG_DIMS], f"@{entry}: argument {name!r}: {ARG_DIMS}")
             if ARG_DIMS in data else tuple(rules.UNKNOWN if d < 0 else d for d in ty.get_shape()))
    return EntryArg(name, role, shape, element_name(ty.get_element_type()),
                    _string(data, ARG_LAYOUT), None, _string(data, ARG_UPDATE),
                    rolls_back(data))


def rolls_back(attrs: Mapping[str, Any]) -> bool:
    """Whether a failed call restores the state with these argument attributes (and
    `reset()` zeroes it): False only under `rlx.rollback = false` (`ARG_ROLLBACK`)."""
    value = attrs.get(ARG_ROLLBACK)
    return not (isinstance(value, IntegerAttr) and value.value.data == 0)


def cache_dims_of(fn: Any) -> list[CacheDim]:
    """The symbols of the function's `rlx.cache_dims` attribute (GraphError if malformed)."""
    attr = getattr(fn, "attributes", {}).get(CACHE_DIMS)
    if attr is None:
        return []
    if not isinstance(attr, DictionaryAttr):
        raise GraphError(f"{CACHE_DIMS}: expected a dictionary, got {attr}")
    dims = []
    for symbol, entry in attr.data.items():
        shape = _dims(entry, f"{CACHE_DIMS}[{symbol!r}]")
        if len(shape) != 2 or not isinstance(shape[1], int):
            raise GraphError(f"{CACHE_DIMS}[{symbol!r}]: expected [appended, capacity] with a "
                             f"static capacity, got {rules.fmt(shape)}")
        dims.append(CacheDim(symbol, shape[0], shape[1]))
    return dims


def _dims(attr: Any, what: str) -> Dims:
    """The shape an `rlx.dims` array spells: sizes and symbol names (GraphError if not)."""
    entries = attr.data if isinstance(attr, ArrayAttr) else None
    if entries is None or not all(isinstance(e, StringAttr | IntegerAttr) for e in entries):
        raise GraphError(f"{what}: expected an array of sizes and symbol names, got {attr}")
    return tuple(e.data if isinstance(e, StringAttr) else _int(e) for e in entries)


def _int(attr: Any) -> int:
    return attr.value.data
