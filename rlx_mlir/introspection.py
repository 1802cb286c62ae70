"""Looking inside a compiled model: the arena plan as a picture, and a text summary.

```python
model.arena_svg("arena.svg")   # every slot a rectangle: x = live range, y = its bytes
print(model.summary())         # op counts per stage, kernels, arena, threads, target
```
Both read the stages the model keeps (`model.mlir(stage)`); a model loaded from the disk
cache lowers its source again once to get them.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from xml.sax.saxutils import escape, quoteattr

from xdsl.dialects import llvm
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation

from rlx_mlir.core import shape_inference as si
from rlx_mlir.core.abi import BARRIER, SERIAL_SUFFIX, entry_function
from rlx_mlir.core.errors import RlxError
from rlx_mlir.dialects import lir
from rlx_mlir.pipeline import is_dynamic, kernel_origins, planned_bytes, reads_dims

if TYPE_CHECKING:
    from rlx_mlir.compiled_graph import CompiledGraph

# ---------------------------------------------------------------------------- arena SVG

PLOT_WIDTH, PLOT_HEIGHT = 960, 520
MARGIN_LEFT, MARGIN_TOP, MARGIN_BOTTOM = 80, 56, 48
PANEL_GAP = 36


@dataclass(frozen=True)
class SlotBox:
    """One slot of the plan: bytes [offset, offset + size) over schedule [start, end]."""

    offset: int
    size: int
    start: int
    end: int
    kernel: str
    origin: str
    type: str


def arena_slots(arena: lir.ArenaOp, origins: dict[Operation, str]) -> list[SlotBox]:
    """The slots of `arena` with the kernel that writes each (the op at its live start);
    slots with `?` dims at the arena's bounds."""
    block = arena.parent_block()
    schedule = list(block.ops) if block is not None else [arena]
    schedule = schedule[schedule.index(arena):]
    boxes = []
    for use in arena.result.uses:
        slot = use.operation
        if not isinstance(slot, lir.SlotOp):
            continue
        start, end = slot.live_start.value.data, slot.live_end.value.data
        writer = schedule[start] if start < len(schedule) else None
        kernel = writer.name.split(".", 1)[1] if writer is not None else "?"
        origin = origins.get(writer, kernel) if writer is not None else "?"
        dims = lir.buffer_dims(slot.result)
        ty = f"{si.fmt(dims)} {slot.result.type.get_element_type()}"
        boxes.append(SlotBox(slot.offset.value.data, slot.bounded_bytes(), start, end,
                             kernel, origin, ty))
    return sorted(boxes, key=lambda b: (b.start, b.offset))


def arena_svg(module: ModuleOp, path: str | Path | None = None) -> str:
    """The SVG picture of the arena plan(s) of a planned lir module; written to `path`
    when given. One panel per arena: a rectangle per slot (class `slot`, with its
    `data-offset`, `data-bytes`, `data-live-start`, `data-live-end`), the arena size and
    the lower bound (`max_live_bytes`) as horizontal lines."""
    fn = entry_function(module)
    arenas = [op for op in fn.walk() if isinstance(op, lir.ArenaOp)]
    if not arenas:
        raise RlxError(f"arena_svg: @{fn.sym_name.data} has no planned arena (no intermediate "
                       "buffers, or the module was not planned by lir-plan-arena)")
    origins = kernel_origins(fn)
    panel = MARGIN_TOP + PLOT_HEIGHT + MARGIN_BOTTOM
    width = MARGIN_LEFT + PLOT_WIDTH + 40
    height = len(arenas) * panel + (len(arenas) - 1) * PANEL_GAP
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
             f'<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>']
    for index, arena in enumerate(arenas):
        parts += _panel(arena, origins, index * (panel + PANEL_GAP), fn.sym_name.data)
    parts.append("</svg>")
    text = "\n".join(parts) + "\n"
    if path is not None:
        Path(path).write_text(text)
    return text


