"""Interleaved block weights (`interleaved W` of lir.dequant_matmul / shared_input_matmul,
`rlx_mlir.core.packing.interleave_blocks`): the int8 kernels' column-lane tiles load each
field of W weight rows as one vector instead of transposing per call.

The arithmetic is the same as on row-major GGUF rows, so a kernel reading the interleaved
copy gives the row-major kernel's output bit for bit (and so the q8 reference's numbers):
every legacy scheme, whole tiles and a row-major rest of rows, one row and several, serial
and partitioned, at every int8 target. Through `rlx.jit`: weights bound at compile time are
interleaved once at bind time (lir-pack-weights), unbound ones and f32 activations are not.
"""

from __future__ import annotations

import ctypes
import mmap
import sys
from pathlib import Path

import numpy as np
import pytest
from jit_harness import Jitted
from test_jit_dequant import blocks
from test_jit_quant_dot import check, dequant_op, runnable, x_rows
from xdsl.dialects.builtin import IntegerAttr, i64
from xdsl.utils.exceptions import PassFailedException, VerifyException

import rlx_mlir as rlx
from rlx_mlir.core import quants
from rlx_mlir.core.packing import (
    BLOCK_FIELDS,
    from_layout,
    interleave_blocks,
    interleaved_layout,
    interleaved_offset,
    parse_interleaved,
    to_layout,
)
from rlx_mlir.core.target import host_target
from rlx_mlir.passes.lir_to_llvm import dequant as mm
from rlx_mlir.passes.lir_to_llvm import quant_dot as qd
from rlx_mlir.passes.lir_to_llvm.builder import KernelBuilder

SCHEMES = tuple(BLOCK_FIELDS)
"""The 32-value block schemes and the K-quants (256-value superblocks)."""
INT8_TARGETS = ("w16-vnni", "w8-vnni", "w8-avx2", "w16-avx512bw")
RNG = np.random.default_rng(2027)


