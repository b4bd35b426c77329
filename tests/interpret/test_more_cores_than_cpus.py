"""More simulated cores than CPUs (this machine class has 2): cores that wait
on each other must all get to run, on any number of CPUs."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from core_mesh import core_mesh
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

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
        kernel,
        out_shape=jax.ShapeDtypeStruct((cores * TILE[0], TILE[1]), jnp.float32),
        grid=(cores,),
        in_specs=[spec],
        out_specs=spec,
        scratch_shapes=[pltpu.SemaphoreType.REGULAR],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
        interpret=mosaic_rt.InterpretParams(num_cores_or_threads=cores, wait_timeout=60),
    )


@pytest.mark.parametrize("devices, cores", [(1, 8), (8, 4), (2, 16)])
def test_cores_waiting_on_each_other_all_run(devices, cores):
    mesh = Mesh(np.array(jax.devices()[:devices]), ("x",))
    f = jax.jit(
        jax.shard_map(_ring_call(devices, cores), mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    )
    x = jnp.zeros((devices * cores * TILE[0], TILE[1]), jnp.float32)
    out = np.asarray(f(x))
    want = np.repeat(np.arange(devices * cores, dtype=np.float32), TILE[0])[:, None]
    np.testing.assert_array_equal(out, np.broadcast_to(want, out.shape))


def test_core_map_with_eight_cores():
    if hasattr(pltpu, "TensorCoreMesh"):  # jax >= 0.11
        mesh = pltpu.TensorCoreMesh(axis_name="core", num_cores=8)
    else:
        mesh = core_mesh(8)

    @pl.kernel(
        out_type=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        mesh=mesh,
        scratch_types=[pltpu.SemaphoreType.REGULAR],
        interpret=mosaic_rt.InterpretParams(wait_timeout=60),
    )
    def run(o_hbm, sem):
        # Every core signals every core, then waits for all eight signals.
        for k in range(8):
            pl.semaphore_signal(sem, 1, core_index=k)
        pl.semaphore_wait(sem, 8)

    jax.block_until_ready(run())


def test_core_map_takes_the_native_grid_loop_and_matches_stock(monkeypatch):
    """core_map's fixed split of its cores is static, so its grid loop is
    native (an XLA loop with per-core bounds costs three scalar fusions to
    compile); results stay stock's."""
    from mosaic_rt.interpret.launch import grid_loop

    loops = []
    real_plan = grid_loop.plan
    monkeypatch.setattr(grid_loop, "plan", lambda *a, **k: loops.append(real_plan(*a, **k)) or loops[-1])
    if hasattr(pltpu, "TensorCoreMesh"):  # jax >= 0.11
        mesh = pltpu.TensorCoreMesh(axis_name="core", num_cores=2)
    else:
        mesh = core_mesh(2)
    x = jnp.arange(2 * 8 * 128, dtype=jnp.float32).reshape(2, 8, 128)

    def run(params):
        @pl.kernel(
            out_type=jax.ShapeDtypeStruct((4, 8, 128), jnp.float32),
            mesh=mesh,
            scratch_types=[pltpu.SemaphoreType.REGULAR, pltpu.SemaphoreType.DMA(())],
            interpret=params,
        )
        def swap(x_hbm, o_hbm, sem, copy_sem):
            c = lax.axis_index("core")
            pltpu.async_copy(x_hbm.at[c], o_hbm.at[2 + c], copy_sem).wait()
            pl.semaphore_signal(sem, 1, core_index=1 - c)
            pl.semaphore_wait(sem, 1)
            pltpu.async_copy(o_hbm.at[3 - c], o_hbm.at[c], copy_sem).wait()

        return np.asarray(jax.jit(swap)(x))

    ours = run(mosaic_rt.InterpretParams(wait_timeout=60))
    assert loops and all(loop.native is not None for loop in loops)
    stock = run(pltpu.InterpretParams())
    assert ours.tobytes() == stock.tobytes()
    np.testing.assert_array_equal(ours, np.concatenate([x[::-1], x]))
