"""The kernel of `lir.shared_input_matmul`: one x, several weights, one out each, with x
read (and, on the int8 path, quantized) once, in one parallel region (q/k/v, gate/up).

The weights are one virtual range of columns [0, N_1 + ... + N_n) (a weight's columns:
the N of an f32 [K, N] weight, the weight rows of a GGUF one): a partitioned kernel gives
each thread a range of whole column units of it, cut at each weight's bounds
(dynamic.py `product_columns`), and runs that weight's tiles on its part, writing to its
own out. The tiles are those of the single-weight kernels, built by the same builders,
which take (weight, out, column range); so every out equals the separate kernel's bit
for bit. One builder per form:

- **f32 weights** (`build_shared_gemm`): matmul.py's `emit_gemm` per weight, with the
  plan of `lir.matmul` for x's rows (decode: K blocks streaming each weight in place;
  many rows: packed B panels, one stack buffer for every weight; a prepacked weight
  (`packed_rhs`: lir-pack-weights packs every weight of the op) read panel by panel);
  the column unit is a whole panel of NR·W columns.
- **GGUF weights, f32 activations** (`build_shared_dequant`, every scheme): dequant.py's
  tiles (`emit_dequant_product`: each weight row dequantized in registers), the unit
  `dequant_cols` weight rows.
- **`activations q8`**: every chunk of x's rows is quantized into the scratch once, then
  multiplied by every weight: the tiles of `lir.dequant_matmul`'s q8 kernels (the VNNI
  path of quant_dot.py where convert-lir-to-llvm marked the op, else the emulation of
  q8_emulated.py), driven by quant_dot.py's `chunked_rows`.

Over a symbolic x (`?` rows, ABI of dynamic.py) the row count is read at run time and
each row class (one row, decode rows, many rows) gets the plan of the single kernels.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from xdsl.dialects import llvm
from xdsl.dialects.builtin import i64
from xdsl.ir import SSAValue

from rlx_mlir.dialects import lir
from rlx_mlir.dialects.common import shape_of
from rlx_mlir.dialects.mir import activations_of
from rlx_mlir.dialects.rlx import QuantActivations
from rlx_mlir.passes.lir_to_llvm.builder import PTR, Index, KernelBuilder
from rlx_mlir.passes.lir_to_llvm.dequant import (
    F32Dequant,
    build_q8_kernel,
    dequant_cols,
    dequant_rows,
    emit_dequant_product,
)
from rlx_mlir.passes.lir_to_llvm.dynamic import (
    RuntimeDims,
    is_dynamic,
    kernel_symbols,
    product_columns,
    row_operands,
    rows_classes,
    runtime_rows,
)
from rlx_mlir.passes.lir_to_llvm.matmul import (
    SMALL_M,
    Matrices,
    emit_gemm,
    gemm_plan,
    pack_buffer_floats,
    rhs_packed,
)
from rlx_mlir.passes.lir_to_llvm.quant_dot import q8_products
from rlx_mlir.passes.lir_to_llvm.record import kernel


@kernel(lir.SharedInputMatmulOp, partitioned=True, runtime_dims=True)
def build_shared_input_matmul(op: lir.SharedInputMatmulOp, name: str, vector_width: int,
                              partitioned: bool = False) -> llvm.FuncOp:
    """out_i = x @ w_i (f32 weights) or x @ dequant(w_i)ᵀ (a scheme; `activations q8`: x
    quantized once) for every weight i (partitioned: plus trailing (part, parts), this
    part's share of the weights' joint columns)."""
    if activations_of(op) == QuantActivations.Q8:
        return build_q8_kernel(op, name, vector_width, partitioned)
    if op.scheme is None:
        return build_shared_gemm(op, name, vector_width, partitioned)
    return build_shared_dequant(op, name, vector_width, partitioned)


def _kernel(op: lir.SharedInputMatmulOp, name: str, vector_width: int, partitioned: bool
            ) -> tuple[KernelBuilder, int | None]:
    """The kernel's builder, (x, w_0..w_n-1, out_0..out_n-1, [sizes...], [part, parts]),
    and x's static row count (None: read at run time)."""
    dynamic = is_dynamic(op)
    symbols = kernel_symbols(op) if dynamic else ()
    xs = row_operands(op)[0] if dynamic else shape_of(op.x)
    kb = KernelBuilder(name, [PTR] * (1 + 2 * len(op.weights)) + [i64] * len(symbols)
                       + [i64, i64] * partitioned, vector_width=vector_width)
    return kb, None if dynamic else math.prod(xs[:-1])


