"""Source locations that name the user's block an op came from (provenance).

The Graph builder names each op with a `NameLoc` (`name_loc`); the passes derive the
locations of the ops they create (`rlx_mlir.passes.provenance`); the profile and the
arena picture read them back as text (`origin`).
"""

from __future__ import annotations

from xdsl.dialects.builtin import FusedLoc, NameLoc, NoneAttr, StringAttr
from xdsl.ir import Attribute, Operation

ORIGIN_SEPARATOR = " + "
"""Between the names of a fused location in `origin`."""


def name_loc(name: str) -> NameLoc:
    """The location `loc("name")`."""
    return NameLoc(StringAttr(name), NoneAttr())


def loc_names(location: Attribute | None) -> list[str]:
    """The names in a location (one for a NameLoc, each of a FusedLoc's; none if unknown)."""
    if isinstance(location, NameLoc):
        return [location.desc.data]
    if isinstance(location, FusedLoc):
        return [name for inner in location.locations.data for name in loc_names(inner)]
    return []


def origin(op: Operation) -> str | None:
    """The op's provenance as text (fused names joined by " + "), None when unknown."""
    names = loc_names(op.location)
    return ORIGIN_SEPARATOR.join(dict.fromkeys(names)) if names else None
