"""The compiled model: a graph's machine code, called like a function of numpy arrays.

```python
model = rlx.jit(g, params={"w1": W1})      # rlx_mlir.compiler builds it
y = model(x=X)                             # numpy in, numpy out (a tuple if several)
model.run(x=X, out=Y)                      # write into caller-owned arrays
model.arena_bytes, model.naive_bytes       # planned arena vs the sum of all intermediates
model.mlir("lir"), model.llvm_ir, model.asm
```

Everything a call needs comes from the entry's `EntryABI` (`rlx_mlir.core.abi`): the
arguments in order, the arena, the KV-cache symbols, the bound weights' layouts. The IR
of every stage is kept for introspection (`mlir`, `summary`, `arena_svg`) and lowered
again from the source when it was dropped (`release_stages`) or never made (a build
loaded from the disk cache). `recompile` builds the same source with other pipeline
options (the profiler's instrumented build).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import mmap
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from rlx_mlir.backend import Executable, assembly, optimize
from rlx_mlir.binding import ArgSpec, Binder, Signature, convert, describe_bad_index
from rlx_mlir.core.abi import (
    ERROR_MESSAGES,
    INDEX_DTYPE,
    LAYOUT_PACKED_RHS,
    ROLE_DIM,
    ROLE_OUTPUT,
    ROLE_PARAM,
    ROLE_POSITION,
    ROLE_STATE,
    WORKER_SUFFIX,
    EntryABI,
    sync_bytes,
)
from rlx_mlir.core.dtypes import numpy_type
from rlx_mlir.core.errors import ArgumentError, GraphError, RlxError
from rlx_mlir.core.packing import from_layout, parse_interleaved, to_layout
from rlx_mlir.core.target import Target
from rlx_mlir.ir import module_text, parse_module
from rlx_mlir.pipeline import STAGES, PipelineOptions, lower_stages, stage_of
from rlx_mlir.runtime import ThreadTeam, default_threads
from rlx_mlir.state import StateStore

if TYPE_CHECKING:
    from rlx_mlir.profiling import Profile

ARENA_ALIGNMENT = 64

Rebuild = Callable[..., "CompiledGraph"]
"""How the compiler builds this model's source again: `rebuild(options, bound, threads,
results=())` with other options (or only the named results), the same bound params and
threads (given by the compiler, so this module needs none of it)."""


class BoundParams(dict):
    """The bound params of a build (name -> array) and the layout each array is in
    (name -> (`rlx.layout`, vector width); absent: row-major), so that another build
    sharing them (`entry`, `recompile`) can tell when it reads one in another layout."""

    def __init__(self, arrays: Mapping[str, np.ndarray], layouts: Mapping[str, tuple[str, int]]):
        super().__init__(arrays)
        self.layouts = dict(layouts)


class CompiledGraph:
    """A graph compiled to native code; call it like a function of numpy arrays.

    Positional arguments are the inputs in declaration order, then the params not bound
    at compile time; keywords work for all. Outputs are fresh arrays (a tuple if several).
    Two compiled graphs can run on two threads at once (calls release the GIL); calls of
    the same graph are serialized (they share its arena).
    """

    def __init__(self, executable: Executable, source: str, options: PipelineOptions,
                 opt_level: int, params: Mapping[str, Any] | None,
                 stages: dict[str, ModuleOp], threads: int | None = None,
                 bound: BoundParams | None = None, rebuild: Rebuild | None = None):
        if executable.abi is None:
            raise RlxError("CompiledGraph: the executable has no entry ABI (not a graph build)")
        abi = executable.abi
        self.abi: EntryABI = abi
        """The compiled entry's calling convention (`rlx_mlir.core.abi.EntryABI`)."""
        self._executable = executable
        self._source = source
        self._options = options
        self._opt_level = opt_level
        self._stages = stages
        self._rebuild = rebuild
        self._recompiled: dict[PipelineOptions, CompiledGraph] = {}
        self._entries: dict[tuple[str, ...], CompiledGraph] = {}
        self.signature = Signature.of_abi(abi)
        self.arena_bytes: int = abi.arena_bytes
        """Bytes of the planned arena of intermediate buffers."""
        self.naive_bytes: int = abi.naive_bytes
        """Bytes all intermediate buffers would take without reuse."""
        # `bound`: params another build of the same options already bound (and packed)
        self._bound = self._bind_params(params or {}) if bound is None else self._relayout(bound)
        unbound = sorted(set(abi.layouts) - set(self._bound))
        if unbound:  # a per-call array would arrive row-major: wrong numbers, not an error
            raise ArgumentError(
                f"params: {', '.join(unbound)} must be bound at compile time (params=...): "
                "the compiled code reads them in a packed layout"
            )
        self._arena = _aligned_empty(self.arena_bytes)
        self._lock = threading.Lock()
        argtypes = ([ctypes.c_int64 if a.dtype == INDEX_DTYPE else ctypes.c_void_p for a in abi.args]
                    + [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p])
        self._entry = ctypes.CFUNCTYPE(ctypes.c_int32, *argtypes)(executable.address(abi.name))
        wanted = default_threads() if threads is None else threads
        self.threads: int = wanted if abi.parallel else 1
        """Threads a call uses (1 when no kernel is large enough to split)."""
        self._sync = _aligned_empty(sync_bytes(self.threads))
        self._sync[:] = 0
        self._team: ThreadTeam | None = None
        # Precomputed once: the per-call path only binds arguments and calls.
        self._arena_address = self._arena.ctypes.data
        self._sync_address = self._sync.ctypes.data
        self._arg_order = tuple((a.name, a.role) for a in abi.args)
        # bound params never change: their addresses are read once, not per call (a
        # 30-layer model has hundreds; `.ctypes.data` costs ~1 µs each)
        self._param_addresses = {name: array.ctypes.data for name, array in self._bound.items()}
        self._binder = Binder(self.signature, self._bound)
        self._out_layouts = tuple((o.shape, np.dtype(numpy_type(o.dtype))) for o in self.outputs)
        self._symbolic = any(a.role == ROLE_DIM for a in abi.args)
        self._state = StateStore.of_abi(abi)
        self._stateful = self._state.stateful
        self._fixed: tuple[StateStore, list[int]] | None = None  # see _fixed_words
        per_call = (ROLE_OUTPUT, ROLE_DIM, ROLE_POSITION)
        self._call_words = tuple(
            (index, name, role) for index, (name, role) in enumerate(self._arg_order)
            if role in per_call or (role != ROLE_STATE and name not in self._param_addresses))
        """(index, name, role) of the words each call writes: outputs, sizes, the position
        and the caller's arrays."""
        self._caller_arrays = tuple(name for _, name, role in self._call_words
                                    if role not in per_call)
        self.max_dims: dict[str, int] = abi.bounds
        """The bound of each symbol: the largest size a call may give it."""

    def _bind_params(self, params: Mapping[str, Any]) -> BoundParams:
        """Copies of the bound params, in the layout the compiled code reads: a weight
        with `rlx.layout = "packed_rhs"` is packed once here (`pack_rhs` for the
        vector width of the compiled kernels), one with `interleaved:<scheme>:<W>` is
        interleaved once (`interleave_blocks`), never per call."""
        specs = {a.name: a for a in self.signature.args}
        bound, layouts = {}, {}
        for name, value in params.items():
            if name not in specs or specs[name].role != ROLE_PARAM:
                known = ", ".join(a.name for a in self.signature.args if a.role == ROLE_PARAM) or "none"
                raise ArgumentError(f"params: {name!r} is not a param of {self.signature.name!r} (params: {known})")
            array = convert(specs[name], value)
            layout = self._layout_of(name)
            if layout is not None:
                bound[name], layouts[name] = self._pack(name, array, layout), layout
                _drop_mapped_pages(array)
            else:
                # A read-only array (a memory-mapped weight) cannot change under us: bind it
                # as is, so a model's weights are not copied into memory a second time.
                bound[name] = array if not array.flags.writeable else array.copy()
        return BoundParams(bound, layouts)

    def _layout_of(self, name: str) -> tuple[str, int] | None:
        """The layout this build reads param `name` in, and the vector width it is for."""
        layout = self.abi.layouts.get(name)
        return None if layout is None else (layout, self.target.vector_width)

    @staticmethod
    def _pack(name: str, array: np.ndarray, layout: tuple[str, int]) -> np.ndarray:
        if layout[0] != LAYOUT_PACKED_RHS and parse_interleaved(layout[0]) is None:
            raise RlxError(f"params: {name!r} has the unknown layout {layout[0]!r}")
        return to_layout(array, *layout)

    def _relayout(self, bound: BoundParams) -> BoundParams:
        """Another build's bound params in this build's layouts: the same arrays where
        the layouts agree (the usual case), else a copy repacked from the row-major
        weight (an entry that reads a tied table only through its lookup, a rebuild for
        another vector width)."""
        names = set(bound.layouts) | {n for n in self.abi.layouts if n in bound}
        changed = {n for n in names if bound.layouts.get(n) != self._layout_of(n)}
        if not changed:
            return bound
        arrays, layouts = dict(bound), dict(bound.layouts)
        for name in changed:
            have, want = bound.layouts.get(name), self._layout_of(name)
            row_major = from_layout(bound[name], *have) if have is not None else bound[name]
            arrays[name] = row_major if want is None else self._pack(name, row_major, want)
            layouts.pop(name, None)
            if want is not None:
                layouts[name] = want
        return BoundParams(arrays, layouts)

    # ------------------------------------------------------------------ how it was built

    @property
    def options(self) -> PipelineOptions:
        """The pipeline options this model was built with, the target included (read-only):
        `rlx-opt -p "$(options.pipeline())"` on `mlir("hir")` gives `mlir("llvm")`."""
        return self._options

    @property
    def opt_level(self) -> int:
        """LLVM's optimization level it was compiled at."""
        return self._opt_level

    @property
    def target(self) -> Target:
        """The CPU the machine code is for (name, features, vector width)."""
        return self._executable.target

    @property
    def from_disk_cache(self) -> bool:
        """Whether the machine code was loaded from the disk cache (not compiled here)."""
        return self._executable.from_disk

    def recompile(self, **option_changes: Any) -> CompiledGraph:
        """The same source compiled with some pipeline options changed (e.g.
        `profile=True`), sharing this model's bound params and threads; its state and
        arena are its own. Built once per set of options, then kept."""
        if self._rebuild is None:
            raise RlxError("recompile: this model was not built by rlx.jit or rlx.compile_mlir")
        try:
            options = replace(self._options, **option_changes)
        except TypeError as err:
            raise RlxError(f"recompile: {err}") from None
        if options == self._options:
            return self
        build = self._recompiled.get(options)
        if build is None:
            build = self._recompiled[options] = self._rebuild(options, self._bound, self.threads)
        return build

    def entry(self, *results: str) -> CompiledGraph:
        """Another entry of this model that returns only the named `results`, e.g. a
        decoder's sampled `next_ids` without its vocabulary-sized logits: the same source
        built once more (then kept; from the disk cache after the first time), with what
        only the other results needed left out. It shares this model's bound params,
        threads, state, position and arena, so calls of either entry continue one
        sequence (they are serialized, as calls of one model are)."""
        if results == self.output_names:
            return self
        build = self._entries.get(results)
        if build is None:
            if self._rebuild is None:
                raise RlxError("entry: this model was not built by rlx.jit or rlx.compile_mlir")
            try:
                build = self._rebuild(self._options, self._bound, self.threads, results=results)
            except GraphError as err:
                raise ArgumentError(f"entry: {err}") from None
            build._share_with(self)
            self._entries[results] = build
        return build

    def _share_with(self, other: CompiledGraph) -> None:
        """Use `other`'s state, lock and (when large enough) arena: one sequence, two
        entries, never running at once."""
        self._state, self._stateful, self._lock = other._state, other._stateful, other._lock
        if other._arena.nbytes >= self.arena_bytes:
            self._arena, self._arena_address = other._arena, other._arena_address

    # ------------------------------------------------------------------ state

    @property
    def outputs(self) -> tuple[ArgSpec, ...]:
        return self.signature.results

    @property
    def position(self) -> int:
        """P: where the next rows of the KV caches go; each call advances it by S."""
        return self._state.position

    @property
    def state(self) -> Mapping[str, np.ndarray]:
        """Read-only views of the model's state buffers (`g.state`), by name."""
        return self._state.views

    def reset(self, position: int = 0) -> None:
        """Rewind the KV caches to `position` (0: a fresh sequence, every other state zero)."""
        with self._lock:
            self._state.reset(position)

    def set_state(self, name: str, value: Any) -> None:
        """Write a copy of `value` into the state `name` (`g.state`): its shape, a dtype
        that casts to its dtype; an ArgumentError naming the state otherwise. The
        initial weights and optimizer moments of a training step, for example."""
        with self._lock:
            self._state.write(name, value)

    def copy_state_from(self, other: CompiledGraph) -> None:
        """Take the state buffers (copied) and the position of `other`, a build of the
        same graph (e.g. the model an instrumented `recompile` came from)."""
        if other.signature != self.signature:
            raise ArgumentError(f"copy_state_from: {other!r} is not a build of {self!r}")
        with self._lock:
            self._state.copy_from(other._state)

    @property
    def output_names(self) -> tuple[str, ...]:
        """The outputs' names, in call-result order (out0, ... unless named in g.output):
        `dict(zip(model.output_names, model(...)))` gets the results by name."""
        return self.signature.output_names

    # ------------------------------------------------------------------ calls

    def __call__(self, *args: Any, **kwargs: Any) -> np.ndarray | tuple[np.ndarray, ...]:
        sizes: dict[str, int] = {}
        arrays = self._bind(args, kwargs, sizes)
        if self._symbolic:  # an output may have a KV-cache symbol's size (T = P + S)
            shapes = self._state.bind(sizes) if self._stateful else sizes
            outs = tuple(np.empty(o.concrete_shape(shapes), numpy_type(o.dtype)) for o in self.outputs)
        else:
            outs = tuple(np.empty(shape, dtype) for shape, dtype in self._out_layouts)
        self._execute(arrays, sizes, outs, fresh=True)
        return outs[0] if len(outs) == 1 else outs

    def call_sizes(self, *args: Any, **kwargs: Any) -> dict[str, int]:
        """The size of every symbol in a call on these arguments, the KV-cache symbols at
        P + the rows appended (checked as a call checks them; nothing runs)."""
        sizes: dict[str, int] = {}
        self._bind(args, kwargs, sizes)
        return self._state.bind(sizes) if self._stateful else sizes

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any],
              sizes: dict[str, int]) -> dict[str, np.ndarray]:
        """The call's checked arrays; `sizes` receives the symbols' sizes, each checked
        against its bound."""
        arrays = self._binder(args, kwargs, sizes)
        for name, size in sizes.items():
            bound = self.max_dims.get(name)
            if bound is not None and size > bound:
                raise ArgumentError(
                    f"{self.signature.name}: symbol {name} is {size}, above its bound {bound} "
                    f"(compile with max_dims={{{name!r}: {size}}} or more)")
        return arrays

    def run(self, *args: Any, out: np.ndarray | tuple[np.ndarray, ...], **kwargs: Any):
        """Run writing into caller-owned `out` array(s) of exactly the declared shape and dtype."""
        outs = (out,) if isinstance(out, np.ndarray) else tuple(out) if isinstance(out, tuple | list) else None
        if outs is None or len(outs) != len(self.outputs):
            raise ArgumentError(f"out: expected {len(self.outputs)} numpy array(s), got {type(out).__name__}")
        sizes: dict[str, int] = {}
        arrays = self._bind(args, kwargs, sizes)
        shapes = self._state.bind(sizes) if self._stateful else sizes
        for spec, array in zip(self.outputs, outs, strict=True):
            _check_out(spec, array, shapes)
        self._execute(arrays, sizes, outs)
        return out

    def _execute(self, arrays: dict[str, np.ndarray], sizes: dict[str, int],
                 outs: tuple[np.ndarray, ...], fresh: bool = False) -> None:
        if not self._stateful:
            self._call(arrays, sizes, outs, fresh)
            return
        with self._lock, self._state.call(sizes) as bound:  # atomic: undone if it raises
            self._call({**arrays, **self._state.arrays}, bound, outs, fresh,
                       self._state.position)

    def _call(self, arrays: dict[str, np.ndarray], sizes: Mapping[str, int],
              outs: tuple[np.ndarray, ...], fresh: bool, position: int = 0) -> None:
        if not fresh:  # caller-owned outputs: they must not alias an input (noalias kernels)
            for out_array in outs:  # (bound params are the model's own, never a caller's)
                for name in self._caller_arrays:
                    if np.may_share_memory(out_array, arrays[name]):
                        raise ArgumentError(f"out: must not overlap the memory of argument {name!r}")
                state = self._state.overlapping(out_array) if self._stateful else None
                if state is not None:
                    raise ArgumentError(f"out: must not overlap the memory of argument {state!r}")
        pointers = self._fixed_words()
        outputs = iter(outs)
        for index, name, role in self._call_words:
            pointers[index] = (next(outputs).ctypes.data if role == ROLE_OUTPUT
                               else sizes[name] if role == ROLE_DIM
                               else position if role == ROLE_POSITION
                               else arrays[name].ctypes.data)
        pointers.append(self._arena_address)
        with self._lock if not self._stateful else _NO_LOCK:  # a stateful call holds it
            if self.threads == 1:
                status = self._entry(*pointers, 0, 1, self._sync_address)
            else:
                if self._team is None:
                    self._team = self._make_team()
                status = self._team.run(self._entry, pointers, self._sync_address)
        if status:
            # The error path only: find the bad index in the caller's arrays to name it.
            message = (describe_bad_index(parse_module(self._source), arrays)
                       or ERROR_MESSAGES.get(status, f"error code {status}"))
            raise ArgumentError(f"{self.signature.name}: {message}")

    def _fixed_words(self) -> list[int]:
        """A fresh list of the entry's argument words with the ones that do not change
        between calls filled in: the bound params' and the states' addresses (their
        buffers live as long as the build, or the store it shares). A 30-layer model
        passes ~350 words a call, ~60 of them states; reading each `.ctypes.data` per call
        cost ~100 µs of Python per token."""
        if self._fixed is None or self._fixed[0] is not self._state:
            states = {name: array.ctypes.data for name, array in self._state.arrays.items()}
            words = [self._param_addresses.get(name, states.get(name, 0))
                     for name, _ in self._arg_order]
            self._fixed = (self._state, words)
        return list(self._fixed[1])

    def __del__(self) -> None:
        team = getattr(self, "_team", None)
        if team is not None:
            team.stop()  # its workers exit instead of waiting for calls that cannot come

    def _make_team(self) -> ThreadTeam:
        name = self.signature.name + WORKER_SUFFIX
        i64, ptr = ctypes.c_int64, ctypes.c_void_p
        worker = ctypes.CFUNCTYPE(i64, ptr, ptr, i64, i64, i64, i64)(self._executable.address(name))
        return ThreadTeam(self.threads, worker, len(self._arg_order) + 1)

    # ------------------------------------------------------------------ the machine code

    def address(self, name: str) -> int:
        """The address of the compiled function `@name` (RlxError if there is none)."""
        return self._executable.address(name)

    def arena_buffer(self, nbytes: int = 0) -> np.ndarray:
        """The arena buffer the calls pass (bytes), first grown to at least `nbytes` (the
        instrumented build keeps its event log after the plan)."""
        with self._lock:
            if self._arena.nbytes < nbytes:
                self._arena = _aligned_empty(nbytes)
                self._arena_address = self._arena.ctypes.data
            return self._arena

    # ------------------------------------------------------------------ introspection

    def release_stages(self) -> None:
        """Drop the IR kept from compilation (large for big models): the stages and the
        LLVM IR text; `mlir()` and `llvm_ir` rebuild them when asked."""
        self._stages = {}
        self._executable.llvm_ir = None
        gc.collect()
        _return_freed_memory()

    def mlir(self, stage: str = "hir") -> str:
        """The module text at `stage`: hir (as built), mir (after mir-fuse), lir (after
        lir-plan-arena) or llvm (after rlx-lower)."""
        return module_text(self.stage_module(stage))

    def stage_module(self, stage: str) -> ModuleOp:
        """The module at `stage` (lowered again when the build came from the disk cache
        or its stages were released). Do not change it: it is the model's own copy."""
        if stage not in STAGES:
            raise RlxError(f"mlir: expected a stage in {', '.join(STAGES)}, got {stage!r}")
        if not self._stages:
            self._stages = lower_stages(parse_module(self._source), self._options)
        if stage not in self._stages:
            raise RlxError(f"mlir: this module was compiled from the "
                           f"{stage_of(parse_module(self._source))} stage; {stage!r} is not available")
        return self._stages[stage]

    @property
    def stages(self) -> tuple[str, ...]:
        """The stages `mlir` can show: from the stage it was compiled from down to llvm."""
        first = stage_of(parse_module(self._source))
        return STAGES[STAGES.index(first):]

    @property
    def llvm_ir(self) -> str:
        """The optimized LLVM IR."""
        if self._executable.llvm_ir is None:  # loaded from the disk cache: rebuild it
            parsed = optimize(self.stage_module("llvm"), self.target, self._opt_level)
            self._executable.llvm_ir = str(parsed)
        return self._executable.llvm_ir

    @property
    def asm(self) -> str:
        """The host assembly of the compiled code."""
        if self._executable.asm is None:
            self._executable.asm = assembly(self.llvm_ir, self.target, self._opt_level)
        return self._executable.asm

    def profile(self, *args: Any, repeat: int = 20, **kwargs: Any) -> Profile:
        """Per-kernel times of a call on these arguments, from an instrumented build of
        the same module (this model's build stays uninstrumented and its state untouched):
        a table with `.to_markdown()`, `.by_phase()` (µs per streaming phase) and
        `.trace(path)` (see `rlx_mlir.profiling`)."""
        from rlx_mlir.profiling import profile_model

        return profile_model(self, repeat, args, kwargs)

    def arena_svg(self, path: str | None = None) -> str:
        """The arena plan as an SVG picture (a rectangle per slot over its live range);
        written to `path` when given. See `rlx_mlir.introspection.arena_svg`."""
        from rlx_mlir.introspection import arena_svg

        return arena_svg(self.stage_module("lir"), path)

    def summary(self) -> str:
        """Op counts per stage, kernels, fused regions, arena vs naive vs lower bound,
        threads and target (see `rlx_mlir.introspection.summary`)."""
        from rlx_mlir.introspection import summary

        return summary(self)

    def __repr__(self) -> str:
        ins = ", ".join(a.describe() for a in self.signature.callable_args if a.name not in self._bound)
        return f"<CompiledGraph {self.signature.name}({ins}), arena {self.arena_bytes} B>"


_NO_LOCK = contextlib.nullcontext()


def _return_freed_memory() -> None:
    """Hand the heap pages compilation freed back to the OS (glibc keeps them otherwise)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


MADV_DONTNEED = 4
"""madvise's advice that drops a range's pages from the process (Linux)."""


def _drop_mapped_pages(array: np.ndarray) -> None:
    """Drop the resident pages of a view of a read-only file mapping (a GGUF weight) once
    it has been repacked into a copy: binding a model then holds at most one weight's
    file pages next to the copies, not the whole file (Gemma 3 270M's peak while loading
    was 949 MB). Only file-backed views: the kernel reads a dropped page back from the
    file if the view is used again, where an anonymous page would come back as zeros."""
    if array.flags.writeable or not _maps_a_file(array) or array.nbytes == 0:
        return
    page = mmap.PAGESIZE
    start = -(-array.ctypes.data // page) * page  # whole pages inside the view only
    end = (array.ctypes.data + array.nbytes) // page * page
    if end > start:
        with contextlib.suppress(OSError, AttributeError, TypeError):  # no libc madvise
            ctypes.CDLL(None, use_errno=True).madvise(
                ctypes.c_void_p(start), ctypes.c_size_t(end - start), MADV_DONTNEED)


def _maps_a_file(array: np.ndarray) -> bool:
    """Whether `array` views a read-only `mmap.mmap` (through numpy bases and
    memoryviews): a copy-on-write mapping may hold changed private pages, which dropping
    would turn back into the file's bytes."""
    base: Any = array
    while isinstance(base, np.ndarray | memoryview):
        base = base.base if isinstance(base, np.ndarray) else base.obj
    return isinstance(base, mmap.mmap) and memoryview(base).readonly


def _check_out(spec: ArgSpec, array: Any, sizes: Mapping[str, int]) -> None:
    if not isinstance(array, np.ndarray):
        raise ArgumentError(f"out {spec.name!r}: expected a numpy array, got {type(array).__name__}")
    problems = []
    shape = spec.concrete_shape(sizes) if spec.symbolic else spec.shape
    if array.shape != shape:
        problems.append(f"shape {list(shape)} (got {list(array.shape)})")
    if array.dtype != np.dtype(numpy_type(spec.dtype)):
        problems.append(f"dtype {spec.dtype} (got {array.dtype})")
    if not array.flags.c_contiguous:
        problems.append("a C-contiguous array")
    if not array.flags.writeable:
        problems.append("a writable array")
    if problems:
        raise ArgumentError(f"out {spec.name!r}: expected {', '.join(problems)}")


def _aligned_empty(nbytes: int) -> np.ndarray:
    """A byte buffer whose data pointer is ARENA_ALIGNMENT-aligned."""
    raw = np.empty(nbytes + ARENA_ALIGNMENT, dtype=np.uint8)
    offset = (-raw.ctypes.data) % ARENA_ALIGNMENT
    return raw[offset : offset + nbytes]


__all__ = ["CompiledGraph"]