def _buffers(kb: KernelBuilder, count: int) -> list[tuple[SSAValue, SSAValue]]:
    """(weight, out) pointers of each of `count` products."""
    return [(kb.args[1 + p], kb.args[1 + count + p]) for p in range(count)]


def build_shared_gemm(op: lir.SharedInputMatmulOp, name: str, vector_width: int,
                      partitioned: bool) -> llvm.FuncOp:
    """out_i[M, N_i] = x[M, K] @ w_i[K, N_i] (f32 weights, prepacked with `packed_rhs`),
    each weight by `emit_gemm` with the plan `lir.matmul` takes for M rows."""
    ns = tuple(int(shape_of(w)[1]) for w in op.weights)
    k = int(shape_of(op.x)[-1])
    packed = rhs_packed(op)
    kb, static_m = _kernel(op, name, vector_width, partitioned)
    x = kb.args[0]
    mats = [Matrices(x, w, out, k, n, n, packed) for (w, out), n in zip(_buffers(kb, len(ns)), ns, strict=True)]
    share = kb.args[-2:] if partitioned else None

    def rows_case(plan_rows: int) -> Callable[[Index], None]:
        """The products for `m` rows with the plan of `plan_rows` rows."""
        def emit(m: Index) -> None:
            plans = [gemm_plan(plan_rows, n, k, vector_width, packed) for n in ns]
            nb = plans[0].nr * vector_width  # the same panel width for every weight
            buffer = (kb.alloca(pack_buffer_floats(k, plans[0], vector_width))
                      if any(plan.pack and n >= nb for plan, n in zip(plans, ns, strict=True))
                      else None)
            product_columns(kb, ns, nb, share, lambda p, cols: emit_gemm(
                kb, mats[p], m, ns[p], k, plan=plans[p], cols=cols, pack_buffer=buffer))
        return emit

    if static_m is not None:
        rows_case(static_m)(static_m)
    else:
        sizes = RuntimeDims.of(op, kb.args[1 + 2 * len(ns):1 + 2 * len(ns) + len(kernel_symbols(op))])
        rows_classes(kb, runtime_rows(kb, sizes.shape(0)[:-1]), rows_case(1), rows_case(SMALL_M),
                     rows_case(SMALL_M + 1), SMALL_M)
    kb.ret()
    return kb.finish()


def build_shared_dequant(op: lir.SharedInputMatmulOp, name: str, vector_width: int,
                         partitioned: bool) -> llvm.FuncOp:
    """out_i[M, N_i] = x[M, K] @ dequant(w_i)[N_i, K]ᵀ with f32 activations (every scheme),
    each weight by dequant.py's tiles."""
    ns, k = q8_products(op)
    layout = F32Dequant.of(op.name, op.scheme.data.value, k, vector_width)
    kb, static_m = _kernel(op, name, vector_width, partitioned)
    x = kb.args[0]
    buffers = _buffers(kb, len(ns))
    share = kb.args[-2:] if partitioned else None

    def rows_case(m: Index, mr: int) -> None:
        product_columns(kb, ns, dequant_cols(mr, vector_width), share, lambda p, cols: (
            emit_dequant_product(kb, layout, x, *buffers[p], ns[p], m, mr, (0, m), cols)))

    dequant_rows(kb, op, static_m, 1 + 2 * len(ns), rows_case)
    kb.ret()
    return kb.finish()
