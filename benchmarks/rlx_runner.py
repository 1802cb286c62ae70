"""rlx-mlir side: the `threads=` keyword (when `rlx.jit` has it) and compiled-model facts."""

from __future__ import annotations

import inspect
import os
from typing import Any


def supports_threads() -> bool:
    import rlx_mlir as rlx

    try:
        return "threads" in inspect.signature(rlx.jit).parameters
    except (TypeError, ValueError):
        return False


def jit_kwargs(threads: int | None) -> dict[str, Any]:
    """{'threads': n} when rlx.jit takes it, else {} (rlx then runs as it does by default)."""
    return {"threads": threads} if threads and supports_threads() else {}


def rlx_env() -> dict[str, str]:
    """RLX_* environment variables (a thread-count override would show here), except the
    cache folder, which the harness sets itself."""
    return {k: v for k, v in os.environ.items() if k.startswith("RLX_") and k != "RLX_CACHE_DIR"}


def model_info(model: Any) -> dict[str, Any]:
    return {
        "arena_bytes": getattr(model, "arena_bytes", None),
        "naive_bytes": getattr(model, "naive_bytes", None),
        "cache": "disk" if getattr(model, "from_disk_cache", False) else "compiled",
        "threads_used": getattr(model, "threads", None),
        "parallel": getattr(getattr(model, "abi", None), "parallel", None),
    }
