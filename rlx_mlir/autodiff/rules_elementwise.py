"""VJP rules of the elementwise ops (unary, binary with broadcasting, fused_elementwise)."""

from __future__ import annotations

from rlx_mlir.autodiff.context import VjpRule

RULES: dict[str, VjpRule] = {}
"""Op name (`mir.add`) -> its VJP rule."""
