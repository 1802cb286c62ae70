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
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from rlx_mlir.binding import Signature, convert, describe_bad_index
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
               states: StateStore | None = None) -> tuple[np.ndarray, ...]:
    """Run the graph function of `module` on arrays keyed by argument name.

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
                args.append(convert(spec, arrays[spec.name]).copy())
        with bound_symbols(sizes), deferred_assigns():
            results = make_interpreter(module).call_op(fn, tuple(args))
            # copied before the deferred assigns write the states (a result may be one)
            return tuple(np.array(r) for r in (outputs if outputs else results))


class ReferenceModel:
    """A graph run by the reference executor, called like a compiled model (both are
    `rlx_mlir.runnable.Runnable`s)."""

    def __init__(self, module: ModuleOp, params: Mapping[str, Any] | None = None):
        self.module = module
        self.signature = Signature.of(entry_function(module))
        specs = {a.name: a for a in self.signature.callable_args}
        self.states = StateStore.of_function(entry_function(module))
        """The model's states and position, updated by each call."""
        self._bound = {}
        for name, value in (params or {}).items():
            if name not in specs or specs[name].role != ROLE_PARAM:
                raise ArgumentError(f"params: {name!r} is not a param of {self.signature.name!r}")
            self._bound[name] = convert(specs[name], value).copy()

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
        try:
            results = run_module(self.module, arrays, self.states)
        except ArgumentError:
            # The kernels know no argument names: name the first bad index as a compiled
            # model does (rlx_mlir.compiled_graph), when it is an argument's.
            detail = describe_bad_index(self.module, arrays)
            if detail is None:
                raise
            raise ArgumentError(f"{self.signature.name}: {detail}") from None
        return results[0] if len(results) == 1 else results


def reference(graph: Graph | GraphModule | ModuleOp | str,
              params: Mapping[str, Any] | None = None, *,
              state: Mapping[str, Any] | None = None) -> ReferenceModel:
    """The reference executor of a Graph, a GraphModule, a module, or module text (at
    any stage: hir, mir or lir). `state` gives some states their initial values (copied;
    as `rlx.jit(..., state=...)`)."""
    if isinstance(graph, Graph):
        module = graph.to_module()
    elif isinstance(graph, GraphModule):
        module = graph.module_for_compile()
    elif isinstance(graph, str):
        module = parse_module(graph)
    else:
        module = graph
    model = ReferenceModel(module, params)
    model.states.write_all(state)
    return model
