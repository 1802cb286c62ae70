"""Weight layouts shared by the kernels that read them and the runtime that packs them.

A bound 2-D weight used only as a matmul rhs is stored as `LAYOUT_PACKED_RHS` (see
`rlx_mlir.core.abi`): the compiled graph packs it once with `pack_rhs` when it binds the
param, and the matmul kernels (`passes/lir_to_llvm`) read its panels of
`panel_columns(W)` columns.
"""

from __future__ import annotations

import numpy as np

GEMM_TILES: dict[int, tuple[int, int]] = {16: (6, 4), 8: (6, 2), 4: (6, 2)}
"""(MR, NR) per vector width: an MR × NR·W tile of C in MR·NR vector accumulators.
W=16 (32 zmm): 24 accumulators + 4 B vectors + 1 broadcast; W=8 (16 ymm): 12 + 2 + 1;
W=4: 12 xmm accumulators."""


def panel_columns(width: int) -> int:
    """NR·W: the columns of a B panel of the large-M plan and of the prepacked layout."""
    return GEMM_TILES.get(width, (4, 2))[1] * width


def pack_rhs(b: np.ndarray, width: int) -> np.ndarray:
    """A weight B[K, N] in the layout of a prepacked rhs for vector width `width`:
    the panels B[:, j:j + NB] (NB = panel_columns(width), the last one narrower) one after
    the other, each a contiguous row-major [K, cols] block: the same K·N floats, reordered,
    returned with B's shape so it fits B's buffer."""
    k, n = b.shape
    nb = panel_columns(width)
    flat = np.concatenate([np.ascontiguousarray(b[:, j:j + nb]).ravel() for j in range(0, n, nb)])
    return flat.reshape(k, n)
