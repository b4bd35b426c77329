"""The interpreter's native calls: thin adapters over the typed wrappers of
`mosaic_rt.ffi.ops` (which alone emit native ops) that speak in jaxpr terms
(avals, params, id arrays) and add what the interpreter knows: the source
site, `logging_mode`'s logs, `buffer_bounds` padding.

Semaphore refs are int32 arrays of semaphore ids; scalar ids are taken from
them after indexing. Every op carries the source site of the equation being
emitted (`sites.current()`), so native reports name the kernel line.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from mosaic_rt import jax_internals as jx
from mosaic_rt import memory_spaces
from mosaic_rt.ffi import ops as ffi_ops
from mosaic_rt.ffi.launch_config import LaunchConfig
from mosaic_rt.ffi.ops import Lazy
from mosaic_rt.interpret.evaluation import logging_ops as lg
from mosaic_rt.interpret.evaluation import sites
from mosaic_rt.interpret.params import InterpretParams
from mosaic_rt.jax_internals import padded_shape

# The token as a traced value, the ops pending on it emitted (see
# `mosaic_rt.ffi.batching`): before a token goes into control flow or a
# host callback, and out of a loop or branch body.
materialize = ffi_ops.materialize
batched_runs = ffi_ops.batched_runs

_SMEM_CODE = memory_spaces.SMEM


def _scalar_id(x):
    """One semaphore id (the wrappers make it an int32 operand)."""
    if not hasattr(x, "shape"):
        x = jnp.asarray(x)
    if x.shape != ():
        raise ValueError(f"expected a single semaphore, got a semaphore array of shape {x.shape}; index it first")
    return x


_space = memory_spaces.code


def launch_begin(token, device, *, uid, config: LaunchConfig, allocations, barrier, grid=None):
    """Joins the launch, makes its ``allocations`` (`launch_buffer` /
    `launch_semaphores`), with ``barrier`` waits for every device and with
    ``grid`` begins core 0's grid loop: one native call. ``(token, handle,
    results, step)`` as `ffi_ops.launch_begin` returns them; buffer
    allocations are logged as `allocate_buffer` logs them."""
    token, handle, results, step = ffi_ops.launch_begin(
        token,
        device,
        uid=uid,
        config=config,
        allocations=allocations,
        barrier=barrier,
        grid=grid,
        site=sites.current(),
    )
    for a, r in zip(allocations, results):
        if isinstance(a, ffi_ops.LaunchBuffer):
            token = _log_allocation(
                token,
                device,
                -1,
                a.space,
                r[0] if a.direct else r,
                a.shape if a.logical_shape is None else a.logical_shape,
                a.shape,
            )
    return token, handle, results, step


def launch_buffer(
    space, params: InterpretParams, *, init=None, shape=None, dtype=None, borrow=False, direct=False
) -> ffi_ops.LaunchBuffer:
    """A buffer to allocate (in the launch's prologue, `begin`, on every
    core of the device, or by `allocate_buffer`): its content shape padded
    per `buffer_bounds`, and an ordinary buffer instead of a direct one when
    padded (a direct one with ``init`` starts as that value, in place)."""
    if init is not None:
        init = jx.key_data(init)  # typed PRNG keys live as their key data
        init = jnp.asarray(init)
        shape, dtype = init.shape, init.dtype
    elif jx.is_key_dtype(dtype):
        shape, dtype = jx.key_physical(shape, dtype)
    logical = tuple(shape)
    content = _padded_shape(logical, dtype, space, params)
    if direct and content == logical and not borrow:
        return ffi_ops.LaunchBuffer(space=space, dtype=dtype, shape=content, init=init, direct=True)
    return ffi_ops.LaunchBuffer(
        space=space, dtype=dtype, shape=content, logical_shape=logical, init=init, borrow=borrow
    )


def launch_semaphores(shape, *, kind) -> ffi_ops.LaunchSemaphores:
    """A semaphore array of the launch's prologue (`begin`)."""
    return ffi_ops.LaunchSemaphores(shape=tuple(shape), kind=kind)


