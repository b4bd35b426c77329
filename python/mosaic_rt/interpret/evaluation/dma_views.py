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

Maps cost a pass over the whole region per DMA, so the common cases need
none or a small one: rows selected right after a reshape that keeps whole
rows are rows of the region before it (`_narrow`); a box selected right
after a bitcast that changes the width is the bitcast of a box of the
region (`_narrow_bitcast`: the map covers only that box); and a view that
only reshapes its region (or bitcasts it to a type of the same width) is
its bytes in order (`SAME_BYTES`).

Views with a sub-byte type in their chain (SparseCore row packing: an int4
ref seen as int32 through ``ref.bitcast(jnp.int32)``, 8 rows per word) move
nibbles, which a byte map cannot address: their map counts *units* of the
narrowest type's bits instead (a `UnitMap`), the same computation with a
value's units (its elements' bits, little-endian) in place of its bytes.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from mosaic_rt import jax_internals as jx
from mosaic_rt.ffi.requests import SAME_BYTES, RowMap, UnitMap
from mosaic_rt.interpret.evaluation import views

# The map is int32: its region's value must have fewer bytes (units).
_MAX_UNITS = 2**31 - 1
# A byte map entry no region has (a traced index out of bounds).
OUT_OF_BOUNDS = 2**31 - 1


def has_view(transforms) -> bool:
    """Whether a transform chain has anything but indexers (and annotations),
    or an indexer with an array index (a gather / scatter, `_gather`)."""
    return any(
        t is not None and not isinstance(t, (jx.NDIndexer, *jx.ANNOTATION_TRANSFORMS)) for t in (transforms or ())
    ) or _has_gather(transforms)


def _has_gather(transforms) -> bool:
    return any(isinstance(t, jx.NDIndexer) and t.int_indexer_shape for t in (transforms or ()))


def endpoint(transforms, ref_aval, what: str):
    """(native region, byte map) of one side of a DMA through a view; `what`
    names the side in errors ("source of a DMA")."""
    if _has_gather(transforms):
        return _gather(transforms, ref_aval, what)
    region, rest, base = views.split(_narrow_bitcast(_narrow(transforms, ref_aval), ref_aval), ref_aval)
    if all(isinstance(t, (jx.ReshapeTransform, _Reshape)) or _same_width(t, base.dtype) for t in rest):
        return region, SAME_BYTES
    if not all(isinstance(n, int) for n in base.shape):
        raise NotImplementedError(f"{what}: a slice of traced size before a bitcast / reshape / transpose")
    unit, view_dtype = _unit_bits(base.dtype, rest)
    per = _units(base.dtype, unit, what)
    n = _checked_units(math.prod(base.shape) * per, unit, "a view of", what)
    xp = jnp if any(_is_traced(t) for t in rest) else np
    x = xp.arange(n, dtype=np.int32).reshape(*base.shape, per)
    rows = None  # the traced size of the view's first dimension
    for k, t in enumerate(rest):
        if isinstance(t, jx.NDIndexer):
            x, rows = _index(xp, x, t, what, last=k == len(rest) - 1)
        else:
            x = _apply(xp, x, t, what, unit)
    flat = x.reshape(-1)
    if rows is not None:
        row_units = math.prod(x.shape[1:])
        flat = jnp.where(jnp.arange(flat.shape[0], dtype=np.int32) < rows * row_units, flat, -1)
    return region, _map(flat, unit, base.dtype, view_dtype)


def _unit_bits(dtype, transforms) -> tuple[int, object]:
    """(bits per map unit, the view's dtype) of a view of a `dtype` value
    through `transforms`: 8 (a byte map) unless a sub-byte type is in the
    chain, then its bits (widths are powers of two: it divides the others)."""
    dtypes = [dtype, *(t.dtype for t in transforms if isinstance(t, jx.BitcastTransform))]
    return min(8, *(jx.itemsize_bits(d) for d in dtypes)), dtypes[-1]


