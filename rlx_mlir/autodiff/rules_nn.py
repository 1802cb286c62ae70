"""VJP rules of the neural-network ops (gather, dequant_gather, attention, rope, depthwise_conv1d)."""

from __future__ import annotations

from rlx_mlir.autodiff.context import VjpRule

RULES: dict[str, VjpRule] = {}
"""Op name (`mir.add`) -> its VJP rule."""
