"""`model.arena_svg` and `model.summary` (issue 13 items 3-4).

The SVG's structure always: one `slot` rectangle per `lir.slot` of the plan, their data
attributes are the plan, no two rectangles that are live at the same time share bytes
except an in-place pair, the arena size and the lower bound are drawn; a dynamic model's
slots are drawn at the bounds. That it renders: a headless Chromium screenshot (skipped
only when Chromium is absent).
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
import zlib
from pathlib import Path

import numpy as np
import pytest

import rlx_mlir as rlx
from rlx_mlir.dialects import lir

SVG = "{http://www.w3.org/2000/svg}"
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
IN_PLACE_KERNELS = {"elementwise", "fused_elementwise"}


def _slots(svg: str) -> list[dict[str, int | str]]:
    root = ET.fromstring(svg)
    return [{
        "offset": int(r.get("data-offset")), "bytes": int(r.get("data-bytes")),
        "start": int(r.get("data-live-start")), "end": int(r.get("data-live-end")),
        "kernel": r.get("data-kernel"), "origin": r.get("data-origin"),
        "x": float(r.get("x")), "w": float(r.get("width"))}
        for r in root.iter(f"{SVG}rect") if r.get("class") == "slot"]


def _check_no_live_overlap(slots) -> None:
    for i, a in enumerate(slots):
        for b in slots[i + 1:]:
            live = a["start"] <= b["end"] and b["start"] <= a["end"]
            shared = a["offset"] < b["offset"] + b["bytes"] and b["offset"] < a["offset"] + a["bytes"]
            if live and shared:
                first, second = (a, b) if a["start"] <= b["start"] else (b, a)
                assert (first["end"] == second["start"] and first["offset"] == second["offset"]
                        and first["bytes"] == second["bytes"]
                        and second["kernel"] in IN_PLACE_KERNELS), (a, b)


@pytest.fixture(scope="module")
def llama_block():
    return rlx.compile_mlir((EXAMPLES / "llama_block.mlir").read_text())


def test_llama_block_svg_is_the_plan(llama_block, tmp_path):
    path = tmp_path / "arena.svg"
    svg = llama_block.arena_svg(path)
    assert path.read_text() == svg
    slots = _slots(svg)
    lir_text = llama_block.mlir("lir")
    assert len(slots) == lir_text.count("lir.slot ")
    assert all(s["offset"] + s["bytes"] <= llama_block.arena_bytes for s in slots)
    _check_no_live_overlap(slots)
    kernels = {s["kernel"] for s in slots}
    assert {"matmul", "rms_norm", "attention", "rope"} <= kernels
    # the text has the builder's locations: the kernels are named after the hir block
    # they expand (`llama_decoder_block#0` outside any scope)
    origins = {s["origin"] for s in slots}
    assert "llama_decoder_block#0/attention" in origins
    assert all(o.startswith("llama_decoder_block#0/") for o in origins)
    # q/k/v: one shared-input kernel, located at its three matmuls
    assert " + ".join(f"llama_decoder_block#0/matmul{s}" for s in ("", "#1", "#2")) in origins
    root = ET.fromstring(svg)
    classes = {g.get("class") for g in root.iter(f"{SVG}g")}
    assert {"arena", "arena-size", "lower-bound"} <= classes
    arena = next(g for g in root.iter(f"{SVG}g") if g.get("class") == "arena")
    assert int(arena.get("data-size")) == llama_block.arena_bytes
    # x grows with the live range: a later slot never starts left of an earlier one
    ordered = sorted(slots, key=lambda s: s["start"])
    assert all(a["x"] <= b["x"] for a, b in zip(ordered, ordered[1:], strict=False))


def test_in_place_pairs_may_share_bytes():
    g = rlx.Graph("chain")
    x = g.input("x", (64, 64))
    w = g.param("w", (64, 64))
    h = x @ w
    g.output(g.exp(h) @ w + x)
    model = rlx.jit(g, params={"w": np.eye(64, dtype=np.float32)})
    _check_no_live_overlap(_slots(model.arena_svg()))


def test_dynamic_model_draws_slots_at_their_bounds():
    g = rlx.Graph("dyn")
    x = g.input("x", ("S", 32))
    w = g.param("w", (32, 48))
    g.output(g.softmax(g.relu(x @ w) * 2.0))
    model = rlx.jit(g, params={"w": np.ones((32, 48), np.float32)}, max_dims={"S": 100})
    slots = _slots(svg := model.arena_svg())
    rows = [s for s in slots if s["kernel"] != "constant"]  # the 2.0 is a static scalar
    assert rows and all(s["bytes"] == 100 * 48 * 4 for s in rows)
    assert "S=100" in svg
    _check_no_live_overlap(slots)


def test_arena_slots_match_lir():
    module = rlx.compile_mlir((EXAMPLES / "mlp.mlir").read_text()).stage_module("lir")
    from rlx_mlir.core.abi import entry_function
    from rlx_mlir.introspection import arena_slots
    from rlx_mlir.passes.lir_to_llvm.profile import kernel_origins

    fn = entry_function(module)
    arena = next(op for op in fn.walk() if isinstance(op, lir.ArenaOp))
    boxes = arena_slots(arena, kernel_origins(fn))
    slots = [op for op in fn.walk() if isinstance(op, lir.SlotOp)]
    assert sorted(b.offset for b in boxes) == sorted(s.offset.value.data for s in slots)


def test_summary_lists_stages_kernels_arena_and_target(llama_block):
    text = llama_block.summary()
    for stage in ("hir", "mir", "lir", "llvm"):
        assert f"  {stage} " in text
    assert "hir.llama_decoder_block" in text and "lir.matmul" in text
    assert "fused regions: 1 mir.fused_matmul" in text
    assert f"arena: {llama_block.arena_bytes} B planned, {llama_block.naive_bytes} B naive" in text
    assert "lower bound" in text and "threads:" in text
    assert f"vector width {llama_block.target.vector_width}" in text


def test_summary_of_a_dynamic_model_names_row_driven_kernels():
    g = rlx.Graph("dyn")
    x = g.input("x", ("S", 32))
    w = g.param("w", (32, 48))
    g.output(g.softmax(x @ w))
    text = rlx.jit(g, params={"w": np.ones((32, 48), np.float32)}, max_dims={"S": 64}).summary()
    assert "1 read ? dims natively, 1 row-driven" in text
    assert "symbols: S <= 64" in text


def _png_pixels(path: Path) -> tuple[int, int, bytes]:
    """(width, height, the decompressed scanlines) of a PNG file."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    chunks, at = [], 8
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        if kind == b"IDAT":
            chunks.append(data[at + 8:at + 8 + length])
        at += 12 + length
    return width, height, zlib.decompress(b"".join(chunks))


@pytest.mark.skipif(shutil.which("chromium") is None and shutil.which("chromium-browser") is None,
                    reason="Chromium is not installed")
def test_svg_renders_in_headless_chromium(llama_block, tmp_path):
    svg_path, png = tmp_path / "arena.svg", tmp_path / "arena.png"
    svg = llama_block.arena_svg(svg_path)
    root = ET.fromstring(svg)
    width, height = int(root.get("width")), int(root.get("height"))
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--window-size={width},{height}", f"--screenshot={png}",
                    svg_path.as_uri()], check=True, capture_output=True, timeout=120)
    got_width, got_height, pixels = _png_pixels(png)
    assert (got_width, got_height) == (width, height)
    assert len(set(pixels)) > 32  # coloured rectangles and text, not a blank page


def test_rlx_run_arena_svg_and_summary(tmp_path, capsys):
    from rlx_mlir.tools.rlx_run import run

    out = tmp_path / "arena.svg"
    assert run([str(EXAMPLES / "mlp.mlir"), "--random", "--summary", "--arena-svg", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "arena:" in printed and "threads:" in printed and f"written to {out}" in printed
    assert _slots(out.read_text())
