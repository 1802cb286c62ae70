"""hir on numpy: every block runs its reference kernel."""

from __future__ import annotations

from rlx_mlir.core import reference_kernels as K
from rlx_mlir.dialects.hir import HIR
from rlx_mlir.interpreters.common import call_kernel, functions_for

_KERNELS = {
    name: getattr(K, name)
    for name in (
        "linear", "swiglu_ffn", "rms_norm", "residual_rms_norm", "layer_norm", "attention",
        "rope", "llama_decoder_block", "dequant_matmul", "embedding", "depthwise_conv1d_causal",
    )
}

HirFunctions = functions_for(
    HIR,
    {name: (lambda op, args, props, k=kernel: call_kernel(k, args, props))
     for name, kernel in _KERNELS.items()},
    "HirFunctions",
)
