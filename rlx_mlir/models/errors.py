"""Errors of the models package."""

from __future__ import annotations

from rlx_mlir.core.errors import RlxError


class ModelError(RlxError):
    """A model file, model name or download is not one rlx-mlir can use; the message names why."""


class BatchingUnsupported(ModelError):
    """`load_gguf(..., slots > 1)` on an architecture without a batched graph (qwen35,
    whose delta-net and attention layers are not batched together yet)."""
