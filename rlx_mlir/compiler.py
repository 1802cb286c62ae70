"""`rlx.jit` and `rlx.compile_mlir`: the whole pipeline to native code.

```python
model = rlx.jit(g, params={"w1": W1})      # hir -> mir -> lir -> llvm -> machine code
y = model(x=X)                             # a CompiledGraph (rlx_mlir.compiled_graph)
```
The build is cached in memory and on disk (`rlx_mlir.backend`) with the entry's
`EntryABI`, so a cached build runs without lowering anything.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import llvmlite.binding as llvm_binding
import numpy as np
from xdsl.dialects.builtin import ModuleOp

from rlx_mlir.backend import cache_key, compile_module, load_cached
from rlx_mlir.binding import Signature
from rlx_mlir.compiled_graph import BoundParams, CompiledGraph
from rlx_mlir.core.abi import ROLE_STATE, EntryABI, entry_function, keep_results
from rlx_mlir.core.errors import OptionError
from rlx_mlir.core.fusion import FusionPolicy, check_fusion
from rlx_mlir.core.target import Target, host_target, parse_target
from rlx_mlir.graph import Graph
from rlx_mlir.graph_module import DEFAULT_FUSION, GraphModule, GraphStage, compile_input
from rlx_mlir.ir import module_text, parse_module, parse_user_module
from rlx_mlir.pipeline import (
    PipelineOptions,
    Timings,
    check_int_option,
    fn_symbols,
    lower_stages,
)
from rlx_mlir.state import state_values


def jit(graph: Graph | GraphModule, params: Mapping[str, Any] | None = None, *, opt_level: int = 3,
        threads: int | None = None, vector_width: int = 0, alignment: int = 64,
        strategy: str = "greedy-by-size", max_dims: Mapping[str, int] | None = None,
        fusion: FusionPolicy | None = None, time_passes: bool = False,
        state: Mapping[str, Any] | None = None) -> CompiledGraph:
    """Compile a Graph, or a GraphModule at any stage, to native code; `params` binds
    (copies of) some or all params; `state` gives some states (`g.state`) their initial
    values (copied; the others start at zero; `model.set_state` changes them later).

    `threads` is how many threads a call may use (default: all cores, capped by
    RLX_NUM_THREADS); graphs with no kernel large enough to split use one. A graph with
    symbolic dims compiles once for every size: `max_dims` bounds the symbols (default
    4096, or a KV cache's capacity), a call binds them from its arguments' shapes.
    `fusion` (an `rlx.FusionPolicy`) says which mir-fuse patterns run; default: the
    GraphModule's policy, else `FusionPolicy()`. A GraphModule lowered past HIR keeps
    what its `lower()` did (its fusion; at LIR its arena plan): another policy, or at
    LIR arena options, are an error.
    The numbers never depend on the CPU beyond float32 rounding (a `dequant_matmul`
    quantizes its activations only when the graph asks: docs/semantics.md). The target
    is RLX_TARGET_CPU or the host; `model.options` holds it with every other option."""
    module, policy = compile_input(graph, fusion, "jit")
    if isinstance(graph, GraphModule) and graph.stage is GraphStage.LIR:
        _check_planned(alignment, strategy, max_dims)
    initial = _initial_state(module, state)  # checked before the (long) compilation
    model = _compile(module, params, opt_level,
                     PipelineOptions(alignment, strategy, vector_width, _packed(params),
                                     _max_dims_option(module, max_dims), fusion=policy),
                     time_passes, threads)
    for name, array in initial.items():
        model.set_state(name, array)
    return model


def _initial_state(module: ModuleOp, state: Mapping[str, Any] | None) -> dict[str, np.ndarray]:
    """`jit`'s `state`, checked against the graph's states (ArgumentError naming one)."""
    if state is None:
        return {}
    args = Signature.of(entry_function(module)).args
    return state_values({a.name: a for a in args if a.role == ROLE_STATE}, state)


def compile_mlir(text: str, params: Mapping[str, Any] | None = None, *, opt_level: int = 3,
                 threads: int | None = None, vector_width: int = 0, alignment: int = 64,
                 strategy: str = "greedy-by-size", max_dims: Mapping[str, int] | None = None,
                 fusion: FusionPolicy | None = None, time_passes: bool = False) -> CompiledGraph:
    """Compile module text at any stage (hir, mir, lir or llvm) to native code; the
    options are `jit`'s (`fusion` applies to text at the hir stage)."""
    module = parse_user_module("compile_mlir", text)
    return _compile(module, params, opt_level,
                    PipelineOptions(alignment, strategy, vector_width, _packed(params),
                                    _max_dims_option(module, max_dims),
                                    fusion=DEFAULT_FUSION if fusion is None else check_fusion(fusion)),
                    time_passes, threads)


def _check_planned(alignment: int, strategy: str, max_dims: Mapping[str, int] | None) -> None:
    """A GraphModule at LIR has its arena plan (made by its `lower()`): options that
    would change the plan are an OptionError, not silently ignored."""
    given = [name for name, value, default in (("alignment", alignment, 64),
                                               ("strategy", strategy, "greedy-by-size"),
                                               ("max_dims", max_dims, None)) if value != default]
    if given:
        raise OptionError(f"{', '.join(given)}: the module is at LIR, its arena already planned "
                          "by lower(); give them to a module at HIR or MIR")


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
    are packed once when the CompiledGraph binds them); the others stay row-major."""
    if params is None:
        return ()
    if not isinstance(params, Mapping) or not all(isinstance(k, str) for k in params):
        raise OptionError(f"params: expected a mapping of param names to arrays (a dict), "
                          f"got {type(params).__name__}")
    return tuple(sorted(params))


def _compile(module: ModuleOp, params: Mapping[str, Any] | None, opt_level: int,
             options: PipelineOptions, time_passes: bool, threads: int | None,
             bound: BoundParams | None = None) -> CompiledGraph:
    check_int_option("opt_level", opt_level, "0, 1, 2 or 3", lambda n: 0 <= n <= 3)
    if threads is not None:
        check_int_option("threads", threads, "an int in [1, 64] or None (all cores)",
                         lambda n: 1 <= n <= 64)
    options, target = _resolve_target(options)
    source = module_text(module, debuginfo=True)  # re-lowering it keeps the provenance
    key = cache_key(source, target, opt_level, f"{options}")
    timings = Timings() if time_passes else None
    executable = None if time_passes else load_cached(key, target)
    stages: dict[str, ModuleOp] = {}
    if executable is None:
        stages = lower_stages(module, options, timings)
        executable = compile_module(
            stages["llvm"], target, key=key, opt_level=opt_level,
            abi=EntryABI.from_llvm(stages["llvm"]), timings=timings,
        )
    if timings is not None:
        print(timings.report())
    return CompiledGraph(executable, source, options, opt_level, params, stages, threads, bound,
                         rebuild=functools.partial(_recompile, source, opt_level))


def _resolve_target(options: PipelineOptions) -> tuple[PipelineOptions, Target]:
    """`options` with the target the passes lower for (RLX_TARGET_CPU or the host's,
    unless already given, e.g. by the build being re-instrumented), and the backend's
    target for it (this process's triple; `vector_width` overrides the target's)."""
    if not options.target:
        options = replace(options, target=host_target().spec)
    target = parse_target(options.target, llvm_binding.get_process_triple())
    if options.vector_width:
        target = replace(target, vector_width=options.vector_width)
    return options, target


def _recompile(source: str, opt_level: int, options: PipelineOptions,
               bound: BoundParams, threads: int | None,
               results: tuple[str, ...] = ()) -> CompiledGraph:
    """`CompiledGraph.recompile` and `.entry`: the same source with other options (or
    only some of its results), the same bound params."""
    module = parse_module(source)
    if results:
        keep_results(module, results)
    return _compile(module, None, opt_level, options, False, threads, bound=bound)


__all__ = ["CompiledGraph", "compile_mlir", "jit"]
