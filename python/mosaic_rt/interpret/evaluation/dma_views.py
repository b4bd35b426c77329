"""DMA endpoints seen through ref views: `ref.bitcast(dtype)`,
`ref.reshape(...)`, transposes, and indexers after them.

Such a view is not one strided region of its buffer, so a DMA side that has
one is its leading indexers' region (native, as for loads, see `views`)
plus a *byte map*: an int32 vector whose entry n is the offset, in that
region's dense C-order value, of byte n of the view's value. The native DMA
engine reads or writes the region through the map (`rust/core/src/dma/view.rs`),
so eager / on_wait, remote copies, bounds, initcheck, races and semaphores
all stay native.

The map is the view chain applied to the region's byte offsets with the
element semantics of `views.read` (and so of `jax_internals.bitcast_array`:
a bitwidth change folds or splits the second-to-last dimension,
little-endian pieces in order): numpy at trace time when every index is
static, XLA when an indexer after the view is traced.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from mosaic_rt import jax_internals as jx
from mosaic_rt.interpret.evaluation import views

# The map is int32: its region's value must have fewer bytes.
_MAX_BYTES = 2**31 - 1


def has_view(transforms) -> bool:
    """Whether a transform chain has anything but indexers (and annotations)."""
    return any(
        t is not None and not isinstance(t, (jx.NDIndexer, *jx.ANNOTATION_TRANSFORMS)) for t in (transforms or ())
    )


def endpoint(transforms, ref_aval, what: str):
    """(native region, byte map) of one side of a DMA through a view; `what`
    names the side in errors ("source of a DMA")."""
    region, rest, base = views.split(transforms, ref_aval)
    nbytes = math.prod(base.shape) * _itemsize(base.dtype, what)
    if nbytes > _MAX_BYTES:
        raise NotImplementedError(f"{what}: a view of a region of {nbytes} bytes (at most {_MAX_BYTES})")
    traced = any(isinstance(leaf, jx.Tracer) for t in rest for leaf in jax.tree.leaves(t))
    xp = jnp if traced else np
    x = xp.arange(nbytes, dtype=np.int32).reshape(*base.shape, _itemsize(base.dtype, what))
    for t in rest:
        x = _apply(xp, x, t, what)
    return region, x.reshape(-1)


def _itemsize(dtype, what: str) -> int:
    bits = jx.itemsize_bits(dtype)
    if bits % 8:
        raise NotImplementedError(
            f"{what}: views of {np.dtype(dtype).name} ({bits}-bit elements) are not supported by TPU interpret mode"
        )
    return bits // 8


def _apply(xp, x, t, what: str):
    """The view `t` of `x`: byte offsets of shape (*shape, itemsize)."""
    shape, isz = x.shape[:-1], x.shape[-1]
    if isinstance(t, jx.NDIndexer):
        return _index(xp, x, t, what)
    if isinstance(t, jx.ReshapeTransform):
        return x.reshape(*t.shape, isz)
    if isinstance(t, jx.TransposeTransform):
        return xp.transpose(x, (*t.permutation, len(shape)))
    if isinstance(t, jx.BitcastTransform):
        new = _itemsize(t.dtype, f"{what}, {type(t).__name__} to {np.dtype(t.dtype).name}")
        if new == isz:
            return x
        *lead, m, n = shape
        if new > isz:  # r consecutive rows fuse into one row of wider elements
            r = new // isz
            x = x.reshape(*lead, m // r, r, n, isz)
            return xp.swapaxes(x, -3, -2).reshape(*lead, m // r, n, new)
        r = isz // new  # each element splits into r rows
        x = x.reshape(*lead, m, n, r, new)
        return xp.swapaxes(x, -3, -2).reshape(*lead, m * r, n, new)
    raise NotImplementedError(f"{what}: ref transform {type(t).__name__} is not supported by TPU interpret mode")


def _index(xp, x, indexer, what: str):
    if indexer.int_indexer_shape:
        raise ValueError("Advanced indexers are not supported on TPU")
    n = len(indexer.indices)
    arrays, squeeze = [], []
    for d, idx in enumerate(indexer.indices):
        shape = [1] * n
        if isinstance(idx, jx.Slice):
            try:
                size, stride = int(idx.size), int(idx.stride)
            except TypeError:
                raise NotImplementedError(
                    f"{what}: a slice of traced size after a bitcast / reshape / transpose"
                ) from None
            shape[d] = size
            arrays.append((idx.start + xp.arange(size, dtype=np.int32) * stride).reshape(shape))
        else:
            arrays.append(xp.asarray(idx, dtype=np.int32).reshape(shape))
            squeeze.append(d)
    y = x[tuple(arrays)]
    return xp.squeeze(y, axis=tuple(squeeze)) if squeeze else y
