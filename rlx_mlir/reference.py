"""The numpy reference executor: run a graph or module at any stage without compiling it.

A graph with symbolic dims (`g.input("x", ("S", 64))`) runs at any size: each call binds
the symbols from its arguments' shapes (docs/semantics.md "Dynamic dimensions"). A graph
with states (`g.state`, `g.cache_append`, `g.assign`) is stateful as a compiled model is:
`ref.position`, `ref.state[name]`, `ref.reset()` (docs/semantics.md "State").

```python
ref = rlx.reference(g)                 # a Graph, a ModuleOp or module text
y = ref(x=X, w1=W1, w2=W2)             # same calling convention as a compiled model
```

It is the oracle every compiled kernel and every pass is tested against: hir, mir and
lir ops run through xDSL's interpreter with the numpy kernels of
`rlx_mlir.core.reference_kernels` (see `rlx_mlir.interpreters`).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import nullcontext
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from rlx_mlir.binding import Signature, convert, describe_bad_index
from rlx_mlir.core import reference_kernels as K
from rlx_mlir.core.abi import ROLE_OUTPUT, ROLE_PARAM, ROLE_POSITION, ROLE_STATE, entry_function
from rlx_mlir.core.errors import ArgumentError
from rlx_mlir.graph import Graph
from rlx_mlir.graph_module import GraphModule
from rlx_mlir.interpreters import make_interpreter
from rlx_mlir.interpreters.common import bound_symbols, deferred_assigns
from rlx_mlir.interpreters.lir import new_buffer
from rlx_mlir.ir import parse_module
from rlx_mlir.state import StateStore


def run_module(module: ModuleOp, arrays: Mapping[str, Any],
               states: StateStore | None = None, dtype: str = "f32") -> tuple[np.ndarray, ...]:
    """Run the graph function of `module` on arrays keyed by argument name.

    `dtype="f64"` computes every op in float64 (the f32 arguments are taken in float64,
    not rounded to float32; integers are untouched): see `reference`.

    Tensor-level functions return their results; LIR functions write into the
    `rlx.role = "output"` arguments, which are allocated here and returned in order.
    A function with states runs on the buffers of `states` (a fresh, zero store when
    None) and updates them in place; the call is atomic (see `StateStore.call`).
    """
    fn = entry_function(module)
    signature = Signature.of(fn)
    states = StateStore.of_function(fn) if states is None else states
    with states.call(signature.symbol_sizes(arrays)) as sizes:
        args = []
        outputs = []
        for spec in signature.args:
            if spec.role == ROLE_OUTPUT:
                buffer = new_buffer(spec.concrete_shape(sizes), spec.dtype)
                outputs.append(buffer)
                args.append(buffer)
            elif spec.role == ROLE_STATE:
                args.append(states.arrays[spec.name])  # updated in place
            elif spec.role == ROLE_POSITION:
                args.append(states.position)
            else:
                args.append(_argument(spec, arrays[spec.name], dtype))
        with bound_symbols(sizes), deferred_assigns(), _precision(dtype):
            results = make_interpreter(module).call_op(fn, tuple(args))
            # copied before the deferred assigns write the states (a result may be one)
            return tuple(np.array(r) for r in (outputs if outputs else results))


FLOAT_DTYPES = ("f32", "f64")
"""The float precisions the reference executor computes in."""


def _argument(spec: Any, value: Any, dtype: str) -> np.ndarray:
    """An argument's array (checked, a copy): in f64 mode an f32 argument in float64."""
    converted = convert(spec, value)
    if dtype == "f64" and converted.dtype == np.float32:
        return np.array(value, dtype=np.float64).reshape(converted.shape)
    return converted.copy()


def _precision(dtype: str) -> Any:
    return K.float64() if dtype == "f64" else nullcontext()


