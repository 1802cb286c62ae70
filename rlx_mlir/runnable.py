"""`Runnable`: what runs a graph, whichever engine does it.

The compiled model (`rlx.jit`, `rlx_mlir.compiled_graph.CompiledGraph`), the reference
executor (`rlx.reference`, `rlx_mlir.reference.ReferenceModel`) and so the engine a GGUF
language model runs (`LanguageModel.runner`) all take the same calls, bind them by the
same `Signature` and keep their state the same way; code that only runs a model takes a
`Runnable`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np

from rlx_mlir.binding import Signature


@runtime_checkable
class Runnable(Protocol):
    """A graph that can be called: numpy arrays in (positionally or by name), numpy
    arrays out (a tuple if several), with its state (`g.state`, the KV caches' position)
    kept between calls."""

    @property
    def signature(self) -> Signature:
        """The arguments a call takes and the results it returns."""
        ...

    @property
    def output_names(self) -> tuple[str, ...]:
        """The results' names, in result order."""
        ...

    @property
    def position(self) -> int:
        """P: where the next rows of the KV caches go (advanced by each call)."""
        ...

    @property
    def state(self) -> Mapping[str, np.ndarray]:
        """Read-only views of the state buffers, by name."""
        ...

    def reset(self, position: int = 0) -> None:
        """Rewind the KV caches to `position` (at 0 every other state is zeroed too)."""
        ...

    def __call__(self, *args: Any, **kwargs: Any) -> np.ndarray | tuple[np.ndarray, ...]:
        ...


__all__ = ["Runnable"]
