"""The barrier semaphore of a kernel that names no collective_id.

The TPU lowering accepts ``get_barrier_semaphore()`` without
``CompilerParams(collective_id=...)`` (the TPU compiler allocates an id for
the kernel; jax 0.11.2+ may name it with ``tag=``), so a kernel written that
way runs here too: within one launch every device's barrier is the launch's
one barrier semaphore, whatever id names it.
"""

from __future__ import annotations

import jax
import mosaic_rt
import numpy as np
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

N = 4
ROWS = 8
_ANY = pl.BlockSpec(memory_space=pl.ANY)


def _ring(collective_id, tag):
    """Each device signals both neighbours' barrier, waits for both, then
    sends its block to its right neighbour."""

    def kernel(x_ref, o_ref, send, recv):
        me = lax.axis_index("x")
        left, right = lax.rem(me + N - 1, N), lax.rem(me + 1, N)
        barrier = pltpu.get_barrier_semaphore() if tag is None else pltpu.get_barrier_semaphore(tag=tag)
        pl.semaphore_signal(barrier, device_id=(left,))
        pl.semaphore_signal(barrier, device_id=(right,))
        pl.semaphore_wait(barrier, 2)
        pltpu.make_async_remote_copy(x_ref, o_ref, send, recv, device_id=(right,)).start()
        pltpu.make_async_remote_copy(x_ref, o_ref, send, recv, device_id=(right,)).wait()

    def body(x):
        params = None if collective_id is None else pltpu.CompilerParams(collective_id=collective_id)
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            in_specs=[_ANY],
            out_specs=_ANY,
            scratch_shapes=[pltpu.SemaphoreType.DMA(()), pltpu.SemaphoreType.DMA(())],
            compiler_params=params,
            interpret=mosaic_rt.InterpretParams(wait_timeout=60.0),
        )(x)

    mesh = Mesh(np.array(jax.devices()[:N]), ("x",))
    spec = P("x")

    def run(x):
        x = jax.device_put(x, NamedSharding(mesh, spec))
        return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False))(x)

    return run


def _x():
    return np.arange(N * ROWS * 128, dtype=np.float32).reshape(N * ROWS, 128)


@pytest.mark.parametrize("collective_id", [None, 0, 3])
def test_a_ring_barrier_runs_with_or_without_a_collective_id(collective_id):
    x = _x()
    with mosaic_rt.native_errors():
        got = np.asarray(_ring(collective_id, None)(x))
    np.testing.assert_array_equal(got, np.roll(x, ROWS, axis=0))


def test_a_tagged_barrier_runs_without_a_collective_id():
    if "tag" not in pltpu.get_barrier_semaphore.__code__.co_varnames:
        pytest.skip("get_barrier_semaphore(tag=) is jax >= 0.11.2")
    x = _x()
    with mosaic_rt.native_errors():
        got = np.asarray(_ring(None, "ring")(x))
    np.testing.assert_array_equal(got, np.roll(x, ROWS, axis=0))


def test_the_auto_id_kernel_runs_twice_with_the_barrier_back_at_zero():
    # A barrier left non-zero by the first launch would let the second
    # launch's waits pass early or be reported as a leak.
    run = _ring(None, None)
    x = _x()
    with mosaic_rt.native_errors():
        first = np.asarray(run(x))
        second = np.asarray(run(first))
    np.testing.assert_array_equal(second, np.roll(x, 2 * ROWS, axis=0))
