"""rlx-mlir: an ML compiler on xDSL (HIR -> MIR -> LIR -> llvm, JIT-compiled SIMD kernels).

```python
import rlx_mlir as rlx
g = rlx.Graph("mlp")
x = g.input("x", (4, 64))
g.output(g.softmax(g.linear(x, g.param("w", (64, 10)))))
print(g.to_mlir())
```
"""

from rlx_mlir.autodiff.core import grad, grad_values
from rlx_mlir.compiled_graph import CompiledGraph
from rlx_mlir.compiler import compile_mlir, jit
from rlx_mlir.core.errors import (
    ArgumentError,
    DTypeError,
    GraphError,
    OptionError,
    RlxError,
    ShapeError,
)
from rlx_mlir.core.fusion import FusionPolicy
from rlx_mlir.graph import Graph, Value
from rlx_mlir.graph_module import GraphModule, GraphStage
from rlx_mlir.phases import Phase, PhaseSchedule, derive_phases
from rlx_mlir.reference import reference

__all__ = [
    "ArgumentError", "DTypeError", "Graph", "GraphError", "OptionError", "RlxError", "ShapeError", "Value",
    "reference", "jit", "compile_mlir", "CompiledGraph", "models",
    "FusionPolicy", "GraphModule", "GraphStage",
]
__all__ += ["Phase", "PhaseSchedule", "derive_phases"]
__all__ += ["grad", "grad_values"]


def __getattr__(name: str):
    """`rlx.models` (GGUF models) is imported on first use: it pulls in gguf and tokenizers,
    which a graph-only user does not need."""
    if name == "models":
        import importlib

        return importlib.import_module("rlx_mlir.models")
    raise AttributeError(f"module 'rlx_mlir' has no attribute {name!r}")