def _panel(arena: lir.ArenaOp, origins: dict[Operation, str], top: int, name: str) -> list[str]:
    size = arena.size.value.data
    bound = arena.max_live_bytes.value.data if arena.max_live_bytes is not None else None
    boxes = arena_slots(arena, origins)
    block = arena.parent_block()
    positions = max([b.end + 1 for b in boxes] + [len(list(block.ops)) if block else 1])
    sx, sy = PLOT_WIDTH / max(positions, 1), PLOT_HEIGHT / max(size, 1)
    x0, y_base = MARGIN_LEFT, top + MARGIN_TOP + PLOT_HEIGHT

    def y(offset: int) -> float:
        return y_base - offset * sy

    bounds = f", symbols at {_dims_text(arena)}" if arena.max_dims else ""
    out = [f'<g class="arena" data-size="{size}" data-max-live-bytes="{bound or 0}">',
           f'<text x="{x0}" y="{top + 20}" font-size="14" font-weight="bold">'
           f'{escape(f"@{name}: arena {size} B, lower bound {bound} B, {len(boxes)} slots{bounds}")}'
           "</text>",
           f'<rect x="{x0}" y="{y(size):.2f}" width="{PLOT_WIDTH}" height="{size * sy:.2f}" '
           'fill="#f6f6f6" stroke="#999"/>']
    for box in boxes:
        out.append(_slot_rect(box, x0 + box.start * sx, y(box.offset + box.size),
                              (box.end - box.start + 1) * sx, box.size * sy))
    out.append(_hline("arena-size", y(size), x0, f"arena {size} B", "#222", "", -5))
    if bound is not None:
        out.append(_hline("lower-bound", y(bound), x0, f"lower bound (max live) {bound} B",
                          "#c0392b", ' stroke-dasharray="6 4"', 14))
    for fraction in (0.25, 0.5, 0.75):
        tick = int(size * fraction)
        out.append(f'<text x="{x0 - 8}" y="{y(tick) + 4:.2f}" text-anchor="end" fill="#555">'
                   f"{_bytes_text(tick)}</text>")
    out.append(f'<text x="{x0 + PLOT_WIDTH / 2}" y="{y_base + 32}" text-anchor="middle">'
               f"schedule position (0 … {positions - 1})</text>")
    out.append(f'<text x="{x0 - 8}" y="{y_base}" text-anchor="end">0 B</text>')
    out.append("</g>")
    return out


def _dims_text(arena: lir.ArenaOp) -> str:
    assert arena.max_dims is not None
    return ", ".join(f"{k}={v.value.data}" for k, v in arena.max_dims.data.items())