def _map(offsets, unit: int, region_dtype, view_dtype):
    """A side's map: the offsets themselves (bytes), or a `UnitMap` saying
    how many bits of each side's value one stored byte holds (simulated
    memory keeps a sub-byte element per byte)."""
    if unit == 8:
        return offsets
    region, view = (min(8, jx.itemsize_bits(d)) for d in (region_dtype, view_dtype))
    return UnitMap(offsets, unit, region, view)


def _checked_units(n: int, unit: int, how: str, what: str) -> int:
    if n > _MAX_UNITS:
        units = "bytes" if unit == 8 else f"{unit}-bit units"
        raise NotImplementedError(f"{what}: {how} a region of {n} {units} (at most {_MAX_UNITS})")
    return n


class _Reshape:
    """A reshape `_narrow` made, to a shape whose first size may be traced."""

    def __init__(self, shape):
        self.shape = shape


def _same_width(t, dtype) -> bool:
    return isinstance(t, jx.BitcastTransform) and jx.itemsize_bits(t.dtype) == jx.itemsize_bits(dtype)


def _static(x) -> bool:
    return isinstance(x, (int, np.integer))


def _narrow(transforms, ref_aval):
    """`transforms` with rows selected right after a reshape moved before it:
    `reshape(B).at[rows]` of a value of shape A, where each row of B is
    whole rows of A (and the other dims are taken whole), is
    `at[the A rows].reshape(...)`. Leaves anything else as it is."""
    ts = [t for t in (transforms or ()) if t is not None and not isinstance(t, jx.ANNOTATION_TRANSFORMS)]
    k = next((i for i, t in enumerate(ts) if not isinstance(t, jx.NDIndexer)), len(ts))
    if k + 1 >= len(ts) or not isinstance(ts[k], jx.ReshapeTransform) or not isinstance(ts[k + 1], jx.NDIndexer):
        return ts
    a = jx.transform_type(ts[:k], ref_aval).shape if k else ref_aval.shape
    b, indexer = tuple(ts[k].shape), ts[k + 1]
    if not a or not all(_static(n) for n in (*a, *b)) or indexer.int_indexer_shape:
        return ts
    first, others = indexer.indices[0], indexer.indices[1:]
    whole = all(
        isinstance(i, jx.Slice)
        and _static(i.start)
        and i.start == 0
        and _static(i.size)
        and i.size == n
        and i.stride == 1
        for i, n in zip(others, b[1:])
    )
    row_a, row_b = math.prod(a[1:]), math.prod(b[1:])
    if not whole or row_a == 0 or row_b % row_a:
        return ts
    f = row_b // row_a
    if isinstance(first, jx.Slice):
        if first.stride != 1:
            return ts
        start, size, shape = first.start, first.size, (first.size, *b[1:])
    else:
        start, size, shape = first, 1, b[1:]
    if not _static(size) and k + 2 < len(ts):
        return ts  # a traced size before more transforms: keep the map (an error)
    rows = jx.NDIndexer.from_indices_shape((jx.Slice(start * f, size * f),), a)
    tail = (_Reshape(shape),) if not _static(size) else (jx.ReshapeTransform(tuple(int(n) for n in shape)),)
    return _narrow([*ts[:k], rows, *tail, *ts[k + 2 :]], ref_aval)


