"""8-bit integer add / sub / mul / neg, wrapping as a TPU does.

XLA:CPU saturates 8-bit integer arithmetic that it fuses into a min / max
reduction (jaxlib 0.10.2 and 0.12.1 alike): ``jnp.min(x + y, axis=1)``
over int8 rows whose sums overflow gives -128 / 127 where the sums wrap on
a TPU, in eager jax and in numpy -- under plain `jax.jit` too, and under
stock interpret mode. Computed in int32 and converted back (a truncation,
which XLA keeps), the result wraps. 16-bit and wider arithmetic is left
as it is: XLA:CPU wraps it.

May use: jax, numpy.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

_WIDE = {"int8": jnp.int32, "uint8": jnp.uint32}
_OPS = {lax.add_p: lax.add, lax.sub_p: lax.sub, lax.mul_p: lax.mul, lax.neg_p: lax.neg}


def needs_widening(dtype) -> bool:
    return jnp.dtype(dtype).name in _WIDE


def wrapping(primitive, operands):
    """``primitive`` (add / sub / mul / neg) of 8-bit integer ``operands``,
    computed wide and truncated back to their type."""
    dtype = operands[0].dtype
    wide = [lax.convert_element_type(x, _WIDE[jnp.dtype(dtype).name]) for x in operands]
    return lax.convert_element_type(_OPS[primitive](*wide), dtype)
