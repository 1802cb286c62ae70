"""VJP rules of the linear algebra, reductions, norms and data movement (matmul, fused_matmul, dequant_matmul, shared_input_matmul, reduce, softmax, rms_norm, layer_norm, transpose, reshape, narrow, concat, broadcast_to, constant, state ops)."""

from __future__ import annotations

from rlx_mlir.autodiff.context import VjpRule

RULES: dict[str, VjpRule] = {}
"""Op name (`mir.add`) -> its VJP rule."""
