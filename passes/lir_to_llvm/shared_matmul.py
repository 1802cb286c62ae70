"""The kernel of `lir.shared_input_matmul`: one x, several weights, one out each, with x
read and quantized once (q/k/v, gate/up).

The weights are one virtual range of columns [0, N_1 + ... + N_n): a partitioned kernel
gives each thread a range of column panels of it, cut at each weight's bounds, and runs
that weight's tiles on its part writing to its own out (quant_dot.py `chunked_rows`). On
the q8 activation path every chunk of x's rows is quantized into the scratch once, then
multiplied by every weight: the same tiles as `lir.dequant_matmul`'s q8 kernels (the
VNNI path of quant_dot.py where convert-lir-to-llvm marked the op, else the emulation of
q8_emulated.py), built by the same builders. convert-mir-to-lir makes this kernel only
for `activations q8`; the f32 forms are one kernel per weight.
"""

from __future__ import annotations

from xdsl.dialects import llvm

from rlx_mlir.core.errors import RlxError
from rlx_mlir.dialects import lir
from rlx_mlir.dialects.mir import activations_of
from rlx_mlir.dialects.rlx import QuantActivations
from rlx_mlir.passes.lir_to_llvm.q8_emulated import build_q8_emulated
from rlx_mlir.passes.lir_to_llvm.quant_dot import build_int8_dequant, uses_int8_dot
from rlx_mlir.passes.lir_to_llvm.record import kernel


@kernel(lir.SharedInputMatmulOp, partitioned=True, runtime_dims=True)
def build_shared_input_matmul(op: lir.SharedInputMatmulOp, name: str, vector_width: int,
                              partitioned: bool = False) -> llvm.FuncOp:
    """out_i[..., n] = Σ_k q8(x)[..., k]·dequant(w_i)[n, k] for every weight i, x quantized
    once (partitioned: plus trailing (part, parts), this part's share of the columns)."""
    if activations_of(op) != QuantActivations.Q8:
        raise RlxError(f"{op.name}: expected activations q8 (the f32 forms lower to one "
                       f"kernel per weight), got {activations_of(op).value}")
    if uses_int8_dot(op, vector_width):
        return build_int8_dequant(op, name, vector_width, partitioned)
    return build_q8_emulated(op, name, vector_width, partitioned)