def kernel_end(token, handle, device, *, on_leak, keep_alive=(), outputs=()):
    """Leaves the launch, after its leak report (unless ``on_leak`` is
    "ignore"); with direct ``outputs`` (see `allocate_buffer`) returns
    ``(token, outputs)``, their final values."""
    # Races, leaks and misuse of policy "warn" wait in a native queue; this
    # device's kernel_end hands them to mosaic_rt.ffi.reports before its
    # outputs are ready (a native sink, not a host callback in the program:
    # that would keep jax from caching it).
    return ffi_ops.kernel_end(
        token,
        handle,
        device,
        keep_alive=keep_alive,
        outputs=outputs,
        leak_policy=None if on_leak == "ignore" else on_leak,
    )


def core_end(token, handle, device, core):
    """This core's program is done (deadlock detection knows at once)."""
    return ffi_ops.core_end(token, handle, device, core)


def grid_step(token, handle, device, core, point, *, phase):
    """A grid step's start (with its point) or end, on the timeline."""
    return ffi_ops.grid_step(token, handle, device, core, point, phase=phase)


def sync_device_cores(token, handle, device):
    return ffi_ops.sync_device_cores(token, handle, device)


def device_barrier(token, handle, device):
    """Rendezvous of every device of the launch."""
    return ffi_ops.device_barrier(token, handle, device, site=sites.current())


def _padded_shape(shape, dtype, space, params: InterpretParams):
    if params.buffer_bounds != "padded" or space == _SMEM_CODE:
        return tuple(shape)
    return tuple(padded_shape(tuple(shape), jnp.dtype(dtype)))


def allocate_buffer(
    token, *, handle, device, core, space, params: InterpretParams, init=None, shape=None, dtype=None, borrow=False
):
    """``(token, id)`` of a buffer made as `launch_buffer` describes it, by
    an op of its own (a `run_scoped` allocation)."""
    b = launch_buffer(space, params, init=init, shape=shape, dtype=dtype, borrow=borrow)
    token, buf = ffi_ops.allocate_buffer(
        token,
        handle,
        device,
        core,
        space=space,
        dtype=b.dtype,
        shape=b.shape,
        logical_shape=b.logical_shape,
        init=b.init,
        borrow=b.borrow,
        site=sites.current(),
    )
    token = _log_allocation(token, device, -1 if core is None else core, space, buf, b.logical_shape, b.shape)
    return token, buf


def _log_allocation(token, device, core, space, buf, logical, content):
    if not lg.enabled(lg.SHARED_MEMORY):  # (before making the shape arrays)
        return token
    return lg.log(
        token,
        lg.SHARED_MEMORY,
        "allocate_buffer",
        device,
        core,
        space=_space(space),
        buffer_id=buf,
        logical_shape=jnp.asarray(logical, jnp.int32),
        content_shape=jnp.asarray(content, jnp.int32),
    )


def free_buffer(token, handle, device, core, space, buf):
    token = ffi_ops.free_buffer(token, handle, device, core, buf, space=space)
    return lg.log(token, lg.SHARED_MEMORY, "deallocate_buffer", device, core, space=_space(space), buffer_id=buf)


def _log_access(token, op, device, core, space, buf, region):
    if not lg.enabled(lg.SHARED_MEMORY):
        return token
    return lg.log(
        token,
        lg.SHARED_MEMORY,
        op,
        device,
        core,
        space=_space(space),
        buffer_id=buf,
        starts=region.start_vector() if region is not None else jnp.zeros((0,), jnp.int32),
        sizes=jnp.asarray(region.sizes if region is not None else (), jnp.int32),
    )


def load(token, handle, device, core, space, buf, region, aval, mask=None, *, lazy=False):
    """With ``mask`` (broadcast to ``aval``'s shape): a masked load. With
    ``lazy`` the value may be a `batching.Lazy` (see `ffi_ops.load`).
    Typed PRNG keys are loaded as their key data (the region covers the
    leading, logical dims) and wrapped."""
    if jx.is_key_dtype(aval.dtype):
        shape, dtype = jx.key_physical(aval.shape, aval.dtype)
        if mask is not None:
            mask = jnp.broadcast_to(jnp.reshape(mask, (*aval.shape,) + (1,) * (len(shape) - len(aval.shape))), shape)
        token, data = load(token, handle, device, core, space, buf, region, jax.ShapeDtypeStruct(shape, dtype), mask)
        return token, jx.wrap_key_data(data, aval.dtype)
    if mask is not None:
        mask = jnp.broadcast_to(jnp.asarray(mask, jnp.bool_), aval.shape)
    token, value = ffi_ops.load(
        token,
        handle,
        device,
        core,
        buf,
        region,
        space=space,
        shape=aval.shape,
        dtype=aval.dtype,
        mask=mask,
        site=sites.current(),
        lazy=lazy,
    )
    return _log_access(token, "get_buffer_content", device, core, space, buf, region), value


