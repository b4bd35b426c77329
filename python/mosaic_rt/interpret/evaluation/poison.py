"""Buffer poisoning (``jax_pallas_poison_buffers``), as the TPU does it.

With the flag on when a kernel is lowered, the TPU lowering fills every
buffer a kernel allocates (`run_scoped` scratch, ``jax.empty_ref``;
pipelines allocate theirs so) with a poison value before the kernel
touches it: NaN for floats, the minimum of the element's two's-complement
width for integers (so 2**(bits-1) for unsigned ones), True for bools.
Code that reads a buffer before writing it then sees a value no real
computation produces. Stock fills such buffers with its uninitialized
value whatever the flag says; we follow the TPU.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from mosaic_rt import jax_internals as jx


def initial_value(shape, dtype):
    """The poisoned content of a new kernel buffer of ``shape`` / ``dtype``
    (typed PRNG keys: of their key data), or None when poisoning is off."""
    if not jx.poison_buffers_enabled():
        return None
    if jx.is_key_dtype(dtype):
        shape, dtype = jx.key_physical(shape, dtype)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        value = True
    elif jnp.issubdtype(dtype, jnp.floating):
        value = np.nan
    elif jnp.issubdtype(dtype, jnp.signedinteger):
        value = jnp.iinfo(dtype).min
    elif jnp.issubdtype(dtype, jnp.unsignedinteger):
        value = 1 << (jnp.iinfo(dtype).bits - 1)
    else:
        raise NotImplementedError(f"Unsupported element type for poisoning: {dtype}")
    return jnp.full(shape, value, dtype)