def test_interleave_puts_each_field_where_the_kernel_reads_it():
    """Every byte of a whole tile moves to `interleaved_offset` of its group; the rest of
    the rows stay; the bytes are a permutation (nothing lost)."""
    for scheme, fields in BLOCK_FIELDS.items():
        block = sum(size for _, size in fields)
        for width in (8, 16):
            n, blocks_per_row = 2 * width + 3, 3
            w = RNG.integers(0, 256, (n, blocks_per_row * block), dtype=np.uint8)
            packed = interleave_blocks(w, scheme, width)
            assert packed.shape == w.shape and packed.dtype == np.uint8
            np.testing.assert_array_equal(np.sort(packed, axis=None), np.sort(w, axis=None))
            np.testing.assert_array_equal(packed[2 * width:], w[2 * width:])
            flat = packed.reshape(-1)
            for row in range(2 * width):
                tile, lane = divmod(row, width)
                for b in range(blocks_per_row):
                    group = (tile * blocks_per_row + b) * width * block
                    for offset, size in fields:
                        unit = min(4, size)
                        for u in range(size // unit):
                            at = group + interleaved_offset(scheme, width, offset, u, lane)
                            first = b * block + offset + u * unit
                            np.testing.assert_array_equal(flat[at:at + unit], w[row, first:first + unit])


def test_layouts_invert():
    """from_layout undoes to_layout (a build sharing bound weights repacks from it)."""
    for scheme, fields in BLOCK_FIELDS.items():
        block = sum(size for _, size in fields)
        for width in (8, 16):
            w = RNG.integers(0, 256, (2 * width + 3, 3 * block), dtype=np.uint8)
            layout = interleaved_layout(scheme, width)
            np.testing.assert_array_equal(from_layout(to_layout(w, layout, width), layout, width), w)
    for width in (4, 8, 16):
        b = RNG.standard_normal((7, 150)).astype(np.float32)
        np.testing.assert_array_equal(from_layout(to_layout(b, "packed_rhs", width), "packed_rhs", width), b)


def test_layout_names_round_trip():
    assert parse_interleaved(interleaved_layout("q5_1", 8)) == ("q5_1", 8)
    for other in ("packed_rhs", "interleaved:iq4_xs:16", "interleaved:q4_0:x", "interleaved"):
        assert parse_interleaved(other) is None
    with pytest.raises(ValueError, match="not whole q4_0 blocks"):
        interleave_blocks(np.zeros((16, 19), np.uint8), "q4_0", 16)


def _interleaved(op, width: int):
    op.properties["interleaved"] = IntegerAttr(width, i64)
    op.verify()
    return op


@pytest.mark.parametrize("target", INT8_TARGETS)
def test_interleaved_kernels_equal_the_row_major_ones(target):
    """37 = 2·16 + 5 = 4·8 + 5 weight rows (whole tiles, then the row-major rest: row tiles,
    or the K-quants' masked tile), K = 96 (at W = 16 the last step has one block; 512 for
    the K-quants), symbolic rows 1..23 serial and in 2 and 3 parts: the same bits as the
    row-major kernel, within the q8 reference. With 4 parts and 23 or 64 rows the parts also
    split x's rows (quant_dot.row_groups): the same bits again. The K-quants at W = 16 VNNI
    and W = 8 maddubs (`Columns` is the same code at every target)."""
    width, cpu, isa = runnable(target)
    n = 37
    cases, functions = [], []
    # the K-quants' kernels compile slowly: at one VNNI and one maddubs target
    schemes = SCHEMES if target in ("w16-vnni", "w8-avx2") else tuple(
        s for s in SCHEMES if s not in qd.K_INT8_SCHEMES)
    for i, scheme in enumerate(schemes):
        k = 512 if scheme in qd.K_INT8_SCHEMES else 96
        w = np.ascontiguousarray(blocks(scheme, n, k))
        plain = dequant_op(scheme, ("S", k), w, isa)
        packed = _interleaved(dequant_op(scheme, ("S", k), w, isa), width)
        functions += [mm.build_dequant_matmul(plain, f"k{i}", width),
                      mm.build_dequant_matmul(packed, f"i{i}", width),
                      mm.build_dequant_matmul(packed, f"p{i}", width, partitioned=True)]
        cases.append((scheme, w, interleave_blocks(w, scheme, width)))
    jitted = Jitted(functions, cpu, verify=False)
    for i, (scheme, w, w_packed) in enumerate(cases):
        k = 512 if scheme in qd.K_INT8_SCHEMES else 96
        plain = jitted.function(f"k{i}", 3, extra=[ctypes.c_int64])
        packed = jitted.function(f"i{i}", 3, extra=[ctypes.c_int64])
        parted = jitted.function(f"p{i}", 3, extra=[ctypes.c_int64] * 3)
        for m in (1, 2, 5, 9, 23, 64):
            x = x_rows(m, k)
            want, got = (np.full((m, n), np.nan, np.float32) for _ in range(2))
            plain(x.ctypes.data, w.ctypes.data, want.ctypes.data, m)
            packed(x.ctypes.data, w_packed.ctypes.data, got.ctypes.data, m)
            where = f"{scheme} M={m} {target}"
            np.testing.assert_array_equal(got, want, err_msg=where)
            check(got, x, w, scheme, where)
            for parts in (2, 3, 4):
                out = np.full((m, n), np.nan, np.float32)
                writers = np.zeros((m, n), np.int64)
                for part in range(parts):
                    share = np.full((m, n), np.nan, np.float32)
                    parted(x.ctypes.data, w_packed.ctypes.data, share.ctypes.data, m, part, parts)
                    out[~np.isnan(share)] = share[~np.isnan(share)]
                    writers += ~np.isnan(share)
                assert (writers == 1).all(), f"{where} parts={parts}: not one writer each"
                np.testing.assert_array_equal(out, want, err_msg=f"{where} parts={parts}")



@pytest.mark.parametrize("width", [16, 8])
def test_which_interleaved_tiles_prefetch(width):
    """Prefill's tiles (several rows of x) prefetch their interleaved groups ahead; a
    decode row's tiles only for the schemes of `ONE_ROW_PREFETCH_BYTES` (q5_1, which the
    hardware prefetchers fed at a third of the others' rate: for the rest the prefetch
    slowed decode down). Prefetches only: the bits are those of
    test_interleaved_kernels_equal_the_row_major_ones."""
    def prefetches(scheme: str, rows: int) -> int:
        w = np.ascontiguousarray(blocks(scheme, 2 * width, 256))
        op = _interleaved(dequant_op(scheme, (rows, 256), w, qd.VNNI), width)
        return str(mm.build_dequant_matmul(op, "f", width)).count("llvm.prefetch")

    assert set(qd.ONE_ROW_PREFETCH_BYTES) <= set(SCHEMES)
    for scheme in (s for s in SCHEMES if s not in qd.K_INT8_SCHEMES):
        assert prefetches(scheme, 5) > 0, scheme
        assert (prefetches(scheme, 1) > 0) == (scheme in qd.ONE_ROW_PREFETCH_BYTES), scheme

def test_row_groups():
    """How many row groups the parts of a kernel form (a power of two dividing the parts,
    at least min_rows rows each, a weight share per part within ROW_SPLIT_SHARE_BYTES)."""
    kb = KernelBuilder("groups", [i64, i64], vector_width=16, result_type=i64)
    kb.ret(qd.row_groups(kb, kb.args[0], kb.args[1], 8, qd.ROW_SPLIT_SHARE_BYTES // 4))
    jitted = Jitted([kb.finish()], None, verify=False)  # alive while its code is called
    fn = jitted.function("groups", 0, restype=ctypes.c_int64, extra=[ctypes.c_int64, ctypes.c_int64])
    cases = {(1, 16): 1, (8, 16): 1, (16, 16): 2, (64, 16): 8, (64, 12): 4, (64, 3): 1,
             (256, 16): 16, (1000, 64): 64, (17, 2): 2, (15, 2): 1, (64, 1): 1}
    assert {case: fn(*case) for case in cases} == cases
    # a share of a quarter of the limit: at most 4 groups (of the weights: one part in 4)
    kb = KernelBuilder("share", [i64, i64], vector_width=16, result_type=i64)
    kb.ret(qd.row_groups(kb, kb.args[0], kb.args[1], 8, 4 * qd.ROW_SPLIT_SHARE_BYTES))
    jitted = Jitted([kb.finish()], None, verify=False)
    fn = jitted.function("share", 0, restype=ctypes.c_int64, extra=[ctypes.c_int64, ctypes.c_int64])
    cases = {(64, 16): 4, (64, 8): 2, (64, 4): 1, (64, 2): 1, (1000, 64): 16}
    assert {case: fn(*case) for case in cases} == cases


def test_the_op_states_a_layout_its_kernel_reads():
    w = np.ascontiguousarray(blocks("q4_1", 16, 64))
    for bad, message in ((12, "expects 8 or 16 rows"),):
        op = dequant_op("q4_1", ("S", 64), w, qd.VNNI)
        op.properties["interleaved"] = IntegerAttr(bad, i64)
        with pytest.raises(VerifyException, match=message):
            op.verify()
    iq4 = dequant_op("iq4_xs", ("S", 256), np.ascontiguousarray(blocks("iq4_xs", 16, 256)), None)
    iq4.properties["interleaved"] = IntegerAttr(16, i64)
    with pytest.raises(VerifyException, match="expects a scheme of q4_0.*got iq4_xs"):
        iq4.verify()
    # a kernel of another width, or the emulation, cannot read the layout
    op = _interleaved(dequant_op("q4_1", ("S", 64), w, qd.VNNI), 16)
    with pytest.raises(PassFailedException, match="interleaved 16 rows.*width 8"):
        mm.build_dequant_matmul(op, "k", 8)
    emulated = _interleaved(dequant_op("q4_1", ("S", 64), w, None), 16)
    with pytest.raises(PassFailedException, match="without an int8 kernel"):
        mm.build_dequant_matmul(emulated, "k", 16)


SHAPES = {"gate": (64, 96), "up": (64, 96), "down": (96, 64), "extra": (37, 96)}
"""Weight rows × values per row: the FFN's, and 37 = 2·16 + 5 = 4·8 + 5 rows."""


def _ffn_graph(scheme: str) -> rlx.Graph:
    """x[S, 96] through a shared-input pair (gate, up: one shared_input_matmul after
    mir-fuse) and a down projection, and through `extra` (a row-major rest of rows), all
    in `scheme` with q8 activations."""
    g = rlx.Graph("ffn")
    x = g.input("x", ("S", 96))
    raw = {name: g.param(name, (rows, cols // 32 * quants.quant_type(scheme).type_size), "ui8")
           for name, (rows, cols) in SHAPES.items()}
    gate, up = (g.dequant_matmul(x, raw[name], scheme, activations="q8") for name in ("gate", "up"))
    g.output(g.dequant_matmul(g.mul(g.silu(gate), up), raw["down"], scheme, activations="q8"),
             g.dequant_matmul(x, raw["extra"], scheme, activations="q8"))
    return g


def _tame(raw: np.ndarray, scheme: str) -> np.ndarray:
    """Random 32-value blocks with small f16 scales (d, and m where the block has one), so
    that the FFN's values stay finite."""
    fields = dict(BLOCK_FIELDS[scheme])
    block = sum(fields.values())
    view = raw.reshape(raw.shape[0], -1, block).copy()
    for offset in (0, 2) if fields.get(2) == 2 else (0,):
        scales = RNG.uniform(-0.01, 0.01, view.shape[:2]).astype(np.float16)
        view[:, :, offset:offset + 2] = scales.view(np.uint8).reshape(*view.shape[:2], 2)
    return view.reshape(raw.shape)


@pytest.mark.parametrize("scheme", ["q4_1", "q8_0", "q5_0"])
def test_jit_interleaves_bound_weights(scheme):
    """Bound weights are interleaved at bind time for the host's int8 kernels (their
    layout in the ABI) and give the unbound (row-major) build's bits."""
    host = host_target()
    width = host.vector_width
    if qd.int8_dot_isa(host, width) is None:
        pytest.skip("the host has no int8 kernels")
    g = _ffn_graph(scheme)
    params = {name: _tame(blocks(scheme, *shape), scheme) for name, shape in SHAPES.items()}
    bound = rlx.jit(g, params=params, threads=1)
    plain = rlx.jit(g, threads=1)
    assert bound.abi.layouts == dict.fromkeys(SHAPES, interleaved_layout(scheme, width))
    assert plain.abi.layouts == {}
    lir_text = bound.mlir("lir")
    assert f"shared_input_matmul {scheme}" in lir_text
    assert lir_text.count(f"interleaved {width}") == lir_text.count("activations q8") >= 2
    reference = rlx.reference(g, params=params)
    for m in (1, 3, 17):
        x = x_rows(m, 96)
        got = bound(x)
        for a, b, want in zip(got, plain(x, *params.values()), reference(x), strict=True):
            np.testing.assert_array_equal(a, b, err_msg=f"{scheme} M={m}")
            np.testing.assert_allclose(a, want, rtol=1e-3, atol=1e-3 * np.abs(want).max())


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_tied_table_is_interleaved_for_its_projection(scheme):
    """An embedding table that is also the output projection (tied, as SmolLM2's
    token_embd) is interleaved, and its lookup (lir.dequant_gather) decodes rows of whole
    groups and of the row-major rest exactly; the ids out of range still fail."""
    host = host_target()
    if qd.int8_dot_isa(host, host.vector_width) is None:
        pytest.skip("the host has no int8 kernels")
    vocab, d = 37, 256 if scheme in qd.K_INT8_SCHEMES else 64
    g = rlx.Graph("tied")
    ids = g.input("ids", ("S",), "i32")
    qtype = quants.quant_type(scheme)
    table = g.param("table", (vocab, d // qtype.block_size * qtype.type_size), "ui8")
    h = g.embedding(table, ids, scheme=scheme)
    g.output(g.dequant_matmul(h, table, scheme, activations="q8"), h)
    params = {"table": blocks(scheme, vocab, d)}
    bound = rlx.jit(g, params=params, threads=1)
    assert bound.abi.layouts == {"table": interleaved_layout(scheme, host.vector_width)}
    lir_text = bound.mlir("lir")
    assert "lir.dequant_gather" in lir_text
    assert lir_text.count(f"interleaved {host.vector_width}") == 2
    plain = rlx.jit(g, threads=1)
    every = np.arange(vocab, dtype=np.int32)[::-1].copy()
    got, want = bound(every), plain(every, params["table"])
    np.testing.assert_array_equal(got[1], quants.dequantize(params["table"], scheme)[every])
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(rlx.RlxError, match="out of range"):
        bound(np.array([vocab], np.int32))


def test_builds_sharing_bound_weights_read_them_in_their_own_layout():
    """An entry that reads a tied table only through its lookup, and a rebuild for another
    vector width, share the model's bound params: where their layout differs from the
    bound copy's they get a copy in theirs (no bytes read in the wrong layout)."""
    host = host_target()
    width = host.vector_width
    if width != 16 or qd.int8_dot_isa(host, 8) is None:
        pytest.skip("needs int8 kernels at W = 16 and W = 8")
    scheme, vocab, d = "q8_0", 37, 64
    g = rlx.Graph("tied")
    ids = g.input("ids", ("S",), "i32")
    table = g.param("table", (vocab, d // 32 * 34), "ui8")
    h = g.embedding(table, ids, scheme=scheme)
    g.output(logits=g.dequant_matmul(h, table, scheme, activations="q8"), hidden=h)
    params = {"table": blocks(scheme, vocab, d)}
    model = rlx.jit(g, params=params, threads=1)
    assert model.abi.layouts == {"table": interleaved_layout(scheme, 16)}
    every = np.arange(vocab, dtype=np.int32)
    logits, hidden = model(every)
    np.testing.assert_array_equal(hidden, quants.dequantize(params["table"], scheme))
    lookup = model.entry("hidden")  # the table is only looked up: row-major there
    assert lookup.abi.layouts == {}
    np.testing.assert_array_equal(lookup(every), hidden)
    narrow = model.recompile(vector_width=8)
    assert narrow.abi.layouts == {"table": interleaved_layout(scheme, 8)}
    for a, b in zip(narrow(every), (logits, hidden), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * np.abs(b).max())


def _mapped_kib(address: int) -> int:
    """The resident KiB of this process's mapping that holds `address` (/proc/self/smaps:
    the pages mapped here, not the file's pages in the page cache)."""
    lines = Path("/proc/self/smaps").read_text().splitlines()
    for i, line in enumerate(lines):
        first, _, rest = line.partition(" ")
        if "-" in first and rest and all(c in "0123456789abcdef-" for c in first):
            low, high = (int(part, 16) for part in first.split("-"))
            if low <= address < high:
                rss = next(entry for entry in lines[i + 1:] if entry.startswith("Rss:"))
                return int(rss.split()[1])
    raise AssertionError("no mapping holds the address")


def _interleaved_projection() -> tuple[rlx.Graph, np.ndarray]:
    """x[S, 256] @ a q4_1 weight of 128 rows (20 KB: whole pages inside a view of it) with
    q8 activations, which the host's int8 kernels read interleaved; and that weight."""
    if qd.int8_dot_isa(host_target(), host_target().vector_width) is None:
        pytest.skip("the host has no int8 kernels")
    g = rlx.Graph("projection")
    x = g.input("x", ("S", 256))
    g.output(g.dequant_matmul(x, g.param("w", (128, 256 // 32 * 20), "ui8"), "q4_1",
                              activations="q8"))
    return g, _tame(blocks("q4_1", 128, 256), "q4_1")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/smaps is Linux's")
def test_binding_drops_the_file_pages_of_a_repacked_weight(tmp_path):
    """A bound weight that views a file mapping (a GGUF tensor) and is repacked into a
    copy gives its file pages back (at most one weight's pages next to the copies while
    a model binds), and the view still reads the file's bytes afterwards."""
    g, weight = _interleaved_projection()
    path = tmp_path / "weights.bin"
    path.write_bytes(b"\0" * 100 + weight.tobytes())  # a view not aligned to a page
    with path.open("rb") as file:
        mapping = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    view = np.frombuffer(mapping, np.uint8, weight.nbytes, 100).reshape(weight.shape)
    view.sum()  # fault every page in
    assert _mapped_kib(view.ctypes.data) >= weight.nbytes // 1024
    model = rlx.jit(g, params={"w": view}, threads=1)
    assert model.abi.layouts == {"w": interleaved_layout("q4_1", host_target().vector_width)}
    assert _mapped_kib(view.ctypes.data) <= 8  # the partial pages at the view's ends
    np.testing.assert_array_equal(view, weight)  # read back from the file
    xs = x_rows(3, 256)
    np.testing.assert_array_equal(model(xs), rlx.jit(g, params={"w": weight}, threads=1)(xs))


def test_binding_keeps_the_changed_pages_of_a_copy_on_write_mapping(tmp_path):
    """A read-only view of a copy-on-write mapping whose pages were changed keeps them:
    dropping those pages would bring the file's bytes back under the view."""
    g, weight = _interleaved_projection()
    path = tmp_path / "weights.bin"
    path.write_bytes(bytes(weight.nbytes))  # the file holds zeros
    with path.open("rb") as file:
        mapping = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_COPY)
    mapping[:] = weight.tobytes()  # private pages, never written to the file
    view = np.frombuffer(mapping, np.uint8).reshape(weight.shape)
    view.flags.writeable = False
    rlx.jit(g, params={"w": view}, threads=1)
    np.testing.assert_array_equal(view, weight)