def _slot_rect(box: SlotBox, x: float, y: float, w: float, h: float) -> str:
    title = (f"{box.origin} ({box.kernel}): {box.type}, bytes [{box.offset}, "
             f"{box.offset + box.size}), live [{box.start}, {box.end}]")
    label = ""
    if w >= 40 and h >= 12:
        text = box.origin if len(box.origin) * 6 < w else box.origin[: max(int(w // 6) - 1, 1)] + "…"
        label = (f'<text x="{x + 3:.2f}" y="{y + min(h, 24) / 2 + 4:.2f}" '
                 f'pointer-events="none">{escape(text)}</text>')
    return (f'<g><rect class="slot" x="{x:.2f}" y="{y:.2f}" width="{w:.2f}" height="{h:.2f}" '
            f'fill="{_colour(box.kernel)}" fill-opacity="0.8" stroke="#333" stroke-width="0.6" '
            f'data-offset="{box.offset}" data-bytes="{box.size}" data-live-start="{box.start}" '
            f'data-live-end="{box.end}" data-kernel={quoteattr(box.kernel)} '
            f"data-origin={quoteattr(box.origin)}><title>{escape(title)}</title></rect>{label}</g>")


def _hline(cls: str, y: float, x0: float, label: str, colour: str, dash: str, dy: float) -> str:
    """A horizontal line across the plot, labelled at its right end (`dy` above or below)."""
    return (f'<g class="{cls}"><line x1="{x0}" x2="{x0 + PLOT_WIDTH}" y1="{y:.2f}" y2="{y:.2f}" '
            f'stroke="{colour}" stroke-width="1.5"{dash}/>'
            f'<text x="{x0 + PLOT_WIDTH}" y="{y + dy:.2f}" text-anchor="end" fill="{colour}">'
            f"{escape(label)}</text></g>")


def _bytes_text(count: int) -> str:
    return f"{count / 2**20:.1f} MiB" if count >= 2**20 else f"{count / 1024:.0f} KiB" \
        if count >= 1024 else f"{count} B"


def _colour(kernel: str) -> str:
    """A stable pastel colour per kernel kind."""
    hue = int(hashlib.md5(kernel.encode()).hexdigest()[:4], 16) % 360
    return f"hsl({hue}, 60%, 72%)"


# ---------------------------------------------------------------------------- summary

SUMMARY_OP_KINDS = 8
"""The most frequent op kinds listed per stage."""


def summary(model: CompiledGraph) -> str:
    """A text report of a compiled model (see the module docstring)."""
    stages = {stage: model.stage_module(stage) for stage in model.stages}
    lines = [f"model @{model.signature.name}"]
    for stage, module in stages.items():
        counts = Counter(op.name for op in module.walk() if _counted(op))
        common = sorted(counts.items(), key=lambda c: (-c[1], c[0]))
        ops = ", ".join(f"{n} {name}" for name, n in common[:SUMMARY_OP_KINDS])
        hidden = len(common) - SUMMARY_OP_KINDS
        more = f", and {hidden} more op kind{'s' if hidden > 1 else ''}" if hidden > 0 else ""
        lines.append(f"  {stage:5s} {sum(counts.values())} ops: {ops}{more}")
    if "mir" in stages:
        fused = Counter(op.name for op in stages["mir"].walk()
                        if op.name in ("mir.fused_elementwise", "mir.fused_matmul"))
        lines.append("  fused regions: " + (", ".join(f"{n} {k}" for k, n in sorted(fused.items()))
                                            or "none"))
    if "lir" in stages:
        lines += _kernel_lines(stages["lir"], stages.get("llvm"))
        arena, naive, peak = planned_bytes(entry_function(stages["lir"]))
        lines.append(f"  arena: {arena} B planned, {naive} B naive (no reuse), lower bound "
                     f"{peak} B (most bytes live at once)")
    if model.max_dims:
        lines.append("  symbols: " + ", ".join(f"{k} <= {v}" for k, v in sorted(model.max_dims.items())))
    target = model.target
    lines.append(f"  threads: {model.threads}; target: {target.cpu}, vector width "
                 f"{target.vector_width} x f32")
    return "\n".join(lines)


def _counted(op: Operation) -> bool:
    return op.name not in ("builtin.module", "func.return", "llvm.return")


def _kernel_lines(lir_module: ModuleOp, llvm_module: ModuleOp | None) -> list[str]:
    kernels = [op for op in lir_module.walk() if isinstance(op, lir.KernelOp)]
    native = [op for op in kernels if is_dynamic(op) and reads_dims(op)]
    rows = [op for op in kernels if is_dynamic(op) and not reads_dims(op)]
    lines = [f"  kernel calls: {len(kernels)}"
             + (f"; {len(native)} read ? dims natively, {len(rows)} row-driven"
                if native or rows else "")]
    if llvm_module is not None:
        entry = entry_function(llvm_module)
        callees = [op.callee.string_value() for op in entry.walk() if isinstance(op, llvm.CallOp)]
        serial = sum(c.endswith(SERIAL_SUFFIX) for c in callees)
        barriers = callees.count(BARRIER)
        functions = sum(isinstance(op, llvm.FuncOp) and bool(op.body.blocks) for op in llvm_module.ops)
        lines.append(f"  llvm: {functions} functions; {len(callees) - serial - barriers} "
                     f"parallel kernel calls, {serial} serial (thread 0), {barriers} barriers")
    return lines


__all__ = ["SlotBox", "arena_slots", "arena_svg", "summary"]
