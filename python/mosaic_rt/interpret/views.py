"""Ref views the native memory cannot express as one strided region:
`ref.bitcast(dtype)` and `ref.reshape(...)` (and indexers after them).

Stock interpret mode fails on these (its ranges assume indexers only). We
split a transform chain into its leading indexers, which the native load /
store handle, and the rest, which is applied in XLA to the value of that
region: a read is load + view; a write is load + functional update through
the view chain + store back. The store-back rewrites the whole leading
region, so such writes are not atomic with respect to other cores.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax._src import state
from jax._src.state import indexing
from jax._src.state.types import BitcastTransform, ReshapeTransform
from jax._src.state.utils import bitcast

from mosaic_rt.interpret.regions import Region, to_region


def split(transforms, ref_aval) -> tuple[Region, tuple, object]:
    """(native region of the leading indexers, the remaining transforms, the
    aval of the leading region's value)."""
    transforms = tuple(t for t in (transforms or ()) if t is not None)
    k = 0
    while k < len(transforms) and isinstance(transforms[k], indexing.NDIndexer):
        k += 1
    lead, rest = transforms[:k], transforms[k:]
    base = state.transform_type(lead, ref_aval) if lead else ref_aval
    return to_region(lead), rest, jax.ShapeDtypeStruct(base.shape, base.dtype)


def _index_arrays(indexer: indexing.NDIndexer):
    if indexer.int_indexer_shape:
        raise ValueError("Advanced indexers are not supported on TPU")
    arrays, squeeze = [], []
    n = len(indexer.indices)
    for d, idx in enumerate(indexer.indices):
        shape = [1] * n
        if isinstance(idx, indexing.Slice):
            shape[d] = idx.size
            arrays.append((idx.start + jnp.arange(idx.size) * idx.stride).reshape(shape))
        else:
            arrays.append(jnp.asarray(idx).reshape(shape))
            squeeze.append(d)
    return tuple(arrays), tuple(squeeze)


def _apply(x, t):
    if isinstance(t, indexing.NDIndexer):
        arrays, squeeze = _index_arrays(t)
        return jnp.squeeze(x[arrays], axis=squeeze) if squeeze else x[arrays]
    if isinstance(t, BitcastTransform):
        return bitcast(x, t.dtype)
    if isinstance(t, ReshapeTransform):
        return x.reshape(t.shape)
    raise NotImplementedError(
        f"ref transform {type(t).__name__} is not supported by TPU interpret mode")


def _put_back(x, t, y):
    """The value of `x` after its view `_apply(x, t)` became `y`."""
    if isinstance(t, indexing.NDIndexer):
        arrays, squeeze = _index_arrays(t)
        if squeeze:
            y = jnp.expand_dims(y, squeeze)
        return x.at[arrays].set(y.astype(x.dtype))
    if isinstance(t, BitcastTransform):
        return bitcast(y, x.dtype).reshape(x.shape)
    if isinstance(t, ReshapeTransform):
        return y.reshape(x.shape)
    raise NotImplementedError(
        f"ref transform {type(t).__name__} is not supported by TPU interpret mode")


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
