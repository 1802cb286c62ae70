"""The core of rlx-mlir: the leaf modules every layer above may import (errors, shape
rules, reference kernels, the target CPU, the entry ABI). Nothing here imports from
`rlx_mlir.dialects`, `rlx_mlir.passes` or the Python API."""
