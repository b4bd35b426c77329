"""`pltpu.pack_elementwise` / `pltpu.unpack_elementwise` and SparseCore's
`plsc.bitcast` as plain jnp.

Neither primitive has a CPU lowering (nor a stock interpret rule); on a TPU
they are one Mosaic op each. A word of ``W`` bits holds ``W // P`` values of
a ``P``-bit packed dtype, value ``i`` in bits ``[i * P, (i + 1) * P)``
(lowest first):

* pack: each source (``W``-bit ints, or f32 packed as bf16) becomes a
  ``P``-bit value -- integers keep their low ``P`` bits, f32 rounds to the
  nearest bf16 -- and the word is returned as ``uintW``;
* unpack: value ``index`` of each word, read as the packed dtype and
  converted to the unpacked dtype (ints sign- or zero-extend by the packed
  dtype's signedness; bf16 widens to f32 exactly).

May use: jax, numpy.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax


def _width(dtype) -> int:
    """Bits of one element (sub-byte dtypes: int4 is 4)."""
    return int(jnp.iinfo(dtype).bits) if jnp.issubdtype(dtype, jnp.integer) else int(jnp.finfo(dtype).bits)


_UINTS = {2: jnp.uint2, 4: jnp.uint4, 8: jnp.uint8, 16: jnp.uint16, 32: jnp.uint32}


def _uint(bits: int):
    return jnp.dtype(_UINTS[bits])


def pack(xs, packed_dtype):
    """``pack_elementwise(xs, packed_dtype=...)``: a ``uintW`` array."""
    packed_dtype = jnp.dtype(packed_dtype)
    w, p = _width(xs[0].dtype), _width(packed_dtype)
    word = _uint(w)
    out = jnp.zeros(xs[0].shape, word)
    mask = np.asarray((1 << p) - 1, word)
    for i, x in enumerate(xs):
        if jnp.issubdtype(x.dtype, jnp.floating):
            # f32 -> bf16 (the one float packing): round to nearest, then
            # the 16 bits as an unsigned word.
            v = lax.bitcast_convert_type(x.astype(packed_dtype), _uint(p)).astype(word)
        else:
            v = lax.bitcast_convert_type(x, word) & mask
        out = out | lax.shift_left(v, np.asarray(i * p, word))
    return out


def unpack(x, index: int, packed_dtype, unpacked_dtype):
    """``unpack_elementwise(x, index=..., ...)``: value ``index`` of each word."""
    packed_dtype, unpacked_dtype = jnp.dtype(packed_dtype), jnp.dtype(unpacked_dtype)
    w, p = _width(x.dtype), _width(packed_dtype)
    word = _uint(w)
    bits = lax.shift_right_logical(lax.bitcast_convert_type(x, word), np.asarray(index * p, word))
    bits = bits & np.asarray((1 << p) - 1, word)
    value = lax.bitcast_convert_type(bits.astype(_uint(p)), packed_dtype)
    return value.astype(unpacked_dtype)


def bitcast_minor(x, dtype):
    """``plsc.bitcast(x, dtype)``: the bytes of each row of the minor
    dimension read as ``dtype`` (little-endian, as in memory), so the minor
    size scales by the width ratio and the rank stays."""
    dtype = jnp.dtype(dtype)
    old, new = _width(x.dtype), _width(dtype)
    if old < 8 or new < 8:
        raise NotImplementedError(f"plsc.bitcast between {x.dtype} and {dtype}: sub-byte element types")
    if old == new:
        return lax.bitcast_convert_type(x, dtype)
    if old > new:  # each element splits into old // new narrower ones, lowest first
        y = lax.bitcast_convert_type(x, dtype)
        return y.reshape(*x.shape[:-1], x.shape[-1] * (old // new))
    k = new // old
    if x.shape[-1] % k:
        raise ValueError(f"plsc.bitcast of {x.dtype}{list(x.shape)} to {dtype}: minor size not a multiple of {k}")
    return lax.bitcast_convert_type(x.reshape(*x.shape[:-1], x.shape[-1] // k, k), dtype)
