"""Device ids and core indices of remote signals and DMAs, against stock.

Stock indexes its per-core tables with the global core id
`device * cores + core`, so a signal to device -1 (or core -1) wraps to the
last one; a remote DMA to device -1 fails (stock: a KeyError on the buffer
table). Ours does the same, and every bad id is a ValueError naming the id
and the valid range instead of an assertion or a misleading message.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

pytestmark = pytest.mark.timeout(120)

N = 4
TILE = (8, 128)
LOGICAL, MESH = pl.DeviceIdType.LOGICAL, pl.DeviceIdType.MESH


def _ring(kernel, params, scratch, space=pltpu.VMEM):
    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(TILE, jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=space)],
        out_specs=pl.BlockSpec(memory_space=space),
        scratch_shapes=scratch,
        interpret=params,
    )
    mesh = Mesh(np.array(jax.devices()[:N]), ("x",))
    f = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    x = jnp.repeat(jnp.arange(N, dtype=jnp.float32), TILE[0] * TILE[1]).reshape(-1, TILE[1])
    with mosaic_rt.native_errors():
        return np.asarray(f(x))


def _stock():
    return pltpu.InterpretParams()


def _ours():
    return mosaic_rt.InterpretParams(wait_timeout=20)


@pytest.mark.parametrize("form", ["logical", "mesh"])
def test_signal_to_device_minus_one_wraps_to_the_last_device_like_stock(form):
    def kernel(x_ref, o_ref, sem):
        me = lax.axis_index("x")
        if form == "logical":
            pl.semaphore_signal(sem, me + 1, device_id=me - 1, device_id_type=LOGICAL)
        else:
            pl.semaphore_signal(sem, me + 1, device_id=(me - 1,), device_id_type=MESH)
        # The signal comes from the right neighbour (device 0's from device 1,
        # the last device's from device 0 through the wrap).
        pl.semaphore_wait(sem, lax.rem(me + 1, N) + 1)
        o_ref[...] = x_ref[...] + me.astype(jnp.float32)

    stock = _ring(kernel, _stock(), [pltpu.SemaphoreType.REGULAR])
    ours = _ring(kernel, _ours(), [pltpu.SemaphoreType.REGULAR])
    np.testing.assert_array_equal(ours, stock)
    np.testing.assert_array_equal(ours[:: TILE[0], 0], 2 * np.arange(N))


def test_signal_to_core_minus_one_wraps_like_stock():
    cores = 2

    def kernel(x_ref, o_ref, sem):
        c = pl.program_id(0)
        # Core 0 signals core -1 (the last core: global id wraps on one
        # device), core 1 signals core 0.
        pl.semaphore_signal(sem, 1, core_index=c - 1)
        pl.semaphore_wait(sem, 1)
        o_ref[...] = x_ref[...] + c.astype(jnp.float32)

    def run(params):
        spec = pl.BlockSpec(TILE, lambda i: (i, 0))
        return np.asarray(
            pl.pallas_call(
                kernel,
                out_shape=jax.ShapeDtypeStruct((cores * TILE[0], TILE[1]), jnp.float32),
                grid=(cores,),
                in_specs=[spec],
                out_specs=spec,
                scratch_shapes=[pltpu.SemaphoreType.REGULAR],
                compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
                interpret=params,
            )(jnp.zeros((cores * TILE[0], TILE[1]), jnp.float32))
        )

    stock = run(pltpu.InterpretParams(num_cores_or_threads=cores))
    ours = run(mosaic_rt.InterpretParams(num_cores_or_threads=cores, wait_timeout=20))
    np.testing.assert_array_equal(ours, stock)


def test_a_traced_signal_target_is_wrapped_by_the_signal_itself():
    """No `wrap_target` call of its own: the signal op applies the wrap."""

    def kernel(x_ref, o_ref, sem):
        me = lax.axis_index("x")
        pl.semaphore_signal(sem, 1, device_id=(me - 1,), device_id_type=MESH)
        pl.semaphore_wait(sem, 1)
        o_ref[...] = x_ref[...]

    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(TILE, jnp.float32),
        scratch_shapes=[pltpu.SemaphoreType.REGULAR],
        interpret=_ours(),
    )
    mesh = Mesh(np.array(jax.devices()[:N]), ("x",))
    f = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    text = f.lower(jnp.zeros((N * TILE[0], TILE[1]), jnp.float32)).as_text()
    assert "mosaic_rt_wrap_target" not in text
    assert "wrap_negative = 1" in text


def test_a_traced_signal_target_below_the_wrap_range_names_the_id():
    def kernel(x_ref, o_ref, sem):
        me = lax.axis_index("x")
        # -N - 1 on every device: past what the wrap reaches.
        pl.semaphore_signal(sem, 1, device_id=me * 0 - N - 1, device_id_type=LOGICAL)
        o_ref[...] = x_ref[...]

    with pytest.raises(
        ValueError,
        match=rf"target device id {-N - 1} out of range: valid ids"
        rf" are 0 to {N - 1}",
    ):
        _ring(kernel, _ours(), [pltpu.SemaphoreType.REGULAR])


def test_remote_copy_to_device_minus_one_names_the_id_and_the_range():
    def kernel(x_ref, o_ref, send, recv):
        me = lax.axis_index("x")
        copy = pltpu.make_async_remote_copy(x_ref, o_ref, send, recv, device_id=(me - 1,), device_id_type=MESH)
        copy.start()
        copy.wait()

    with pytest.raises(
        ValueError,
        match=r"destination device id -1 out of range: valid ids are"
        r" 0 to 3 \(4 in the launch\)",
    ):
        _ring(kernel, _ours(), [pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA], pl.ANY)


def test_signal_to_a_device_past_the_end_names_the_id_and_the_range():
    def kernel(x_ref, o_ref, sem):
        pl.semaphore_signal(sem, 1, device_id=N + 5, device_id_type=LOGICAL)
        o_ref[...] = x_ref[...]

    with pytest.raises(
        ValueError,
        match=rf"device id {N + 5} out of range: .*valid ids"
        rf" 0 to {N - 1}",
    ):
        _ring(kernel, _ours(), [pltpu.SemaphoreType.REGULAR])


def test_mesh_device_id_of_the_wrong_arity_is_a_value_error():
    def kernel(x_ref, o_ref, sem):
        me = lax.axis_index("x")
        pl.semaphore_signal(sem, 1, device_id=(me, 0), device_id_type=MESH)
        pl.semaphore_wait(sem, 1)
        o_ref[...] = x_ref[...]

    with pytest.raises(
        ValueError,
        match=r"A MESH device_id needs one coordinate per mesh axis"
        r" \['x'\] \(1\), got 2",
    ):
        _ring(kernel, _ours(), [pltpu.SemaphoreType.REGULAR])
