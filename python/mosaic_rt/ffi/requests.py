"""Requests: what one native op asks for, as one frozen object.

An op that carries more than a handful of fields (a DMA: two sides, each a
buffer, a region, a memory space and maybe a view; semaphores; a target
device and core; trailing waits; a site) is decided once -- by the
interpreter's rule, or by :class:`mosaic_rt.Runtime` -- and handed down
as one request: through the interpreter's native calls to its wrapper in
:mod:`mosaic_rt.ffi.ops`, which alone encodes it (operands, attributes,
packed fields), or to the binding, which reads the same fields by name.

May use: nothing of mosaic_rt (plain data).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

# A DMA side's view: its region's bytes in order (a reshape of its dense
# value), in whatever shape.
SAME_BYTES = "same_bytes"


@dataclasses.dataclass(frozen=True)
class UnitMap:
    """A DMA side's map in units of ``unit`` bits (4 for int4) rather than
    bytes: ``offsets[n]`` is the unit of the region's value that unit ``n``
    of the view's value is. Simulated memory stores a sub-byte element one
    per byte, so each side also says how many bits of its value one stored
    byte holds: ``region`` / ``view`` (8, or a sub-byte type's bits)."""

    offsets: Any
    unit: int
    region: int
    view: int


@dataclasses.dataclass(frozen=True)
class RowMap:
    """A DMA side's byte map given as rows (a gather / scatter through a
    view): row ``i`` of the view's bytes is ``pattern`` shifted by
    ``starts[i]`` (byte ``i * len(pattern) + k`` is ``starts[i] +
    pattern[k]``; a start of ``2**31 - 1`` marks a row whose index was out
    of bounds). Only the starts are computed per DMA; the pattern is a
    constant."""

    starts: Any
    pattern: Any


class TrailingWait(NamedTuple):
    """A DMA wait an op runs right after itself (see ``DmaStart.then_wait``)."""

    sem: Any
    nbytes: int
    site: int = 0


@dataclasses.dataclass(frozen=True)
class DmaSide:
    """One side of a DMA: buffer ``id`` in memory ``space`` (a code or a
    name), the ``region`` of it the DMA moves (a ``TracedRegion`` in the
    interpreter, a ``RegionSpec`` for ``Runtime``; None: all of it), and
    how the DMA sees that region: ``view`` None (as it is), an int32 vector
    of its view's byte offsets in the region's value
    (``mosaic_rt.interpret.evaluation.dma_views``), a `UnitMap`, a
    `RowMap`, or `SAME_BYTES`."""

    space: Any
    id: Any
    region: Any = None
    view: Any = None


@dataclasses.dataclass(frozen=True)
class DmaStart:
    """A DMA from ``src`` to ``dst``, counted on ``dst_sem``. A remote copy
    gives both ``src_sem`` and ``dst_device`` and lands on ``dst_core`` of
    ``dst_device`` (default: the issuing core); given targets are
    range-checked natively (negative ids included). ``then_wait``: waits
    to run right after, in order. ``site``: the source site id."""

    src: DmaSide
    dst: DmaSide
    dst_sem: Any
    src_sem: Any = None
    dst_device: Any = None
    dst_core: Any = None
    then_wait: tuple[TrailingWait, ...] = ()
    site: int = 0


@dataclasses.dataclass(frozen=True)
class DmaWait:
    """A wait for ``nbytes`` on DMA semaphore ``sem`` (running queued DMAs
    that signal it, in on_wait mode), then ``then_wait``'s waits: one call
    for a remote copy's send and receive waits instead of two."""

    sem: Any
    nbytes: int
    then_wait: tuple[TrailingWait, ...] = ()
    site: int = 0
