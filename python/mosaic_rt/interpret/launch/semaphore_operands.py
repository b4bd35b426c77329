"""Semaphores as pallas_call operands and results, carried from kernel to
kernel.

On a TPU a kernel may start a DMA and return its semaphore (an output of
``pltpu.SemaphoreType.DMA(shape)`` in SEMAPHORE memory); a later kernel takes
that semaphore as an operand and waits there for the DMA's bytes. The
semaphore, its count and the DMA outlive the first kernel.

Here a launch's semaphores live as long as the launch. So at the end of a
launch each semaphore it returns is *taken*: when every device of the
launch has finished its kernel (a device barrier: every remote copy into
this device has been started), the DMAs still queued on the semaphore run
and its whole count is read and left 0 (``semaphore_read(take=1)``; no
leak); a second barrier keeps every device -- and the buffers those DMAs
read -- in the launch until all have taken theirs. The counts leave as the
result's value (int32 counts viewed as the semaphore dtype). A launch that
receives such a value signals its own new semaphores by those counts before
its first grid step. A DMA started in one kernel and waited in another has
thus landed by the end of the first (what a TPU guarantees at the latest
by the wait), and the wait sees its bytes; a wait for more than was carried
deadlocks, and a count nobody waits for leaks -- both reported by the
second kernel, naming the semaphore.

The count carried is core 0's of its device (a TensorCore kernel's
semaphores are per core; another core's count left at the end is that
core's leak).
"""

from __future__ import annotations

import math

import jax.numpy as jnp

from mosaic_rt import jax_internals as jx
from mosaic_rt.interpret.context import Ctx
from mosaic_rt.interpret.evaluation import native_calls

_SEMAPHORE = jx.MemorySpace.SEMAPHORE


def is_semaphore(value_or_aval) -> bool:
    """Whether a pallas_call operand / result is a semaphore array."""
    return jx.is_semaphore_dtype(getattr(value_or_aval, "dtype", None))


def restore(token, ctx: Ctx, ids, value):
    """Signals the launch's semaphores ``ids`` (int32, the operand's shape)
    on core 0 by the counts an earlier kernel carried in ``value``."""
    counts = jnp.reshape(jx.semaphore_counts_p.bind(value), (-1,))
    flat = jnp.reshape(ids, (-1,))
    for k in range(math.prod(value.shape)):
        token = native_calls.semaphore_signal(token, ctx.handle, ctx.device_id, 0, flat[k], counts[k], None, None)
    return token


def take(token, ctx: Ctx, ids, aval):
    """``(token, value)``: the whole count of each semaphore ``ids`` on core
    0 (after the DMAs queued on it), as a result of type ``aval``."""
    flat = jnp.reshape(ids, (-1,))
    counts = []
    for k in range(math.prod(aval.shape)):
        token, count = native_calls.semaphore_read(token, ctx.handle, ctx.device_id, 0, flat[k], take=True)
        counts.append(count)
    value = jnp.stack(counts).reshape(aval.shape) if counts else jnp.zeros(aval.shape, jnp.int32)
    return token, jx.counts_as_semaphores_p.bind(value.astype(jnp.int32), dtype=aval.dtype)


def take_all(token, ctx: Ctx, results: dict):
    """``(token, values)``: every returned semaphore array taken (see the
    module doc), ``results`` mapping an output index to ``(ids, aval)``;
    values by output index."""
    if not results:
        return token, {}
    if ctx.num_devices > 1:
        token = native_calls.device_barrier(token, ctx.handle, ctx.device_id)
    values = {}
    for j, (ids, aval) in sorted(results.items()):
        token, values[j] = take(token, ctx, ids, aval)
    if ctx.num_devices > 1:
        token = native_calls.device_barrier(token, ctx.handle, ctx.device_id)
    return token, values