def swap(token, handle, device, core, space, buf, region, value, mask, aval, *, old=True):
    """(token, old): old is `aval` itself (no value) when not ``old``.
    ``value`` may be a pending member's `Lazy` result of the right type.
    Typed PRNG keys are stored as their key data (see `load`)."""
    if jx.is_key_dtype(aval.dtype):
        shape, dtype = jx.key_physical(aval.shape, aval.dtype)
        data = jnp.broadcast_to(jx.key_data(jnp.broadcast_to(value, aval.shape)), shape)
        if mask is not None:
            mask = jnp.broadcast_to(jnp.reshape(mask, (*aval.shape,) + (1,) * (len(shape) - len(aval.shape))), shape)
        token, prev = swap(
            token, handle, device, core, space, buf, region, data, mask, jax.ShapeDtypeStruct(shape, dtype), old=old
        )
        return token, (jx.wrap_key_data(prev, aval.dtype) if old else aval)
    if isinstance(value, Lazy) and (value.dtype != aval.dtype or value.shape != aval.shape):
        value = ffi_ops.realize(value)
    if not isinstance(value, Lazy):
        value = jnp.asarray(value, aval.dtype)
    if value.shape != aval.shape:
        value = jnp.broadcast_to(value, aval.shape)
    if mask is not None:
        mask = jnp.broadcast_to(jnp.asarray(mask, jnp.bool_), aval.shape)
    out = ffi_ops.swap(
        token, handle, device, core, buf, region, value, mask, space=space, old=old, site=sites.current()
    )
    token, value = out if old else (out, aval)
    return _log_access(token, "swap_buffer_content", device, core, space, buf, region), value


def fill(token, handle, device, core, space, buf, region, scalar, old_aval=None):
    """A swap of the rank-0 `scalar` broadcast over the region: (token,
    old), old None unless `old_aval` asks for the previous contents."""
    out = ffi_ops.fill(
        token,
        handle,
        device,
        core,
        buf,
        region,
        scalar,
        space=space,
        old_shape=None if old_aval is None else old_aval.shape,
        site=sites.current(),
    )
    token, old = (out, None) if old_aval is None else out
    return _log_access(token, "swap_buffer_content", device, core, space, buf, region), old


def store(token, handle, device, core, space, buf, region, value):
    value = jx.key_data(value)  # typed PRNG keys are stored as their key data
    token = ffi_ops.store(token, handle, device, core, buf, region, value, space=space, site=sites.current())
    return _log_access(token, "store_buffer_content", device, core, space, buf, region)


def allocate_semaphores(token, handle, device, core, shape, *, kind):
    count = math.prod(shape)
    token, first = ffi_ops.allocate_semaphores(
        token, handle, device, core, kind=kind, count=max(count, 1), site=sites.current()
    )
    ids = first if tuple(shape) == () else ffi_ops.iota_ids(first, shape)
    return token, ids


def barrier_semaphore(token, handle, device, collective_id):
    return ffi_ops.barrier_semaphore(token, handle, device, collective_id=collective_id, site=sites.current())


def signal_wraps_target(device, core) -> bool:
    """Whether the signal op itself should apply stock's wrap of a negative
    target (one native call fewer than a `wrap_target` before it): for
    traced ids, unless semaphore logs show the wrapped target. Static ids
    are wrapped at trace time."""
    static = all(isinstance(x, (int, np.integer)) for x in (device, core))
    return not static and not lg.enabled(lg.SEMAPHORE)


def semaphore_signal(token, handle, device, core, sem, inc, target_device, target_core, *, wrap_negative: bool = False):
    token = ffi_ops.semaphore_signal(
        token,
        handle,
        device,
        core,
        _scalar_id(sem),
        inc,
        target_device=target_device,
        target_core=target_core,
        wrap_negative=wrap_negative,
        site=sites.current(),
    )
    return lg.log(
        token,
        lg.SEMAPHORE,
        "signal",
        device,
        core,
        semaphore=_scalar_id(sem),
        inc=inc,
        target_device=-1 if target_device is None else target_device,
        target_core=-1 if target_core is None else target_core,
    )


