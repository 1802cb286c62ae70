"""The state of a model between calls: its state buffers, its position P and its KV caches.

A graph's states are function arguments with `rlx.role = "state"` (`g.state`), updated in
place by each call; its position is the `index` argument with `rlx.role = "position"`,
where the next rows of every KV cache go. `StateStore` holds all of it for a model (the
reference executor's and a compiled model's alike):

```python
store = StateStore.of_function(fn)      # zero states, P = 0
with store.call(sizes) as bound:        # sizes: the call's symbols; bound adds T = P + S
    run(..., store.arrays, store.position, bound)
# on success P += S; if the block raises, P and every state are as before
```

The symbols the appends define come from the function attribute `rlx.cache_dims`
(`{"T": [appended, capacity]}`, `rlx_mlir.core.abi.CACHE_DIMS`): a call that appends S
rows binds T = P + S and is refused with an ArgumentError ("cache full") when
P + S > capacity. A call can change only the rows [P, P+S) of each appended cache and
the states it assigns, so that is all `snapshot` copies before a call and `restore`
writes back when it fails -- except the states declared with `rollback=False` (weights and
optimizer moments a training step updates, `rlx.rollback = false`): those are never copied,
so a failed call leaves them as it wrote them, and `reset()` keeps them.

`write(name, array)` writes a state's value (`rlx.jit(g, state=...)`, `model.set_state`).
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.ir import BlockArgument, SSAValue

from rlx_mlir.binding import ArgSpec, Signature, convert
from rlx_mlir.core import shape_inference as rules
from rlx_mlir.core.abi import (
    ARG_NAME,
    ROLE_POSITION,
    ROLE_STATE,
    UPDATE_APPEND,
    UPDATE_ASSIGN,
    CacheDim,
    EntryABI,
    cache_dims_of,
    rolls_back,
)
from rlx_mlir.core.dtypes import numpy_type
from rlx_mlir.core.errors import ArgumentError, GraphError
from rlx_mlir.dialects import hir, lir, mir


@dataclass(frozen=True)
class Snapshot:
    """What a call may change, copied before it: the position, the rows [P, P+S) of each
    appended cache and every assigned state."""

    position: int
    blocks: list[tuple[tuple[str, ...], np.ndarray]]
    """Per block of caches (`StateStore.cache_blocks`): its caches' names and a copy of
    the rows the call writes, [len(names), S, ...]."""
    states: dict[str, np.ndarray]
    """A copy of each assigned state."""

    @property
    def rows(self) -> dict[str, tuple[int, np.ndarray]]:
        """Per appended cache: (first row, a copy of the rows the call writes)."""
        return {name: (self.position, copied[i])
                for names, copied in self.blocks for i, name in enumerate(names)}


LAZY_BUFFER_BYTES = 1 << 20
"""State buffers from this size on are anonymous memory maps (`zeroed_buffer`)."""


def zeroed_buffer(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A zero-filled state buffer. A large one (a KV cache of max_seq rows, a slot cache)
    is an anonymous memory map: the OS commits it 4 KiB page by page as rows are written.
    numpy's own large allocations ask for transparent huge pages, whose first touch
    zero-fills 2 MiB at once: a batched model's first call in a fresh slot then stalled
    for a quarter second (one huge page per layer's k and v)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes < LAZY_BUFFER_BYTES:
        return np.zeros(shape, dtype)
    return np.frombuffer(mmap.mmap(-1, nbytes), dtype).reshape(shape)


class StateStore:
    """The state buffers of a model (zero at creation), its position and its KV caches."""

    def __init__(self, specs: list[ArgSpec], cache_dims: list[CacheDim],
                 caches: frozenset[str] = frozenset(), assigned: frozenset[str] = frozenset(),
                 has_position: bool = False, kept: frozenset[str] = frozenset()):
        self.specs = {s.name: s for s in specs}
        """The state arguments by name."""
        self.cache_dims = cache_dims
        self.caches = caches
        """The states that are KV caches (appended to at the position)."""
        self.assigned = assigned
        """The states a call assigns as a whole."""
        self.has_position = has_position
        """Whether the function takes the position argument."""
        self.kept = kept
        """The states declared with `rollback=False`: never snapshot, restored or reset."""
        self.cache_blocks = _cache_blocks(specs, caches - kept)
        """The caches a call may roll back, those of one shape and dtype as the rows of one
        buffer: (names, buffer [len(names), *shape])."""
        blocked = {name: block[i] for names, block in self.cache_blocks
                   for i, name in enumerate(names)}
        self.arrays: dict[str, np.ndarray] = {
            s.name: blocked[s.name] if s.name in blocked
            else zeroed_buffer(s.shape, numpy_type(s.dtype)) for s in specs
        }
        """The state buffers, updated in place by each call."""
        self._unblocked = tuple(name for name in self.arrays if name not in blocked)
        self.position = 0

    @classmethod
    def of_function(cls, fn: Any) -> StateStore:
        """The store of a graph function (`func.func` at the hir, mir or lir stage)."""
        signature = Signature.of(fn)
        specs = [a for a in signature.args if a.role == ROLE_STATE]
        for spec in specs:
            if not rules.is_static_shape(spec.shape):
                raise GraphError(f"state {spec.name!r}: expected a static shape, got "
                                 f"{rules.fmt(spec.shape)}")
        caches, assigned = state_updates(fn) if isinstance(fn, func.FuncOp) else (set(), set())
        names = {i: a.name for i, a in enumerate(signature.args) if a.role == ROLE_STATE}
        return cls(
            specs,
            cache_dims_of(fn),
            frozenset(names[i] for i in caches if i in names),
            frozenset(names[i] for i in assigned - caches if i in names),
            any(a.role == ROLE_POSITION for a in signature.args),
            _kept_states(fn),
        )

    @classmethod
    def of_abi(cls, abi: EntryABI) -> StateStore:
        """The store of a compiled entry (its states, KV-cache symbols and position)."""
        return cls(
            [ArgSpec(a.name, a.role, a.shape, a.dtype) for a in abi.with_role(ROLE_STATE)],
            list(abi.cache_dims), abi.updated(UPDATE_APPEND), abi.updated(UPDATE_ASSIGN),
            bool(abi.with_role(ROLE_POSITION)),
            frozenset(a.name for a in abi.with_role(ROLE_STATE) if not a.rollback))

    def overlapping(self, array: np.ndarray) -> str | None:
        """The name of a state whose buffer shares memory with `array`, or None (a block
        of caches is checked at once: one check for a model's KV caches)."""
        for names, block in self.cache_blocks:
            if np.may_share_memory(array, block):
                return next((n for n in names if np.may_share_memory(array, self.arrays[n])),
                            names[0])
        return next((n for n in self._unblocked if np.may_share_memory(array, self.arrays[n])),
                    None)

    @property
    def stateful(self) -> bool:
        """Whether a call reads or changes anything here (a state or the position)."""
        return bool(self.specs) or self.has_position

    def copy_from(self, other: StateStore) -> None:
        """Take `other`'s state buffers (copied) and position: a store of the same states."""
        for name, array in other.arrays.items():
            np.copyto(self.arrays[name], array)
        self.position = other.position

    # ------------------------------------------------------------------ the user's view

    @property
    def views(self) -> Mapping[str, np.ndarray]:
        """Read-only views of the state buffers, by name."""
        views = {}
        for name, array in self.arrays.items():
            view = array.view()
            view.flags.writeable = False
            views[name] = view
        return MappingProxyType(views)

    def reset(self, position: int = 0) -> None:
        """Rewind to `position` (0 <= position <= the caches' capacity). The caches keep
        their rows (those past the position are overwritten by later appends, and never
        read before); at position 0 every other state is zeroed too (a fresh sequence),
        except those declared with `rollback=False` (`kept`)."""
        if isinstance(position, bool) or not isinstance(position, int | np.integer):
            raise ArgumentError(f"reset: position: expected an int >= 0, got {position!r}")
        capacity = min((c.capacity for c in self.cache_dims), default=None)
        if position < 0 or (capacity is not None and position > capacity):
            bound = f"[0, {capacity}] (the cache capacity)" if capacity is not None else ">= 0"
            raise ArgumentError(f"reset: position: expected an int in {bound}, got {position}")
        if capacity is None and position:
            raise ArgumentError(f"reset: position: the model has no KV cache, so its position "
                                f"stays 0; got {position}")
        self.position = int(position)
        if position == 0:
            for name in self.arrays.keys() - self.caches - self.kept:
                self.arrays[name].fill(0)

    def write(self, name: str, value: Any) -> None:
        """Write a copy of `value` into the state `name` (see `state_values`)."""
        self.write_all({name: value})

    def write_all(self, values: Mapping[str, Any] | None) -> None:
        """Write copies of `values` into their states (`rlx.jit(g, state=...)`): all of
        them, or none when one is refused (see `state_values`); None writes nothing."""
        for name, array in state_values(self.specs, values).items():
            np.copyto(self.arrays[name], array)

    # ------------------------------------------------------------------ one call

    def appended(self, sizes: Mapping[str, int]) -> dict[str, int]:
        """The rows each cache symbol appends in a call whose symbols are `sizes`."""
        out = {}
        for dim in self.cache_dims:
            try:
                out[dim.symbol] = rules.evaluate_dim(dim.appended, sizes)
            except (KeyError, rules.ShapeError):
                raise ArgumentError(
                    f"the rows appended to the caches are {dim.appended}, a symbol no argument "
                    f"of the call binds (bound: {dict(sizes)})"
                ) from None
        return out

    def bind(self, sizes: Mapping[str, int]) -> dict[str, int]:
        """`sizes` with each cache symbol bound to P + appended rows; an ArgumentError
        ("cache full") when that exceeds the capacity."""
        bound = dict(sizes)
        for dim in self.cache_dims:
            rows = self.appended(sizes)[dim.symbol]
            end = self.position + rows
            if end > dim.capacity:
                raise ArgumentError(
                    f"cache full: appending {rows} rows at position {self.position} needs "
                    f"{end} rows, the caches hold {dim.capacity} (reset the model, or compile "
                    "it with larger caches)"
                )
            bound[dim.symbol] = end
        return bound

    def snapshot(self, sizes: Mapping[str, int]) -> Snapshot:
        """Copies of what a call with `sizes` may change (see `Snapshot`)."""
        rows = max(self.appended(sizes).values(), default=0)
        start = self.position
        return Snapshot(
            start,
            [(names, block[:, start : start + rows].copy()) for names, block in self.cache_blocks],
            {name: self.arrays[name].copy() for name in self.assigned - self.kept})

    def restore(self, snapshot: Snapshot) -> None:
        """Undo a call: write back what `snapshot` copied."""
        self.position = snapshot.position
        for name, (start, rows) in snapshot.rows.items():
            self.arrays[name][start : start + len(rows)] = rows
        for name, array in snapshot.states.items():
            self.arrays[name][...] = array

    def advance(self, sizes: Mapping[str, int]) -> None:
        """After a successful call: P += the rows appended."""
        self.position += max(self.appended(sizes).values(), default=0)

    @contextmanager
    def call(self, sizes: Mapping[str, int]) -> Iterator[dict[str, int]]:
        """One atomic call: yields `bind(sizes)`; when the block raises, P and every state
        are restored, else P advances."""
        bound = self.bind(sizes)
        snapshot = self.snapshot(sizes)
        try:
            yield bound
        except BaseException:
            self.restore(snapshot)
            raise
        self.advance(sizes)


def _cache_blocks(specs: list[ArgSpec],
                  caches: frozenset[str]) -> list[tuple[tuple[str, ...], np.ndarray]]:
    """Zeroed buffers for `caches`, one per shape and dtype (a model's k and v caches of
    every layer are one buffer): a call's snapshot then copies its rows [P, P+S) of all of
    them at once (60 small copies of a 30-layer model cost ~60 µs of Python per token)."""
    groups: dict[tuple, list[str]] = {}
    for spec in specs:
        if spec.name in caches:
            groups.setdefault((spec.shape, numpy_type(spec.dtype)), []).append(spec.name)
    return [(tuple(names), zeroed_buffer((len(names), *shape), dtype))
            for (shape, dtype), names in groups.items()]


# ----------------------------------------------------------------------------- reading the IR


def state_updates(fn: func.FuncOp) -> tuple[set[int], set[int]]:
    """The argument indices of the states `fn` appends rows to (KV caches) and of the ones
    it assigns, at the hir, mir or lir stage. A slot cache (`cache_scatter`) counts as a
    KV cache: a call snapshots none of its rows (it has no `rlx.cache_dims`), and `reset`
    keeps them; a failed call may have written some rows (the caller owns the positions,
    and rows past a sequence's length are never read)."""
    caches: set[int] = set()
    assigned: set[int] = set()
    for op in fn.walk():
        if appended := lir.appended_caches(op):
            for cache in appended:
                _add_argument(caches, cache)
        elif isinstance(op, hir.LlamaDecoderBlockOp):
            for cache in (getattr(op, "k_cache", None), getattr(op, "v_cache", None)):
                if cache is not None:
                    _add_argument(caches, cache)
        elif isinstance(op, mir.AssignOp):
            _add_argument(assigned, op.state)
        elif isinstance(op, lir.CopyOp):
            _add_argument(assigned, _view_root(op.out))
    return caches, assigned


def state_values(specs: Mapping[str, ArgSpec],
                 values: Mapping[str, Any] | None) -> dict[str, np.ndarray]:
    """`values` (state name -> array) checked against the states `specs`: each an array of
    its state's shape, of a dtype that casts to the state's under numpy's same_kind rule.
    An ArgumentError names the state refused, or the states when a name is none of them."""
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise ArgumentError(f"state: expected a mapping of state names to arrays (a dict), "
                            f"got {type(values).__name__}")
    checked = {}
    for name, value in values.items():
        spec = specs.get(name)
        if spec is None:
            known = ", ".join(specs) or "none"
            raise ArgumentError(f"state: {name!r} is not a state of the model (states: {known})")
        checked[name] = convert(spec, value)
    return checked


def _kept_states(fn: Any) -> frozenset[str]:
    """The states of a graph function declared with `rollback=False` (`rlx.rollback`)."""
    if not isinstance(fn, func.FuncOp):
        return StateStore.of_abi(EntryABI.from_llvm(fn)).kept
    attrs = fn.arg_attrs.data if fn.arg_attrs is not None else ()
    return frozenset(a.data[ARG_NAME].data for a in attrs
                     if ARG_NAME in a.data and not rolls_back(a.data))


def _add_argument(indices: set[int], value: SSAValue) -> None:
    if isinstance(value, BlockArgument):
        indices.add(value.index)


def _view_root(value: SSAValue) -> SSAValue:
    while isinstance(owner := value.owner, lir.ViewOp):
        value = owner.source
    return value


__all__ = ["CacheDim", "Snapshot", "StateStore", "cache_dims_of", "state_updates", "state_values"]
