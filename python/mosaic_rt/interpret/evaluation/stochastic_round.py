"""`pltpu.stochastic_round`: f32 to a narrower type, rounding to one of
the two neighbours of ``x`` in the target type with probability by
distance, driven by the kernel's ``random_bits``.

No CPU lowering exists (on a TPU it is one Mosaic op, `stochastic_convert`).
Here ``x`` rounds away from zero when ``u < (|x| - |lo|) / (|hi| - |lo|)``
(``lo``: its neighbour toward zero, ``hi``: the next one away from zero,
``u``: the top 24 bits of ``random_bits`` as a fraction in [0, 1)), so the
result is unbiased and always one of the two neighbours; which bit pattern
of ``random_bits`` picks which neighbour is ours, not the TPU's (its
mapping is not published). Exactly representable values stay; NaN stays
NaN; formats without infinity saturate at their largest finite value.

May use: jax, numpy.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

# The target types the TPU lowering accepts (`_stochastic_round_lowering_rule`).
_FLOAT_TARGETS = ("bfloat16", "float8_e5m2", "float8_e4m3fn", "float8_e4m3b11fnuz", "float4_e2m1fn")


def check(x_dtype, target_dtype) -> None:
    """The TPU lowering's checks, with its messages and types."""
    if jnp.dtype(x_dtype) != jnp.float32:
        raise ValueError("Only float32 input is supported.")
    if jnp.dtype(target_dtype).name not in (*_FLOAT_TARGETS, "int4"):
        raise ValueError(f"Unsupported target dtype: {target_dtype}")


def stochastic_round(x, random_bits, target_dtype):
    """``x`` (f32) rounded stochastically to ``target_dtype``."""
    target = jnp.dtype(target_dtype)
    u = lax.convert_element_type(lax.shift_right_logical(random_bits, np.uint32(8)), jnp.float32) * np.float32(2.0**-24)
    if target == jnp.dtype("int4"):
        return _to_int4(x, u)
    finfo = jnp.finfo(target)
    big, small = np.asarray(finfo.max, target), np.asarray(finfo.min, target)
    if not np.isinf(np.asarray(np.inf, np.float32).astype(target)):
        x = jnp.clip(x, np.float32(finfo.min), np.float32(finfo.max))
    near = x.astype(target)
    beyond = jnp.abs(near.astype(jnp.float32)) > jnp.abs(x)
    lo = jnp.where(beyond, jnp.nextafter(near, jnp.zeros_like(near)), near)
    hi = jnp.nextafter(lo, jnp.where(x < 0, small, big))
    lo32, hi32 = lo.astype(jnp.float32), hi.astype(jnp.float32)
    gap = jnp.abs(hi32) - jnp.abs(lo32)
    frac = jnp.where(gap > 0, (jnp.abs(x) - jnp.abs(lo32)) / jnp.where(gap > 0, gap, 1.0), 0.0)
    out = jnp.where(u < frac, hi, lo)
    return jnp.where(jnp.isnan(x), near, out)


def _to_int4(x, u):
    lo = jnp.trunc(x)
    up = u < jnp.abs(x - lo)
    out = jnp.clip(jnp.where(up, lo + jnp.sign(x), lo), -8.0, 7.0)
    return jnp.where(jnp.isnan(out), 0.0, out).astype(jnp.int4)
