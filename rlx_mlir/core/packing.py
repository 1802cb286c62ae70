"""Weight layouts shared by the kernels that read them and the runtime that packs them.

A bound 2-D weight used only as a matmul rhs is stored as `LAYOUT_PACKED_RHS` (see
`rlx_mlir.core.abi`): the compiled graph packs it once with `pack_rhs` when it binds the
param, and the matmul kernels (`passes/lir_to_llvm`) read its panels of
`panel_columns(W)` columns.

A bound GGUF weight (ui8 rows of 32-value blocks) read only by the int8 kernels of its
scheme is stored as `interleaved_layout(scheme, W)`: `interleave_blocks` puts each block
of W consecutive rows side by side, field by field, so that the kernel's column-lane tiles
(weight row c in vector lane c) load each field of W rows as one vector instead of
gathering and transposing it per call.
"""

from __future__ import annotations

import numpy as np

from rlx_mlir.core.abi import LAYOUT_INTERLEAVED, LAYOUT_PACKED_RHS

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


def unpack_rhs(packed: np.ndarray, width: int) -> np.ndarray:
    """The row-major B[K, N] of `pack_rhs(B, width)` (its inverse)."""
    k, n = packed.shape
    nb = panel_columns(width)
    flat, panels, at = packed.reshape(-1), [], 0
    for j in range(0, n, nb):
        cols = min(nb, n - j)
        panels.append(flat[at:at + k * cols].reshape(k, cols))
        at += k * cols
    return np.ascontiguousarray(np.concatenate(panels, axis=1))


BLOCK_FIELDS: dict[str, tuple[tuple[int, int], ...]] = {
    "q4_0": ((0, 2), (2, 16)),
    "q4_1": ((0, 2), (2, 2), (4, 16)),
    "q5_0": ((0, 2), (2, 4), (6, 16)),
    "q5_1": ((0, 2), (2, 2), (4, 4), (8, 16)),
    "q8_0": ((0, 2), (2, 32)),
    "q4_k": ((0, 144),),
    "q5_k": ((0, 176),),
    "q6_k": ((0, 208), (208, 2)),
    "q2_k": ((0, 84),),
    "q3_k": ((0, 108), (108, 2)),
}
"""(byte offset, bytes) of the fields of a block of the schemes with an interleaved layout.
32-value blocks: the f16 d, the f16 m (q4_1, q5_1), the u32 of 5th bits (q5_0, q5_1), the
quants. K-quant superblocks (256 values): their dwords as one field, and the f16 d that
ends q6_k and q3_k (their size is not a whole number of dwords)."""


def interleaved_layout(scheme: str, width: int) -> str:
    """The `rlx.layout` of a weight of `scheme` interleaved `width` rows at a time."""
    return f"{LAYOUT_INTERLEAVED}:{scheme}:{width}"


def parse_interleaved(layout: str) -> tuple[str, int] | None:
    """(scheme, width) of an `interleaved_layout`, None for any other layout."""
    prefix, _, rest = layout.partition(":")
    scheme, _, width = rest.partition(":")
    if prefix != LAYOUT_INTERLEAVED or scheme not in BLOCK_FIELDS or not width.isdigit():
        return None
    return scheme, int(width)


def interleaved_offset(scheme: str, width: int, field_offset: int, unit: int, lane: int) -> int:
    """Byte offset, within the interleaved group of one block of `width` rows, of unit
    `unit` (a dword, or the whole field when it is shorter) of the field at
    `field_offset` of row `lane`'s block: the field's W copies start at W·field_offset,
    unit-major, then lane."""
    size = dict(BLOCK_FIELDS[scheme])[field_offset]
    step = min(4, size)
    return width * field_offset + (unit * width + lane) * step


def interleave_blocks(w: np.ndarray, scheme: str, width: int) -> np.ndarray:
    """GGUF block rows w[N, blocks·bytes] (ui8) in the interleaved layout: for every whole
    group of `width` rows and every block column b, one group of width·bytes bytes in
    which each field (`BLOCK_FIELDS`) of the W blocks comes as its dwords, dword-major,
    then row (fields shorter than 4 bytes: the W copies side by side), at W times the
    field's offset in a block (`interleaved_offset`). The N % width last rows stay as
    they are. Returns the same bytes reordered, in w's shape."""
    fields = BLOCK_FIELDS[scheme]
    block_bytes = sum(size for _, size in fields)
    n, row_bytes = w.shape
    if row_bytes % block_bytes:
        raise ValueError(f"interleave_blocks: rows of {row_bytes} bytes are not whole "
                         f"{scheme} blocks of {block_bytes}")
    whole = n // width * width
    blocks = row_bytes // block_bytes
    tiles = w[:whole].reshape(whole // width, width, blocks, block_bytes).transpose(0, 2, 1, 3)
    # Written field by field into one new array, without whole-size temporaries: a
    # model's largest table (Gemma 3's 171 MB token_embd) is copied once, not four times.
    packed = np.empty(w.shape, np.uint8)
    groups = packed[:whole].reshape(whole // width, blocks, width * block_bytes)
    for offset, size in fields:
        step = min(4, size)
        field = tiles[..., offset:offset + size].reshape(*tiles.shape[:3], size // step, step)
        into = groups[..., width * offset:width * (offset + size)]
        into.reshape(*groups.shape[:2], size // step, width, step)[...] = field.transpose(0, 1, 3, 2, 4)
    packed[whole:] = w[whole:]
    return packed


def deinterleave_blocks(packed: np.ndarray, scheme: str, width: int) -> np.ndarray:
    """The GGUF rows of `interleave_blocks(w, scheme, width)` (its inverse)."""
    fields = BLOCK_FIELDS[scheme]
    block_bytes = sum(size for _, size in fields)
    n, row_bytes = packed.shape
    whole, blocks = n // width * width, row_bytes // block_bytes
    groups = packed[:whole].reshape(whole // width, blocks, width * block_bytes)
    rows = np.empty((whole // width, blocks, width, block_bytes), np.uint8)
    for offset, size in fields:
        step = min(4, size)
        field = groups[..., width * offset:width * (offset + size)]
        field = field.reshape(*groups.shape[:2], size // step, width, step).transpose(0, 1, 3, 2, 4)
        rows[..., offset:offset + size] = field.reshape(*groups.shape[:2], width, size)
    unpacked = rows.transpose(0, 2, 1, 3).reshape(whole, row_bytes)
    return np.ascontiguousarray(np.concatenate([unpacked, packed[whole:]]))


def to_layout(array: np.ndarray, layout: str | None, width: int) -> np.ndarray:
    """A row-major weight in `layout` (`LAYOUT_PACKED_RHS` for vector width `width`, an
    `interleaved_layout`, or None: as is)."""
    return _convert(array, layout, width, pack=True)


def from_layout(array: np.ndarray, layout: str | None, width: int) -> np.ndarray:
    """The row-major weight of `to_layout(weight, layout, width)`."""
    return _convert(array, layout, width, pack=False)


def _convert(array: np.ndarray, layout: str | None, width: int, pack: bool) -> np.ndarray:
    if layout is None:
        return array
    if layout == LAYOUT_PACKED_RHS:
        return (pack_rhs if pack else unpack_rhs)(array, width)
    interleaved = parse_interleaved(layout)
    if interleaved is None:
        raise ValueError(f"unknown weight layout {layout!r}")
    return (interleave_blocks if pack else deinterleave_blocks)(array, *interleaved)