def _narrow_bitcast(ts, ref_aval):
    """`bitcast(dtype).at[box]` with a width change, where the box takes
    unit-stride slices of static size of the last two dims (any index of
    the others), is `at[region box].bitcast(dtype).at[box within it]`: a
    bitcast only regroups rows of the second-minor dim (`k` region rows per
    view row when it widens, `k` view rows per region row when it narrows),
    so the map covers the box, not the whole region (tpu-inference's ragged
    scatter DMAs one row of a 224 MiB array seen as uint32 at a time: a map
    of the whole array per DMA was 4x its bytes in XLA temporaries per
    core). Leaves anything else as it is."""
    k = next((i for i, t in enumerate(ts) if not isinstance(t, jx.NDIndexer)), len(ts))
    if k + 1 >= len(ts) or not isinstance(ts[k], jx.BitcastTransform) or not isinstance(ts[k + 1], jx.NDIndexer):
        return ts
    a = jx.transform_type(ts[:k], ref_aval) if k else ref_aval
    wr, wv = jx.itemsize_bits(a.dtype), jx.itemsize_bits(ts[k].dtype)
    indexer = ts[k + 1]
    if wr == wv or len(a.shape) < 2 or not all(_static(n) for n in a.shape) or indexer.int_indexer_shape:
        return ts
    *lead, row, col = indexer.indices
    box, post = [], []
    for i in lead:  # the other dims: selected in the region as in the view
        if isinstance(i, jx.Slice):
            if not _static(i.size):
                return ts
            post.append(jx.Slice(0, i.size))
        box.append(i)
    if not (isinstance(col, jx.Slice) and _static(col.size) and col.stride == 1):
        return ts
    if isinstance(row, jx.Slice) and not (_static(row.size) and row.stride == 1):
        return ts
    if wv > wr:  # view row r is region rows [r * f, (r + 1) * f)
        f = wv // wr
        if isinstance(row, jx.Slice):
            box.append(jx.Slice(row.start * f, row.size * f))
            post.append(jx.Slice(0, row.size))
        else:
            box.append(jx.Slice(row * f, f))
            post.append(0)
    else:  # region row q is view rows [q * f, (q + 1) * f)
        f = wr // wv
        if isinstance(row, jx.Slice):
            if not (_static(row.start) and row.start % f == 0 and row.size % f == 0):
                return ts
            box.append(jx.Slice(row.start // f, row.size // f))
            post.append(jx.Slice(0, row.size))
        else:
            box.append(jx.Slice(row // f, 1))
            post.append(row % f)
    box.append(col)
    post.append(jx.Slice(0, col.size))
    region_box = jx.NDIndexer.from_indices_shape(tuple(box), a.shape)
    boxed = jx.transform_type([region_box, ts[k]], a)
    within = jx.NDIndexer.from_indices_shape(tuple(post), boxed.shape)
    return [*ts[:k], region_box, ts[k], within, *ts[k + 2 :]]


def _is_traced(t) -> bool:
    if any(isinstance(leaf, jx.Tracer) for leaf in jax.tree.leaves(t)):
        return True
    indices = t.indices if isinstance(t, jx.NDIndexer) else ()
    return any(isinstance(getattr(i, "size", None), jx.Tracer) for i in indices)


def same_shape(a, b) -> bool:
    """Whether two view shapes agree where both are static (a traced size is
    checked at run time: the two sides' bytes)."""
    return len(a) == len(b) and all(not (isinstance(m, int) and isinstance(n, int)) or m == n for m, n in zip(a, b))


def _units(dtype, unit: int, what: str) -> int:
    """Units of `unit` bits per element of `dtype`."""
    bits = jx.itemsize_bits(dtype)
    if bits % unit:
        raise NotImplementedError(
            f"{what}: views of {np.dtype(dtype).name} ({bits}-bit elements) are not supported by TPU interpret mode"
        )
    return bits // unit


def _apply(xp, x, t, what: str, unit: int):
    """The view `t` of `x`: unit offsets of shape (*shape, units per element)."""
    shape, isz = x.shape[:-1], x.shape[-1]
    if isinstance(t, jx.ReshapeTransform):
        return x.reshape(*t.shape, isz)
    if isinstance(t, jx.TransposeTransform):
        return xp.transpose(x, (*t.permutation, len(shape)))
    if isinstance(t, jx.BitcastTransform):
        new = _units(t.dtype, unit, f"{what}, {type(t).__name__} to {np.dtype(t.dtype).name}")
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
            if not isinstance(idx.size, jx.Tracer):
                size = int(idx.size)
            else:
                # The map is made for the largest size and cut at run time:
                # a prefix of the view only if nothing comes before the dim.
                if not last or rows is not None or len(squeeze) != d:
                    raise NotImplementedError(
                        f"{what}: a slice of traced size after a bitcast / reshape / transpose, other than the"
                        " first dimension of the last indexer"
                    )
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


def _gather(transforms, ref_aval, what: str):
    """(native region, byte map) of a DMA side indexed along its first
    dimension by a vector of indices: ``ref.at[idx]`` / ``ref.at[idx, ...]``,
    also after bitcasts (``ref.bitcast(t).at[idx]``). This is the SparseCore
    gather (source) / scatter (destination) DMA, ``tpu.enqueue_indirect_dma``:
    row ``i`` of the view is row ``idx[i]`` of the indexed ref, and, as there,
    the array indexer must be the last transform and its first index a 1-D
    vector (a scalar index after it comes broadcast to that vector's shape).
    `pl.Indirect` block dims of `pltpu.emit_pipeline` become such DMAs.

    The map is made in XLA from the traced indices without a pass over the
    region: a view of the region through bitcasts repeats a pattern every
    ``period`` region rows (``per`` view rows), so view row ``j`` is the
    pattern's row ``j % per`` of region block ``j // per``. An index out of
    range maps to `OUT_OF_BOUNDS` (the engine's error names it)."""
    ts = [t for t in (transforms or ()) if t is not None and not isinstance(t, jx.ANNOTATION_TRANSFORMS)]
    g = next(i for i, t in enumerate(ts) if isinstance(t, jx.NDIndexer) and t.int_indexer_shape)
    gather = ts[g]
    if g != len(ts) - 1:
        raise NotImplementedError(f"{what}: an array indexer must be the last transform of its ref")
    first, others = gather.indices[0], gather.indices[1:]
    if isinstance(first, jx.Slice) or len(getattr(first, "shape", ())) != 1:
        raise NotImplementedError(
            f"{what}: only a 1-D vector of indices along the first dimension is supported (got indexer shape"
            f" {tuple(gather.int_indexer_shape)})"
        )
    if not jnp.issubdtype(first.dtype, jnp.integer):
        raise ValueError(f"{what}: indices must be integers, got {first.dtype}")
    k = next((i for i, t in enumerate(ts[:g]) if not isinstance(t, jx.NDIndexer)), g)
    middle = ts[k:g]
    for t in middle:
        if not isinstance(t, jx.BitcastTransform):
            raise NotImplementedError(f"{what}: an array indexer after a {type(t).__name__} (only after bitcasts)")
    region, _, base = views.split(ts[:k], ref_aval)
    if not base.shape or not all(isinstance(n, int) for n in base.shape):
        raise NotImplementedError(f"{what}: an array indexer of a region of traced size or rank 0")
    unit, view_dtype = _unit_bits(base.dtype, middle)
    isz = _units(base.dtype, unit, what)
    _checked_units(math.prod(base.shape) * isz, unit, "a gather from", what)
    rows = int((jx.transform_type(ts[:g], ref_aval) if g else ref_aval).shape[0])
    # Region rows per repeat of the pattern: bitcasts of a rank-2 value fold
    # / split its first dimension, of a higher rank one they leave it alone.
    period = 1
    if middle and len(base.shape) == 2:
        period = math.lcm(isz, *(_units(t.dtype, unit, what) for t in middle)) // isz
    row_bytes = math.prod(base.shape[1:]) * isz  # in units
    pattern = np.arange(period * row_bytes, dtype=np.int32).reshape(period, *base.shape[1:], isz)
    for t in middle:
        pattern = _apply(np, pattern, t, what, unit)
    per = pattern.shape[0]  # view rows per repeat
    if rows * period != base.shape[0] * per:
        raise NotImplementedError(f"{what}: an array indexer after bitcasts that do not keep whole rows")
    idx = jnp.asarray(first)
    bad = (idx < 0) | (idx >= rows)
    idx = jnp.clip(idx, 0, rows - 1).astype(jnp.int32)
    if unit == 8 and per == 1:
        by_rows = _row_map(pattern[0], idx * np.int32(period * row_bytes), bad, others)
        if by_rows is not None:
            return region, by_rows
    block = (idx // per).reshape(-1, *([1] * (pattern.ndim - 1)))
    x = block * np.int32(period * row_bytes) + jnp.asarray(pattern)[idx % per]
    x = jnp.where(bad.reshape(block.shape), OUT_OF_BOUNDS, x)
    return region, _map(_select(x, others, what).reshape(-1), unit, base.dtype, view_dtype)


def _row_map(pattern, starts, bad, indices):
    """The gather's map as a `RowMap` when every gathered row sees the same
    `pattern` (shape (*dims, bytes per element): the offsets of one row's
    bytes, relative to its block's first byte; `starts`: each row's block)
    and `indices` (one per dim) are slices of static size and stride: XLA
    then computes one start per row per DMA, not every byte (a SparseCore
    gather of 16 rows of 8 KiB was 131072 offsets per DMA). A slice of
    traced start moves every row by the same amount where the pattern is
    linear along its dim (bitcasts keep it so: they only regroup the bytes
    of each element). `None` for anything else (the full map does it)."""
    dims = pattern.shape[:-1]
    if len(indices) != len(dims):
        return None
    box = []
    for d, (i, extent) in enumerate(zip(indices, dims)):
        if not (isinstance(i, jx.Slice) and _static(i.size) and _static(i.stride) and int(i.size) > 0):
            return None
        size, stride = int(i.size), int(i.stride)
        reach = (size - 1) * stride  # the slice's last index past its first
        if _static(i.start):
            start = int(i.start)
            if start < 0 or start + reach >= extent:
                return None  # out of bounds: the full map reports it
            box.append(slice(start, start + reach + 1, stride))
            continue
        step = _linear_step(pattern, d)
        if step is None:
            return None
        start = jnp.asarray(i.start).astype(jnp.int32)
        bad = bad | (start < 0) | (start + reach >= extent)
        starts = starts + jnp.clip(start, 0, max(extent - 1 - reach, 0)) * np.int32(step)
        box.append(slice(0, reach + 1, stride))
    starts = jnp.where(bad, OUT_OF_BOUNDS, starts).astype(jnp.int32)
    return RowMap(starts=starts, pattern=np.ascontiguousarray(pattern[tuple(box)]).reshape(-1))


def _linear_step(pattern, d: int):
    """The offset step of `pattern` along dim `d` if it is the same
    everywhere (0 for a dim of one element), else None."""
    if pattern.shape[d] < 2:
        return 0
    steps = np.diff(pattern.astype(np.int64), axis=d)
    step = int(steps.flat[0])
    return step if bool(np.all(steps == step)) else None


def _select(x, indices, what: str):
    """`x` (gathered rows, shape (n, *dims, units per element)) indexed along `dims`
    by `indices`: slices, or index vectors of shape (n,) (a scalar index
    comes broadcast to one) taking element ``i`` of row ``i``."""
    n, dims = x.shape[0], x.shape[1:-1]
    slice_dims = [d for d, i in enumerate(indices) if isinstance(i, jx.Slice)]
    rank = 1 + len(slice_dims)
    arrays, bad = [jnp.arange(n, dtype=np.int32).reshape(n, *([1] * (rank - 1)))], None
    for d, (i, extent) in enumerate(zip(indices, dims)):
        if isinstance(i, jx.Slice):
            try:
                size = int(i.size)
            except TypeError:
                raise NotImplementedError(f"{what}: a slice of traced size after an array indexer") from None
            shape = [1] * rank
            shape[1 + slice_dims.index(d)] = size
            a = (i.start + jnp.arange(size, dtype=np.int32) * int(i.stride)).reshape(shape)
        else:
            a = jnp.broadcast_to(jnp.asarray(i).astype(jnp.int32), (n,)).reshape(n, *([1] * (rank - 1)))
        out = (a < 0) | (a >= extent)
        bad = out if bad is None else bad | out
        arrays.append(jnp.clip(a, 0, extent - 1))
    if bad is None:
        return x
    y = x[tuple(arrays)]
    return jnp.where(bad[..., None], OUT_OF_BOUNDS, y)
