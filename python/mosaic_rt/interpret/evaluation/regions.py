"""Ref transforms (Pallas `NDIndexer`s) -> `TracedRegion`s (`mosaic_rt.ffi.ops`).

A traced region is, per leading buffer dimension, a static (size, stride,
squeezed) triple plus a dynamic start; the starts travel as one int32 vector
operand, the rest as FFI attributes. Successive indexers compose the way
stock interpret mode composes them, so error messages name the same ranges.
"""

from __future__ import annotations

import numpy as np
from jax import lax

from mosaic_rt.ffi.ops import TracedRegion
from mosaic_rt.jax_internals import ANNOTATION_TRANSFORMS, NDIndexer, Slice, Tracer

FULL = TracedRegion()


def _static_int(x, what: str) -> int:
    if isinstance(x, Tracer):
        raise NotImplementedError(f"dynamic slice {what} is not supported (strides of ref slices must be static)")
    return int(x)


def _size(x):
    """A slice size: an int, or traced (``pl.ds(start, n)`` of traced
    ``n``; only DMAs take such a slice, whose size the handler reads at run
    time). Tracers are told apart by type: ``int(tracer)`` would raise
    after jax has built its error text, which walks the whole trace: a
    large share of tracing a kernel with many traced-size DMAs
    (benches/PERFORMANCE.md, "The launch seam and tracing")."""
    if isinstance(x, Tracer):
        return x
    return int(x)


def _dims_of(indexer: NDIndexer):
    if indexer.int_indexer_shape:
        raise ValueError("Advanced indexers are not supported on TPU")
    dims = []
    for idx in indexer.indices:
        if isinstance(idx, Slice):
            dims.append((idx.start, _size(idx.size), _static_int(idx.stride, "stride"), False))
        else:
            if getattr(idx, "shape", ()) != ():
                raise ValueError("Advanced indexers are not supported on TPU")
            dims.append((idx, 1, 1, True))
    return dims


def _as_i32(x):
    """An index as int32 (views may index with uint32 under strict dtype
    promotion, where int32 + uint32 does not promote)."""
    dtype = getattr(x, "dtype", None)
    if dtype is None or dtype == np.int32:
        return x
    return lax.convert_element_type(x, np.int32)


def _compose(outer, inner):
    """`inner` indexes the view selected by `outer` (stock's composition)."""
    out = []
    i = j = 0
    while True:
        if i == len(outer):
            return out + inner[j:]
        if j == len(inner):
            return out + outer[i:]
        o = outer[i]
        if o[3]:  # squeezed dims of the outer view are not visible inside
            out.append(o)
            i += 1
            continue
        n = inner[j]
        start = _as_i32(o[0]) + _as_i32(n[0]) * o[2]
        if n[3]:
            out.append((start, 1, 1, True))
        else:
            out.append((start, n[1], o[2] * n[2], False))
        i += 1
        j += 1


def to_region(transforms) -> TracedRegion:
    dims: list = []
    for t in transforms or ():
        if t is None or isinstance(t, ANNOTATION_TRANSFORMS):
            continue
        if not isinstance(t, NDIndexer):
            raise NotImplementedError(f"ref transform {type(t).__name__} is not supported by TPU interpret mode")
        dims = _compose(dims, _dims_of(t))
    if not dims:
        return FULL
    return TracedRegion(
        sizes=tuple(d[1] for d in dims),
        strides=tuple(d[2] for d in dims),
        squeezed=tuple(d[3] for d in dims),
        starts=tuple(d[0] for d in dims),
    )


def block_region(starts, block_shape, squeezed) -> TracedRegion:
    """The region of one BlockSpec block: `starts` is an int32 vector."""
    n = len(block_shape)
    return TracedRegion(
        sizes=tuple(int(s) for s in block_shape),
        strides=(1,) * n,
        squeezed=tuple(bool(s) for s in squeezed),
        starts=starts,
    )
