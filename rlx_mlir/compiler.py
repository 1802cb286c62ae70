"""`rlx.jit` and `rlx.compile_mlir`: the whole pipeline to native code, and the compiled model.

```python
model = rlx.jit(g, params={"w1": W1})      # hir -> mir -> lir -> llvm -> machine code
y = model(x=X)                             # numpy in, numpy out (a tuple if several)
model.run(x=X, out=Y)                      # write into caller-owned arrays
model.arena_bytes, model.naive_bytes       # planned arena vs the sum of all intermediates
model.mlir("lir"), model.llvm_ir, model.asm
```
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.dialects import llvm
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.printer import Printer
from xdsl.utils.exceptions import PassFailedException

from rlx_mlir.backend import (
    Executable,
    assembly,
    cache_key,
    compile_module,
    load_cached,
    optimize,
)
from rlx_mlir.core.abi import (
    ARENA_BYTES,
    ARG_BOUND,
    ARG_DIMS,
    ARG_LAYOUT,
    ARG_NAME,
    ARG_ROLE,
    ARG_TYPE,
    ARG_UPDATE,
    ERROR_MESSAGES,
    LAYOUT_PACKED_RHS,
    NAIVE_BYTES,
    ROLE_DIM,
    ROLE_OUTPUT,
    ROLE_PARAM,
    ROLE_POSITION,
    ROLE_STATE,
    SYNC_BYTES,
    UPDATE_APPEND,
    UPDATE_ASSIGN,
    WORKER_SUFFIX,
)
from rlx_mlir.core.errors import ArgumentError, GraphError, OptionError, RlxError
from rlx_mlir.core.packing import pack_rhs
from rlx_mlir.core.target import Target, host_target
from rlx_mlir.graph import Graph
from rlx_mlir.ir import make_context, parse_module
from rlx_mlir.passes.lir_to_llvm.profile import profile_sites
from rlx_mlir.passes.utils import fn_symbols
from rlx_mlir.pipeline import (
    STAGES,
    PipelineOptions,
    Timings,
    check_int_option,
    lower,
    stage_of,
)
from rlx_mlir.runtime import ThreadTeam, default_threads
from rlx_mlir.signature import (
    INDEX_DTYPE,
    ArgSpec,
    Signature,
    convert,
    describe_bad_index,
    entry_function,
)
from rlx_mlir.state import CacheDim, StateStore, cache_dims_of

if TYPE_CHECKING:
    from rlx_mlir.profiling import Profile

ARENA_ALIGNMENT = 64


def jit(graph: Graph, params: Mapping[str, Any] | None = None, *, opt_level: int = 3,
        threads: int | None = None, vector_width: int = 0, alignment: int = 64,
        strategy: str = "greedy-by-size", max_dims: Mapping[str, int] | None = None,
        time_passes: bool = False) -> CompiledGraph:
    """Compile a Graph to native code; `params` binds (copies of) some or all params.

    `threads` is how many threads a call may use (default: all cores, capped by
    RLX_NUM_THREADS); graphs with no kernel large enough to split use one. A graph with
    symbolic dims compiles once for every size: `max_dims` bounds the symbols (default
    4096, or a KV cache's capacity), a call binds them from its arguments' shapes.
    The numbers never depend on the CPU beyond float32 rounding (a `dequant_matmul`
    quantizes its activations only when the graph asks: docs/semantics.md)."""
    if not isinstance(graph, Graph):
        raise RlxError(f"jit: expected an rlx_mlir.Graph, got {type(graph).__name__}")
    module = graph.to_module()
    return _compile(module, params, opt_level,
                    PipelineOptions(alignment, strategy, vector_width, _packed(params),
                                    _max_dims_option(module, max_dims)),
                    time_passes, threads)


def compile_mlir(text: str, params: Mapping[str, Any] | None = None, *, opt_level: int = 3,
                 threads: int | None = None, vector_width: int = 0, alignment: int = 64,
                 strategy: str = "greedy-by-size", max_dims: Mapping[str, int] | None = None,
                 time_passes: bool = False) -> CompiledGraph:
    """Compile module text at any stage (hir, mir, lir or llvm) to native code."""
    if not isinstance(text, str):
        raise RlxError(f"compile_mlir: expected module text (str), got {type(text).__name__}")
    try:
        module = parse_module(text)
    except Exception as err:  # xDSL's ParseError / VerifyException carry the location
        raise RlxError(f"compile_mlir: the module does not parse or verify:\n{err}") from err
    return _compile(module, params, opt_level,
                    PipelineOptions(alignment, strategy, vector_width, _packed(params),
                                    _max_dims_option(module, max_dims)),
                    time_passes, threads)


def _max_dims_option(module: ModuleOp, max_dims: Mapping[str, int] | None) -> str:
    """`max_dims` checked against the module's symbols, as lir-plan-arena's option."""
    if max_dims is None:
        return ""
    if not isinstance(max_dims, Mapping):
        raise OptionError(f"max_dims: expected a dict of symbol names to bounds, got "
                          f"{type(max_dims).__name__}")
    known = fn_symbols(entry_function(module))
    for name, bound in max_dims.items():
        if name not in known:
            raise OptionError(f"max_dims: {name!r} is not a symbol of the graph (symbols: "
                              f"{', '.join(known) or 'none'})")
        check_int_option(f"max_dims[{name!r}]", bound, "an int >= 1", lambda n: n >= 1)
    return ",".join(f"{name}={bound}" for name, bound in sorted(max_dims.items()))


def _packed(params: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The params lir-pack-weights may pack: those bound at compile time (their copies
    are packed once in `CompiledGraph._bind_params`); the others stay row-major."""
    if params is None:
        return ()
    if not isinstance(params, Mapping) or not all(isinstance(k, str) for k in params):
        raise OptionError(f"params: expected a mapping of param names to arrays (a dict), "
                          f"got {type(params).__name__}")
    return tuple(sorted(params))


def _text(module: ModuleOp, debuginfo: bool = False) -> str:
    """The module's text; with `debuginfo`, with the ops' locations (provenance)."""
    import io

    out = io.StringIO()
    Printer(stream=out, print_debuginfo=debuginfo).print_op(module)
    return out.getvalue()


def _compile(module: ModuleOp, params: Mapping[str, Any] | None, opt_level: int,
             options: PipelineOptions, time_passes: bool, threads: int | None,
             bound: dict[str, np.ndarray] | None = None) -> CompiledGraph:
    check_int_option("opt_level", opt_level, "0, 1, 2 or 3", lambda n: 0 <= n <= 3)
    if threads is not None:
        check_int_option("threads", threads, "an int in [1, 64] or None (all cores)",
                         lambda n: 1 <= n <= 64)
    target = host_target()
    if options.vector_width:
        target = Target(target.cpu, target.features, target.triple, options.vector_width)
    source = _text(module, debuginfo=True)  # re-lowering it keeps the provenance
    key = cache_key(source, target, opt_level, f"{options}")
    timings = Timings() if time_passes else None
    executable = None if time_passes else load_cached(key, target)
    stages: dict[str, ModuleOp] = {}
    if executable is None:
        stages = _lower_all(module, options, timings)
        executable = compile_module(
            stages["llvm"], target, key=key, opt_level=opt_level,
            metadata=_metadata(stages, options), timings=timings,
        )
    if timings is not None:
        print(timings.report())
    return CompiledGraph(executable, source, options, opt_level, params, stages, threads, bound)


def _lower_all(module: ModuleOp, options: PipelineOptions, timings: Timings | None) -> dict[str, ModuleOp]:
    stages: dict[str, ModuleOp] = {}
    try:
        lower(module, "llvm", options, ctx=make_context(), timings=timings,
              snapshot=lambda stage, m: stages.__setitem__(stage, m.clone()))
    except PassFailedException as err:  # its message names the pass and the op; the IR dump goes
        raise GraphError(str(err.args[0] if err.args else err).split("\n")[0]) from None
    return stages


def _metadata(stages: dict[str, ModuleOp], options: PipelineOptions) -> dict[str, Any]:
    """What a compiled graph needs to run without re-running the pipeline (cached on disk):
    the entry's arguments in order (`args`: buffers, the position, one size per symbol),
    the arena, the symbols' bounds and the KV-cache symbols (`cache_dims`)."""
    entry = entry_function(stages["llvm"])
    args = []
    layouts = {}
    bounds: dict[str, int] = {}
    updates: dict[str, list[str]] = {UPDATE_APPEND: [], UPDATE_ASSIGN: []}
    arena = naive = -1
    for attrs in entry.arg_attrs.data:
        role = attrs.data[ARG_ROLE].data if ARG_ROLE in attrs.data else ""
        if ARENA_BYTES in attrs.data:
            arena = attrs.data[ARENA_BYTES].value.data
            naive = attrs.data[NAIVE_BYTES].value.data
        if role in (ROLE_DIM, ROLE_POSITION):
            args.append([attrs.data[ARG_NAME].data, role, [], INDEX_DTYPE])
        if ARG_BOUND in attrs.data:
            bounds[attrs.data[ARG_NAME].data] = attrs.data[ARG_BOUND].value.data
        if ARG_UPDATE in attrs.data:
            updates[attrs.data[ARG_UPDATE].data].append(attrs.data[ARG_NAME].data)
        if ARG_TYPE not in attrs.data:
            continue  # the arena, the thread id and count, the barrier state
        ty = attrs.data[ARG_TYPE]
        shape = _entry_shape(ty, attrs.data)
        spec = ArgSpec(attrs.data[ARG_NAME].data, role, shape, _dtype(ty))
        args.append([spec.name, spec.role, list(spec.shape), spec.dtype])
        if ARG_LAYOUT in attrs.data:  # e.g. a weight packed at bind time (lir-pack-weights)
            layouts[spec.name] = attrs.data[ARG_LAYOUT].data
    if arena < 0:
        raise RlxError(f"@{entry.sym_name.data}: the arena argument has no rlx.arena_bytes "
                       "attribute, so the size of the arena to pass is unknown")
    worker = entry.sym_name.data + WORKER_SUFFIX  # only an entry that splits work has one
    parallel = any(isinstance(op, llvm.FuncOp) and op.sym_name.data == worker for op in stages["llvm"].ops)
    cache_dims = [[d.symbol, d.appended, d.capacity] for d in cache_dims_of(entry)]
    profiled = {"profile_sites": profile_sites(stages["llvm"])} if options.profile else {}
    return {**profiled, "name": entry.sym_name.data, "args": args, "arena_bytes": arena,
            "naive_bytes": naive, "parallel": parallel, "layouts": layouts,
            "bounds": bounds, "state": {
                "cache_dims": cache_dims, "caches": sorted(updates[UPDATE_APPEND]),
                "assigned": sorted(updates[UPDATE_ASSIGN])}}


def _entry_shape(ty: Any, attrs: Mapping[str, Any]) -> tuple[int | str, ...]:
    """A pointer argument's shape, with the symbols of its `rlx.dims`."""
    if ARG_DIMS in attrs:
        return tuple(d.data if isinstance(d, StringAttr) else d.value.data
                     for d in attrs[ARG_DIMS].data)
    return tuple(ty.get_shape())


def _dtype(memref) -> str:
    from rlx_mlir.dialects.common import dtype_of

    return dtype_of(memref)


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
                 bound: dict[str, np.ndarray] | None = None):
        meta = executable.metadata
        self._executable = executable
        self._source = source
        self._options = options
        self._opt_level = opt_level
        self._stages = stages
        specs = tuple(ArgSpec(n, r, tuple(s), d) for n, r, s, d in meta["args"])
        buffers = tuple(a for a in specs if a.role not in (ROLE_DIM, ROLE_POSITION))
        self.signature = Signature(meta["name"], buffers, tuple(a for a in specs if a.role == ROLE_OUTPUT))
        self.arena_bytes: int = meta["arena_bytes"]
        """Bytes of the planned arena of intermediate buffers."""
        self.naive_bytes: int = meta["naive_bytes"]
        """Bytes all intermediate buffers would take without reuse."""
        # `bound`: params another build of the same options already bound (and packed)
        self._bound = bound if bound is not None else self._bind_params(params or {})
        unbound = sorted(set(meta.get("layouts", {})) - set(self._bound))
        if unbound:  # a per-call array would arrive row-major: wrong numbers, not an error
            raise ArgumentError(
                f"params: {', '.join(unbound)} must be bound at compile time (params=...): "
                "the compiled code reads them in a packed layout"
            )
        self._arena = _aligned_empty(self.arena_bytes)
        self._lock = threading.Lock()
        entry = executable.address(meta["name"])
        argtypes = ([ctypes.c_int64 if a.dtype == INDEX_DTYPE else ctypes.c_void_p for a in specs]
                    + [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p])
        self._entry = ctypes.CFUNCTYPE(ctypes.c_int32, *argtypes)(entry)
        self._sync = _aligned_empty(SYNC_BYTES)
        self._sync[:] = 0
        wanted = default_threads() if threads is None else threads
        self.threads: int = wanted if meta.get("parallel") else 1
        """Threads a call uses (1 when no kernel is large enough to split)."""
        self._team: ThreadTeam | None = None
        # Precomputed once: the per-call path only binds arguments and calls.
        self._arena_address = self._arena.ctypes.data
        self._sync_address = self._sync.ctypes.data
        self._arg_order = tuple((a.name, a.role) for a in specs)
        self._out_layouts = tuple((o.shape, np.dtype(_numpy(o.dtype))) for o in self.outputs)
        self._symbolic = any(a.role == ROLE_DIM for a in specs)
        state = meta.get("state", {})
        self._state = StateStore(
            [a for a in specs if a.role == ROLE_STATE],
            [CacheDim(*d) for d in state.get("cache_dims", ())],
            frozenset(state.get("caches", ())), frozenset(state.get("assigned", ())),
            any(a.role == ROLE_POSITION for a in specs))
        self._stateful = bool(self._state.specs) or self._state.has_position
        self.max_dims: dict[str, int] = dict(meta.get("bounds", {}))
        """The bound of each symbol: the largest size a call may give it."""

    def _bind_params(self, params: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Copies of the bound params, in the layout the compiled code reads: a weight
        with `rlx.layout = "packed_rhs"` is packed once here (`pack_rhs` for the
        vector width of the compiled kernels), never per call."""
        specs = {a.name: a for a in self.signature.args}
        layouts = self._executable.metadata.get("layouts", {})
        bound = {}
        for name, value in params.items():
            if name not in specs or specs[name].role != ROLE_PARAM:
                known = ", ".join(a.name for a in self.signature.args if a.role == ROLE_PARAM) or "none"
                raise ArgumentError(f"params: {name!r} is not a param of {self.signature.name!r} (params: {known})")
            array = convert(specs[name], value)
            layout = layouts.get(name)
            if layout == LAYOUT_PACKED_RHS:
                bound[name] = pack_rhs(array, self._executable.target.vector_width)
            elif layout is None:
                # A read-only array (a memory-mapped weight) cannot change under us: bind it
                # as is, so a model's weights are not copied into memory a second time.
                bound[name] = array if not array.flags.writeable else array.copy()
            else:
                raise RlxError(f"params: {name!r} has the unknown layout {layout!r}")
        return bound

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

    @property
    def output_names(self) -> tuple[str, ...]:
        """The outputs' names, in call-result order (out0, ... unless named in g.output):
        `dict(zip(model.output_names, model(...)))` gets the results by name."""
        return self.signature.output_names

    def __call__(self, *args: Any, **kwargs: Any) -> np.ndarray | tuple[np.ndarray, ...]:
        sizes: dict[str, int] = {}
        arrays = self._bind(args, kwargs, sizes)
        if self._symbolic:
            outs = tuple(np.empty(o.concrete_shape(sizes), _numpy(o.dtype)) for o in self.outputs)
        else:
            outs = tuple(np.empty(shape, dtype) for shape, dtype in self._out_layouts)
        self._execute(arrays, sizes, outs, fresh=True)
        return outs[0] if len(outs) == 1 else outs

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any],
              sizes: dict[str, int]) -> dict[str, np.ndarray]:
        """The call's checked arrays; `sizes` receives the symbols' sizes, each checked
        against its bound."""
        arrays = self.signature.bind(args, kwargs, self._bound, sizes)
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
        for spec, array in zip(self.outputs, outs, strict=True):
            _check_out(spec, array, sizes)
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
            for out_array in outs:
                for name, array in arrays.items():
                    if np.may_share_memory(out_array, array):
                        raise ArgumentError(f"out: must not overlap the memory of argument {name!r}")
        outputs = iter(outs)
        pointers = [
            next(outputs).ctypes.data if role == ROLE_OUTPUT
            else sizes[name] if role == ROLE_DIM
            else position if role == ROLE_POSITION
            else arrays[name].ctypes.data
            for name, role in self._arg_order
        ]
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

    def __del__(self) -> None:
        team = getattr(self, "_team", None)
        if team is not None:
            team.stop()  # its workers exit instead of waiting for calls that cannot come

    def _make_team(self) -> ThreadTeam:
        name = self.signature.name + WORKER_SUFFIX
        i64, ptr = ctypes.c_int64, ctypes.c_void_p
        worker = ctypes.CFUNCTYPE(i64, ptr, ptr, i64, i64, i64, i64)(self._executable.address(name))
        return ThreadTeam(self.threads, worker, len(self._arg_order) + 1)

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
        if stage not in STAGES:
            raise RlxError(f"mlir: expected a stage in {', '.join(STAGES)}, got {stage!r}")
        if not self._stages:
            self._stages = _lower_all(parse_module(self._source), self._options, None)
        if stage not in self._stages:
            raise RlxError(f"mlir: this module was compiled from the "
                           f"{stage_of(parse_module(self._source))} stage; {stage!r} is not available")
        return _text(self._stages[stage])

    @property
    def llvm_ir(self) -> str:
        """The optimized LLVM IR."""
        if self._executable.llvm_ir is None:  # loaded from the disk cache: rebuild it
            self.mlir("llvm")
            parsed = optimize(self._stages["llvm"], self._executable.target, self._opt_level)
            self._executable.llvm_ir = str(parsed)
        return self._executable.llvm_ir

    @property
    def asm(self) -> str:
        """The host assembly of the compiled code."""
        if self._executable.asm is None:
            self._executable.asm = assembly(self.llvm_ir, self._executable.target, self._opt_level)
        return self._executable.asm

    def profile(self, *args: Any, repeat: int = 20, **kwargs: Any) -> Profile:
        """Per-kernel times of a call on these arguments, from an instrumented build of
        the same module (this model's build stays uninstrumented and its state untouched):
        a table with `.to_markdown()` and `.trace(path)` (see `rlx_mlir.profiling`)."""
        from rlx_mlir.profiling import profile_model

        return profile_model(self, repeat, args, kwargs)

    def arena_svg(self, path: str | None = None) -> str:
        """The arena plan as an SVG picture (a rectangle per slot over its live range);
        written to `path` when given. See `rlx_mlir.inspect.arena_svg`."""
        from rlx_mlir.inspect import arena_svg

        return arena_svg(self._stage_module("lir"), path)

    def summary(self) -> str:
        """Op counts per stage, kernels, fused regions, arena vs naive vs lower bound,
        threads and target (see `rlx_mlir.inspect.summary`)."""
        from rlx_mlir.inspect import summary

        return summary(self)

    def _stage_module(self, stage: str) -> ModuleOp:
        """The module at `stage` (lowered again when the build came from the disk cache)."""
        self.mlir(stage)
        return self._stages[stage]

    def _replace_arena(self, nbytes: int) -> None:
        """A larger arena buffer (the profiled build keeps its event log after the plan)."""
        with self._lock:
            self._arena = _aligned_empty(nbytes)
            self._arena_address = self._arena.ctypes.data

    def __repr__(self) -> str:
        ins = ", ".join(a.describe() for a in self.signature.callable_args if a.name not in self._bound)
        return f"<CompiledGraph {self.signature.name}({ins}), arena {self.arena_bytes} B>"


_NO_LOCK = contextlib.nullcontext()


def _return_freed_memory() -> None:
    """Hand the heap pages compilation freed back to the OS (glibc keeps them otherwise)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _numpy(dtype: str) -> type[np.generic]:
    from rlx_mlir.signature import NUMPY_DTYPES

    return NUMPY_DTYPES[dtype]


def _check_out(spec: ArgSpec, array: Any, sizes: Mapping[str, int]) -> None:
    if not isinstance(array, np.ndarray):
        raise ArgumentError(f"out {spec.name!r}: expected a numpy array, got {type(array).__name__}")
    problems = []
    shape = spec.concrete_shape(sizes) if spec.symbolic else spec.shape
    if array.shape != shape:
        problems.append(f"shape {list(shape)} (got {list(array.shape)})")
    if array.dtype != np.dtype(_numpy(spec.dtype)):
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


__all__ = ["CompiledGraph", "compile_mlir", "jit"]