def semaphore_wait(token, handle, device, core, sem, value, *, decrement: bool = True):
    token = ffi_ops.semaphore_wait(
        token, handle, device, core, _scalar_id(sem), value, decrement=decrement, site=sites.current()
    )
    extra = {} if decrement else {"decrement": 0}
    return lg.log(token, lg.SEMAPHORE, "wait", device, core, semaphore=_scalar_id(sem), value=value, **extra)


def semaphore_read(token, handle, device, core, sem, *, take: bool = False):
    return ffi_ops.semaphore_read(token, handle, device, core, _scalar_id(sem), take=take, site=sites.current())


def dma_start(token, handle, device, core, request: ffi_ops.DmaStart):
    """Starts the DMA ``request`` (built by the rule, its site included)."""
    _scalar_ids(request.dst_sem, request.src_sem, *(w.sem for w in request.then_wait))
    return ffi_ops.dma_start(token, handle, device, core, request)


def dma_wait(token, handle, device, core, request: ffi_ops.DmaWait):
    _scalar_ids(request.sem, *(w.sem for w in request.then_wait))
    return ffi_ops.dma_wait(token, handle, device, core, request)


def _scalar_ids(*sems):
    """Checks that each semaphore given (not None) is a single one."""
    for sem in sems:
        if sem is not None:
            _scalar_id(sem)


def _copy_block(
    token,
    handle,
    device,
    core,
    src,
    src_region,
    dst,
    dst_region,
    *,
    src_space,
    dst_space,
    direction,
    name,
    block_indices,
    grid_point,
):
    if lg.enabled(lg.SHARED_MEMORY):
        token = _log_access(token, "get_buffer_content", device, core, src_space, src, src_region)
        token = _log_access(token, "store_buffer_content", device, core, dst_space, dst, dst_region)
    return ffi_ops.copy_block(
        token,
        handle,
        device,
        core,
        src,
        src_region,
        dst,
        dst_region,
        src_space=src_space,
        dst_space=dst_space,
        direction=direction,
        name=name,
        block_indices=block_indices,
        grid_point=grid_point,
        site=sites.current(),
    )


def copy_block_in(token, *, handle, device, core, src, src_region, dst_space, dst, name, block_indices, grid_point):
    """Copies one input block from its HBM buffer into the kernel's buffer."""
    return _copy_block(
        token,
        handle,
        device,
        core,
        src,
        src_region,
        dst,
        None,
        src_space="hbm",
        dst_space=dst_space,
        direction="input",
        name=name,
        block_indices=block_indices,
        grid_point=grid_point,
    )


def copy_block_out(token, *, handle, device, core, src_space, src, dst, dst_region, name, block_indices, grid_point):
    """Copies the kernel's output buffer into its block of the HBM output."""
    return _copy_block(
        token,
        handle,
        device,
        core,
        src,
        None,
        dst,
        dst_region,
        src_space=src_space,
        dst_space="hbm",
        direction="output",
        name=name,
        block_indices=block_indices,
        grid_point=grid_point,
    )


def check_revisit(token, handle, device, core, loop_idx, regions):
    """Fails if an output block is written again after the core moved on
    (`regions[i]` is None for outputs that are not tracked)."""
    return ffi_ops.check_revisit(token, handle, device, core, loop_idx, regions, site=sites.current())


def prng_seed(token, handle, device, core, seeds):
    return ffi_ops.prng_seed(token, handle, device, core, seeds)


def prng_random_bits(token, handle, device, core, aval):
    return ffi_ops.prng_random_bits(token, handle, device, core, shape=aval.shape, dtype=aval.dtype)


GridBlock = ffi_ops.GridBlock


def grid_begin(token, handle, device, core, **kwargs):
    """The native grid loop of this core: ``(token, go, p0, p1)``."""
    return ffi_ops.grid_begin(token, handle, device, core, site=sites.current(), **kwargs)


def grid_copy_in(token, handle, device, core, indices):
    return ffi_ops.grid_copy_in(token, handle, device, core, indices, site=sites.current())


def grid_copy_out(token, handle, device, core, indices, next_indices, *, ndim):
    return ffi_ops.grid_copy_out(token, handle, device, core, indices, next_indices, ndim=ndim, site=sites.current())
