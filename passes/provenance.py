"""Provenance: every op's MLIR location names the user's block it came from.

The Graph builder gives each op a `NameLoc` (`"layer3.attention"` inside
`g.scope("layer3")`, else the method and a counter, `"attention#0"`). The passes keep it
by wrapping their patterns in `with_provenance(pattern, mode)`: every op a pattern
inserts without a location of its own gets one derived from the op it matched:

- `EXPAND` (hir -> mir): `"layer3.attention"` -> `"layer3.attention/softmax"`;
- `FUSE` (mir-fuse): a `FusedLoc` of the locations of the ops the new op replaces (the
  matched op and the producers between it and the new op's operands that nothing else
  uses);
- `KEEP` (bufferization, planning, the llvm lowering): the matched op's location.

`rlx-opt --print-debuginfo` prints them (`loc("layer3.attention/softmax")`);
`origin(op)` is the text the profile and the arena picture show.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from xdsl.dialects.builtin import FusedLoc, NoneAttr
from xdsl.ir import Attribute, Operation
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern

from rlx_mlir.core.locations import loc_names, name_loc, origin


class Derive(Enum):
    """How a pattern's new ops derive their location from the matched op's."""

    EXPAND = "expand"
    FUSE = "fuse"
    KEEP = "keep"


def _short(op: Operation) -> str:
    return op.name.split(".", 1)[-1]


def _known(location: Attribute | None) -> bool:
    return bool(loc_names(location))


def _expanded(matched: Operation, new: Operation, seen: dict[str, int]) -> Attribute:
    """`block/op`, with a counter from the second op of a kind (`block/matmul#1`); an hir
    op's own mir twin (hir.dequant_matmul -> mir.dequant_matmul) keeps the block's name."""
    names = loc_names(matched.location) or [_short(matched)]
    if _short(new) == _short(matched) and not seen.get(_short(new)) and _known(matched.location):
        seen[_short(new)] = 1
        return matched.location
    name = f"{names[0]}/{_short(new)}"
    count = seen.get(name, 0)
    seen[name] = count + 1
    return name_loc(name if count == 0 else f"{name}#{count}")


def _fused(matched: Operation, new: Operation) -> Attribute:
    """The locations of `matched` and of the producers the new op absorbs: walking up
    from `matched`, stopping at the new op's operands and at values used elsewhere."""
    stop = set(new.operands)
    cone: list[Operation] = []
    pending = [matched]
    while pending:
        op = pending.pop()
        if op in cone:
            continue
        cone.append(op)
        for value in op.operands:
            producer = value.owner
            if (value not in stop and isinstance(producer, Operation) and producer is not new
                    and producer.parent_block() is matched.parent_block()
                    and all(use.operation in cone or use.operation is op for use in value.uses)):
                pending.append(producer)
    ordered = sorted(cone, key=_position)
    locations = [op.location for op in ordered if _known(op.location)]
    if not locations:
        return matched.location
    if len(locations) == 1:
        return locations[0]
    return FusedLoc(locations, NoneAttr())


def _position(op: Operation) -> int:
    block = op.parent_block()
    return block.get_operation_index(op) if block is not None else 0


@dataclass
class WithProvenance(RewritePattern):
    """`pattern`, with the ops it inserts located after the op it matched (see `Derive`)."""

    pattern: RewritePattern
    derive: Derive

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter, /) -> None:
        seen: dict[str, int] = {}

        def locate(new: Operation) -> None:
            if _known(new.location) or not _known(op.location) and self.derive is not Derive.EXPAND:
                return
            if self.derive is Derive.EXPAND:
                new.location = _expanded(op, new, seen)
            elif self.derive is Derive.FUSE:
                new.location = _fused(op, new)
            else:
                new.location = op.location

        rewriter.operation_insertion_handler.append(locate)
        try:
            self.pattern.match_and_rewrite(op, rewriter)
        finally:
            rewriter.operation_insertion_handler.remove(locate)


def with_provenance(pattern: RewritePattern, derive: Derive) -> RewritePattern:
    """`pattern` whose new ops get locations derived from the matched op's."""
    return WithProvenance(pattern, derive)

__all__ = ["Derive", "loc_names", "name_loc", "origin", "with_provenance"]
