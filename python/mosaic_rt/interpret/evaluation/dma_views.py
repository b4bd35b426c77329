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
static, XLA when an indexer after the view is traced. A traced index out
of bounds maps to `OUT_OF_BOUNDS`, which the engine refuses (stock's DMAs
fail out of bounds too). A slice of traced size (``pl.ds(start, n)``) is
supported as the first dimension of the final view: the map is computed for
its largest size and ends, for the engine, at its first negative entry.
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
# A byte map entry no region has (a traced index out of bounds).
OUT_OF_BOUNDS = 2**31 - 1


def has_view(transforms) -> bool:
    """Whether a transform chain has anything but indexers (and annotations)."""
    return any(
        t is not None and not isinstance(t, (jx.NDIndexer, *jx.ANNOTATION_TRANSFORMS)) for t in (transforms or ())
    )


def endpoint(transforms, ref_aval, what: str):
    """(native region, byte map) of one side of a DMA through a view; `what`
    names the side in errors ("source of a DMA")."""
    region, rest, base = views.split(transforms, ref_aval)
    if not all(isinstance(n, int) for n in base.shape):
        raise NotImplementedError(f"{what}: a slice of traced size before a bitcast / reshape / transpose")
    nbytes = math.prod(base.shape) * _itemsize(base.dtype, what)
    if nbytes > _MAX_BYTES:
        raise NotImplementedError(f"{what}: a view of a region of {nbytes} bytes (at most {_MAX_BYTES})")
    xp = jnp if any(_is_traced(t) for t in rest) else np
    x = xp.arange(nbytes, dtype=np.int32).reshape(*base.shape, _itemsize(base.dtype, what))
    rows = None  # the traced size of the view's first dimension
    for k, t in enumerate(rest):
        if isinstance(t, jx.NDIndexer):
            x, rows = _index(xp, x, t, what, last=k == len(rest) - 1)
        else:
            x = _apply(xp, x, t, what)
    if rows is None:
        return region, x.reshape(-1)
    flat = x.reshape(-1)
    row_bytes = math.prod(x.shape[1:])
    return region, jnp.where(jnp.arange(flat.shape[0], dtype=np.int32) < rows * row_bytes, flat, -1)


def _is_traced(t) -> bool:
    if any(isinstance(leaf, jx.Tracer) for leaf in jax.tree.leaves(t)):
        return True
    indices = t.indices if isinstance(t, jx.NDIndexer) else ()
    return any(isinstance(getattr(i, "size", None), jx.Tracer) for i in indices)


def same_shape(a, b) -> bool:
    """Whether two view shapes agree where both are static (a traced size is
    checked at run time: the two sides' bytes)."""
    return len(a) == len(b) and all(not (isinstance(m, int) and isinstance(n, int)) or m == n for m, n in zip(a, b))


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


def _index(xp, x, indexer, what: str, last: bool):
    """(`x` indexed, the traced size of its first dimension or None)."""
    if indexer.int_indexer_shape:
        raise ValueError("Advanced indexers are not supported on TPU")
    n = len(indexer.indices)
    arrays, squeeze, oob, rows = [], [], None, None
    for d, idx in enumerate(indexer.indices):
        shape = [1] * n
        extent = x.shape[d]
        if isinstance(idx, jx.Slice):
            stride = int(idx.stride)
            try:
                size = int(idx.size)
            except TypeError:
                # The map is made for the largest size and cut at run time:
                # a prefix of the view only if nothing comes before the dim.
                if not last or rows is not None or len(squeeze) != d:
                    raise NotImplementedError(
                        f"{what}: a slice of traced size after a bitcast / reshape / transpose, other than the"
                        " first dimension of the last indexer"
                    ) from None
                size, rows = extent, idx.size
            shape[d] = size
            i = idx.start + xp.arange(size, dtype=np.int32) * stride
        else:
            i = xp.asarray(idx, dtype=np.int32)
            squeeze.append(d)
        i = i.reshape(shape)
        if xp is jnp:  # traced indices: out of bounds is OUT_OF_BOUNDS, not clamped
            bad = (i < 0) | (i >= extent)
            oob = bad if oob is None else oob | bad
            i = jnp.clip(i, 0, extent - 1)
        arrays.append(i)
    y = x[tuple(arrays)]
    if oob is not None:
        y = jnp.where(oob[..., None], OUT_OF_BOUNDS, y)
    return (xp.squeeze(y, axis=tuple(squeeze)) if squeeze else y), rows
