"""Multi-device benchmark kernels (run under `jax.shard_map` on a 1-D mesh "x").

Our own versions of the Pallas distributed guide's patterns: semaphore
ping-pong, right permute, all-gather ring and ring reduce-scatter. Each
builder returns `(fn, args)` where `fn(interpret)` is a jitted program taking
`args`; the same program runs under stock or mosaic_rt interpret params.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

_LANES = 128


def _mesh(n: int) -> Mesh:
    devices = jax.devices()
    if len(devices) < n:
        raise RuntimeError(
            f"this case needs {n} devices but jax has {len(devices)}; the harness "
            "must set the CPU device count before jax initialises"
        )
    return Mesh(np.array(devices[:n]), ("x",))


def _sharded(x: np.ndarray, mesh: Mesh):
    return jax.device_put(x, NamedSharding(mesh, P("x")))


def _shard_map(body, mesh: Mesh):
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))


def _neighbour_handshake(n: int, me):
    """Signal both ring neighbours and wait for both: they are inside the kernel."""
    barrier = pltpu.get_barrier_semaphore()
    for peer in ((me + 1) % n, (me - 1) % n):
        pl.semaphore_signal(barrier, 1, device_id=(peer,), device_id_type=pl.DeviceIdType.MESH)
    pl.semaphore_wait(barrier, 2)


def _block_input(n: int, rows: int) -> np.ndarray:
    """Small integer values (exact in float32), distinct per device."""
    return (np.arange(n * rows * _LANES, dtype=np.int64) % 251).astype(np.float32).reshape(n * rows, _LANES)


# -- ping-pong ---------------------------------------------------------------


def _handshake_with(other):
    """Two-device version of `_neighbour_handshake`."""
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(other,), device_id_type=pl.DeviceIdType.MESH)
    pl.semaphore_wait(barrier, 1)


def _ping_pong_kernel(rounds, x_ref, o_ref, sem):
    me = lax.axis_index("x")
    other = 1 - me
    _handshake_with(other)

    def signal_other():
        pl.semaphore_signal(sem, 1, device_id=(other,), device_id_type=pl.DeviceIdType.MESH)

    def round_(i, carry):
        @pl.when(me == 0)
        def _():
            signal_other()
            pl.semaphore_wait(sem, 1)

        @pl.when(me == 1)
        def _():
            pl.semaphore_wait(sem, 1)
            signal_other()

        return carry + 1

    count = lax.fori_loop(0, rounds, round_, jnp.int32(0))
    o_ref[...] = x_ref[...] + count.astype(o_ref.dtype)


def ping_pong(rounds: int, rows: int = 8):
    """2 devices bounce a REGULAR semaphore `rounds` times (4 semaphore ops a round)."""
    mesh = _mesh(2)
    x = _sharded(_block_input(2, rows), mesh)

    def fn(interpret):
        call = pl.pallas_call(
            functools.partial(_ping_pong_kernel, rounds),
            out_shape=jax.ShapeDtypeStruct((rows, _LANES), jnp.float32),
            scratch_shapes=[pltpu.SemaphoreType.REGULAR],
            compiler_params=pltpu.CompilerParams(collective_id=0),
            interpret=interpret,
        )
        return _shard_map(call, mesh)

    return fn, (x,)


# -- right permute -------------------------------------------------------------


def _right_permute_kernel(n, x_ref, o_ref, send_sem, recv_sem):
    me = lax.axis_index("x")
    _neighbour_handshake(n, me)
    copy = pltpu.make_async_remote_copy(
        src_ref=x_ref,
        dst_ref=o_ref,
        send_sem=send_sem,
        recv_sem=recv_sem,
        device_id=((me + 1) % n,),
        device_id_type=pl.DeviceIdType.MESH,
    )
    copy.start()
    copy.wait()


def right_permute(n: int, rows: int):
    """Every device sends its (rows, 128) f32 block to its right neighbour (1 DMA each)."""
    mesh = _mesh(n)
    x = _sharded(_block_input(n, rows), mesh)

    def fn(interpret):
        call = pl.pallas_call(
            functools.partial(_right_permute_kernel, n),
            out_shape=jax.ShapeDtypeStruct((rows, _LANES), jnp.float32),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
            compiler_params=pltpu.CompilerParams(collective_id=0),
            interpret=interpret,
        )
        return _shard_map(call, mesh)

    return fn, (x,)


# -- all-gather ring -------------------------------------------------------------


def _all_gather_kernel(n, x_ref, o_ref, local_sem, send_sem, recv_sems):
    me = lax.axis_index("x")
    _neighbour_handshake(n, me)
    own = pltpu.make_async_copy(x_ref, o_ref.at[me], local_sem)
    own.start()
    own.wait()
    # Step s forwards the slot that arrived from the left at step s-1 (slot me-s);
    # every slot is written once, so no buffer is reused. Each step has its own
    # receive semaphore: DMAs signalling one semaphore may land in any order.
    for step in range(n - 1):
        slot = (me - step) % n
        hop = pltpu.make_async_remote_copy(
            src_ref=o_ref.at[slot],
            dst_ref=o_ref.at[slot],
            send_sem=send_sem,
            recv_sem=recv_sems.at[step],
            device_id=((me + 1) % n,),
            device_id_type=pl.DeviceIdType.MESH,
        )
        hop.start()
        hop.wait()


def all_gather(n: int, rows: int):
    """Ring all-gather of one (rows, 128) block per device: n-1 remote DMAs per device."""
    mesh = _mesh(n)
    x = _sharded(_block_input(n, rows), mesh)

    def fn(interpret):
        call = pl.pallas_call(
            functools.partial(_all_gather_kernel, n),
            out_shape=jax.ShapeDtypeStruct((n, rows, _LANES), jnp.float32),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA((n - 1,))],
            compiler_params=pltpu.CompilerParams(collective_id=0),
            interpret=interpret,
        )

        def body(x_local):
            return call(x_local).reshape(n * rows, _LANES)

        return _shard_map(body, mesh)

    return fn, (x,)


# -- reduce-scatter ring -----------------------------------------------------------


def _reduce_scatter_kernel(n, rows, x_ref, o_ref, send_buf, recv_buf, send_sem, recv_sems):
    me = lax.axis_index("x")
    _neighbour_handshake(n, me)

    def chunk(c):
        return x_ref[pl.ds(pl.multiple_of(c * rows, rows), rows), :]

    # Step s sends partial sum of chunk (me-s-1) to the right; the right neighbour
    # adds its own piece at step s+1. Each step has its own slots and receive
    # semaphore, so out-of-order DMA completion cannot be mistaken for ours.
    for step in range(n - 1):
        c = (me - step - 1) % n
        partial = chunk(c) if step == 0 else chunk(c) + recv_buf[step - 1]
        send_buf[step] = partial
        hop = pltpu.make_async_remote_copy(
            src_ref=send_buf.at[step],
            dst_ref=recv_buf.at[step],
            send_sem=send_sem,
            recv_sem=recv_sems.at[step],
            device_id=((me + 1) % n,),
            device_id_type=pl.DeviceIdType.MESH,
        )
        hop.start()
        hop.wait()
    o_ref[...] = chunk(me) + recv_buf[n - 2]


def reduce_scatter(n: int, rows: int):
    """Ring reduce-scatter: device d ends with sum over devices of chunk d (n-1 DMAs each)."""
    mesh = _mesh(n)
    x = _sharded(_block_input(n * n, rows), mesh)

    def fn(interpret):
        call = pl.pallas_call(
            functools.partial(_reduce_scatter_kernel, n, rows),
            out_shape=jax.ShapeDtypeStruct((rows, _LANES), jnp.float32),
            scratch_shapes=[
                pltpu.VMEM((n - 1, rows, _LANES), jnp.float32),
                pltpu.VMEM((n - 1, rows, _LANES), jnp.float32),
                pltpu.SemaphoreType.DMA,
                pltpu.SemaphoreType.DMA((n - 1,)),
            ],
            compiler_params=pltpu.CompilerParams(collective_id=0),
            interpret=interpret,
        )
        return _shard_map(call, mesh)

    return fn, (x,)


# -- XLA's own collectives (the "XLA native" column) ---------------------------------
#
# The same data through the same harness: a jitted shard_map over the same
# mesh, taking the same sharded input, giving the same global output.


def native_right_permute(n: int):
    """`lax.ppermute` to the right neighbour (what `right_permute` computes)."""
    perm = [(i, (i + 1) % n) for i in range(n)]
    return _shard_map(lambda x: lax.ppermute(x, "x", perm), _mesh(n))


def native_all_gather(n: int):
    """`lax.all_gather` (tiled) of each device's block (what `all_gather` computes)."""
    return _shard_map(lambda x: lax.all_gather(x, "x", tiled=True), _mesh(n))


def native_reduce_scatter(n: int, rows: int):
    """`lax.psum_scatter` of each device's n chunks (what `reduce_scatter` computes)."""

    def body(x):
        return lax.psum_scatter(x.reshape(n, rows, -1), "x", scatter_dimension=0, tiled=False)

    return _shard_map(body, _mesh(n))
