"""Ref views the native memory cannot express as one strided region:
`ref.bitcast(dtype)`, `ref.reshape(...)` and transposes (`ref.T`), and
indexers after them.

Stock interpret mode fails on these (its ranges assume indexers only). We
split a transform chain into its leading indexers, which the native load /
store handle, and the rest, which is applied in XLA to the value of that
region: a read is load + view; a write is load + functional update through
the view chain + store back. The store-back rewrites the whole leading
region, so such writes are not atomic with respect to other cores.

A bitcast that changes the bitwidth of a sub-byte type (int4 rows packed
into int32 words) is computed with shifts, not XLA's bitcast-convert: XLA's
simplifier folds two such converts in a row (int4 -> int32 -> int8) into one
it then rejects ("Last dimension of input shape=8 is not equal to ratio of
bit-widths=2"; jaxlib 0.10.2 and 0.12.0.1).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from mosaic_rt.interpret.evaluation.regions import TracedRegion, to_region
from mosaic_rt.jax_internals import (
    ANNOTATION_TRANSFORMS,
    BitcastTransform,
    NDIndexer,
    ReshapeTransform,
    Slice,
    TransposeTransform,
    bitcast_array,
    itemsize_bits,
    transform_type,
)


def split(transforms, ref_aval) -> tuple[TracedRegion, tuple, object]:
    """(native region of the leading indexers, the remaining transforms, the
    aval of the leading region's value)."""
    transforms = tuple(t for t in (transforms or ()) if t is not None and not isinstance(t, ANNOTATION_TRANSFORMS))
    k = 0
    while k < len(transforms) and isinstance(transforms[k], NDIndexer):
        k += 1
    lead, rest = transforms[:k], transforms[k:]
    base = transform_type(lead, ref_aval) if lead else ref_aval
    return to_region(lead), rest, jax.ShapeDtypeStruct(base.shape, base.dtype)


def _index_arrays(indexer: NDIndexer):
    if indexer.int_indexer_shape:
        raise ValueError("Advanced indexers are not supported on TPU")
    arrays, squeeze = [], []
    n = len(indexer.indices)
    for d, idx in enumerate(indexer.indices):
        shape = [1] * n
        if isinstance(idx, Slice):
            shape[d] = idx.size
            arrays.append((idx.start + jnp.arange(idx.size) * idx.stride).reshape(shape))
        else:
            arrays.append(jnp.asarray(idx).reshape(shape))
            squeeze.append(d)
    return tuple(arrays), tuple(squeeze)


def _box(indexer: NDIndexer):
    """(starts, sizes, squeezed dims) when `indexer` selects one box of
    static size (unit-stride slices and scalar indices), else None: XLA then
    gets a dynamic slice / update slice, not a gather / scatter over index
    arrays (each of which XLA:CPU compiles as a kernel of its own; fused
    MoE's stores through a view were 140 scatters and 72 gathers)."""
    if indexer.int_indexer_shape:
        return None
    starts, sizes, squeeze = [], [], []
    for d, idx in enumerate(indexer.indices):
        if isinstance(idx, Slice):
            if not isinstance(idx.size, (int, np.integer)) or idx.stride != 1:
                return None
            starts.append(idx.start)
            sizes.append(int(idx.size))
        else:
            if getattr(idx, "shape", ()) != ():
                return None
            starts.append(idx)
            sizes.append(1)
            squeeze.append(d)
    return starts, sizes, tuple(squeeze)


def _apply(x, t):
    if isinstance(t, NDIndexer):
        box = _box(t)
        if box is not None:
            starts, sizes, squeeze = box
            y = lax.dynamic_slice(x, starts, sizes)
            return jnp.squeeze(y, axis=squeeze) if squeeze else y
        arrays, squeeze = _index_arrays(t)
        return jnp.squeeze(x[arrays], axis=squeeze) if squeeze else x[arrays]
    if isinstance(t, BitcastTransform):
        return _bitcast(x, t.dtype)
    if isinstance(t, ReshapeTransform):
        return x.reshape(t.shape)
    if isinstance(t, TransposeTransform):
        return jnp.transpose(x, t.permutation)
    raise NotImplementedError(f"ref transform {type(t).__name__} is not supported by TPU interpret mode")


def _put_back(x, t, y):
    """The value of `x` after its view `_apply(x, t)` became `y`."""
    if isinstance(t, NDIndexer):
        box = _box(t)
        if box is not None:
            starts, sizes, squeeze = box
            y = jnp.reshape(y, sizes).astype(x.dtype)
            return lax.dynamic_update_slice(x, y, starts)
        arrays, squeeze = _index_arrays(t)
        if squeeze:
            y = jnp.expand_dims(y, squeeze)
        return x.at[arrays].set(y.astype(x.dtype))
    if isinstance(t, BitcastTransform):
        return _bitcast(y, x.dtype).reshape(x.shape)
    if isinstance(t, ReshapeTransform):
        return y.reshape(x.shape)
    if isinstance(t, TransposeTransform):
        inverse = [0] * len(t.permutation)
        for position, axis in enumerate(t.permutation):
            inverse[axis] = position
        return jnp.transpose(y, inverse)
    raise NotImplementedError(f"ref transform {type(t).__name__} is not supported by TPU interpret mode")


def _bitcast(x, dtype):
    """`bitcast_array` (a bitwidth change folds / splits the second-to-last
    dimension, little-endian pieces in order), by shifts in uint32 when a
    sub-byte type changes width (see the module doc)."""
    narrow, wide = sorted((itemsize_bits(x.dtype), itemsize_bits(dtype)))
    if narrow == wide or narrow >= 8 or wide > 32:
        return bitcast_array(x, dtype)
    r, mask = wide // narrow, (1 << narrow) - 1
    raw = lax.convert_element_type(lax.bitcast_convert_type(x, _uint(itemsize_bits(x.dtype))), jnp.uint32)
    *lead, m, n = x.shape
    pieces = jnp.arange(r, dtype=jnp.uint32) * np.uint32(narrow)
    # lax ops with explicit broadcasts: a kernel may run under
    # jax_numpy_rank_promotion="raise" (JAX's own TPU tests do).
    if itemsize_bits(x.dtype) == narrow:  # r rows -> one row of wider elements
        rows = raw.reshape(*lead, m // r, r, n)
        parts = lax.shift_left(rows, lax.broadcast_in_dim(pieces, rows.shape, (len(lead) + 1,)))
        out = lax.reduce(parts, np.uint32(0), lax.bitwise_or, (len(lead) + 1,))
    else:  # each element -> r rows of narrower ones
        full = (*lead, m, r, n)
        spread = lax.broadcast_in_dim(raw, full, (*range(len(lead) + 1), len(lead) + 2))
        shifted = lax.shift_right_logical(spread, lax.broadcast_in_dim(pieces, full, (len(lead) + 1,)))
        out = lax.bitwise_and(shifted, lax.full(full, mask, jnp.uint32)).reshape(*lead, m * r, n)
    return lax.bitcast_convert_type(lax.convert_element_type(out, _uint(itemsize_bits(dtype))), dtype)


def _uint(bits: int):
    return {2: jnp.uint2, 4: jnp.uint4, 8: jnp.uint8, 16: jnp.uint16, 32: jnp.uint32}[bits]


def read(x, transforms):
    for t in transforms:
        x = _apply(x, t)
    return x


def write(x, transforms, value, mask=None):
    """(old value of the view, new value of `x`) after writing `value`."""
    if not transforms:
        old = x
        new = value if mask is None else jnp.where(mask, value, x)
        return old, new
    head, rest = transforms[0], transforms[1:]
    inner = _apply(x, head)
    old, inner_new = write(inner, rest, value, mask)
    return old, _put_back(x, head, inner_new)
