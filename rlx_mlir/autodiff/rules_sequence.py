"""VJP rules of the sequence ops (scan, selective_scan, gated_delta_net)."""

from __future__ import annotations

from rlx_mlir.autodiff.context import VjpRule

RULES: dict[str, VjpRule] = {}
"""Op name (`mir.add`) -> its VJP rule."""
