"""More simulated cores than CPUs (this machine class has 2): cores that wait
on each other must all get to run, on any number of CPUs."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh, PartitionSpec as P

import mosaic_rt

pytestmark = pytest.mark.timeout(180)
TILE = (8, 128)


def _ring_call(devices, cores):
    def kernel(x_ref, o_ref, sem):
        # A ring over every (device, core): signal the next, wait for the
        # previous -- no core can finish before all have started.
        g = lax.axis_index("x") * cores + pl.program_id(0)
        nxt = lax.rem(g + 1, devices * cores)
        pl.semaphore_signal(sem, 1, device_id=(nxt // cores,), core_index=nxt % cores)
        pl.semaphore_wait(sem, 1)
        o_ref[...] = x_ref[...] + g.astype(jnp.float32)

    spec = pl.BlockSpec(TILE, lambda i: (i, 0))
    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((cores * TILE[0], TILE[1]), jnp.float32),
        grid=(cores,), in_specs=[spec], out_specs=spec,
        scratch_shapes=[pltpu.SemaphoreType.REGULAR],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
        interpret=mosaic_rt.InterpretParams(num_cores_or_threads=cores, wait_timeout=60))


@pytest.mark.parametrize("devices, cores", [(1, 8), (8, 4), (2, 16)])
def test_cores_waiting_on_each_other_all_run(devices, cores):
    mesh = Mesh(np.array(jax.devices()[:devices]), ("x",))
    f = jax.jit(jax.shard_map(_ring_call(devices, cores), mesh=mesh, in_specs=P("x"),
                              out_specs=P("x"), check_vma=False))
    x = jnp.zeros((devices * cores * TILE[0], TILE[1]), jnp.float32)
    out = np.asarray(f(x))
    want = np.repeat(np.arange(devices * cores, dtype=np.float32), TILE[0])[:, None]
    np.testing.assert_array_equal(out, np.broadcast_to(want, out.shape))


def test_core_map_with_eight_cores():
    if hasattr(pltpu, "TensorCoreMesh"):  # jax >= 0.11
        mesh = pltpu.TensorCoreMesh(axis_name="core", num_cores=8)
    else:
        mesh = pltpu.create_tensorcore_mesh("core", num_cores=8)

    @pl.kernel(out_type=jax.ShapeDtypeStruct((8, 128), jnp.float32), mesh=mesh,
               scratch_types=[pltpu.SemaphoreType.REGULAR],
               interpret=mosaic_rt.InterpretParams(wait_timeout=60))
    def run(o_hbm, sem):
        # Every core signals every core, then waits for all eight signals.
        for k in range(8):
            pl.semaphore_signal(sem, 1, core_index=k)
        pl.semaphore_wait(sem, 8)

    jax.block_until_ready(run())