class ReferenceModel:
    """A graph run by the reference executor, called like a compiled model (both are
    `rlx_mlir.runnable.Runnable`s)."""

    def __init__(self, module: ModuleOp, params: Mapping[str, Any] | None = None,
                 dtype: str = "f32"):
        if dtype not in FLOAT_DTYPES:
            raise ArgumentError(f"dtype: expected one of {', '.join(FLOAT_DTYPES)}, got {dtype!r}")
        self.dtype = dtype
        """The float precision the ops compute in ("f32", or "f64" for gradient checks)."""
        self.module = module
        self.signature = Signature.of(entry_function(module))
        specs = {a.name: a for a in self.signature.callable_args}
        self.states = StateStore.of_function(entry_function(module))
        """The model's states and position, updated by each call."""
        self._bound = {}
        for name, value in (params or {}).items():
            if name not in specs or specs[name].role != ROLE_PARAM:
                raise ArgumentError(f"params: {name!r} is not a param of {self.signature.name!r}")
            self._bound[name] = _argument(specs[name], value, dtype)

    def _float64_arguments(self, args: tuple[Any, ...], kwargs: Mapping[str, Any],
                           bound: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The call's f32 arguments in float64, as given (checked by `bind` already)."""
        free = [a for a in self.signature.callable_args if a.name not in self._bound]
        given = {**{spec.name: v for spec, v in zip(free, args, strict=False)}, **kwargs}
        return {name: np.array(value, dtype=np.float64).reshape(bound[name].shape)
                for name, value in given.items() if bound[name].dtype == np.float32}

    @property
    def output_names(self) -> tuple[str, ...]:
        """The outputs' names, in result order (as `CompiledGraph.output_names`)."""
        return self.signature.output_names

    @property
    def position(self) -> int:
        """P: where the next rows of every KV cache go (advanced by each call)."""
        return self.states.position

    @property
    def state(self) -> Mapping[str, np.ndarray]:
        """Read-only views of the state buffers, by name."""
        return self.states.views

    def reset(self, position: int = 0) -> None:
        """Rewind the caches to `position` (at 0, every other state is zeroed too, but
        those declared with `rollback=False`)."""
        self.states.reset(position)

    def set_state(self, name: str, value: Any) -> None:
        """Write a copy of `value` into the state `name` (as `CompiledGraph.set_state`)."""
        self.states.write(name, value)

    def __call__(self, *args: Any, **kwargs: Any) -> np.ndarray | tuple[np.ndarray, ...]:
        arrays = self.signature.bind(args, kwargs, self._bound)
        if self.dtype == "f64":  # bind rounded the f32 arguments: take them as given
            arrays.update(self._float64_arguments(args, kwargs, arrays))
        try:
            results = run_module(self.module, arrays, self.states, self.dtype)
        except ArgumentError:
            # The kernels know no argument names: name the first bad index as a compiled
            # model does (rlx_mlir.compiled_graph), when it is an argument's.
            detail = describe_bad_index(self.module, arrays)
            if detail is None:
                raise
            raise ArgumentError(f"{self.signature.name}: {detail}") from None
        return results[0] if len(results) == 1 else results


def reference(graph: Graph | GraphModule | ModuleOp | str,
              params: Mapping[str, Any] | None = None, dtype: str = "f32", *,
              state: Mapping[str, Any] | None = None) -> ReferenceModel:
    """The reference executor of a Graph, a GraphModule, a module, or module text (at
    any stage: hir, mir or lir). `state` gives some states their initial values (copied;
    as `rlx.jit(..., state=...)`).

    `dtype="f64"` evaluates in float64: f32 inputs and params are taken in float64 (not
    rounded to float32) and every op computes and returns float64 (integers untouched;
    the graph's constants keep their f32 values, states their f32 buffers). For gradient
    checks by central differences (`rlx.grad`); meant for hir and mir modules (an lir
    module's buffers stay float32)."""
    if isinstance(graph, Graph):
        module = graph.to_module()
    elif isinstance(graph, GraphModule):
        module = graph.module_for_compile()
    elif isinstance(graph, str):
        module = parse_module(graph)
    else:
        module = graph
    model = ReferenceModel(module, params, dtype)
    model.states.write_all(state)
    return model
