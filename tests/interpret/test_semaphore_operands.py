"""Semaphores as pallas_call operands and results: a DMA started in one
kernel and waited in another, its semaphore returned by the first and passed
to the second (what JAX's tpu_pallas_async_test does on a TPU).

The TPU's meaning decides (stock interpret mode cannot run these: it fills
a semaphore result with NaN): the second kernel's wait sees the bytes of
the first kernel's DMA, and the data has landed. Counts carry across
kernels (regular semaphores too); a wait for more than was carried is a
deadlock and an unconsumed count a leak of the kernel that received it.
Both DMA modes, one device and a ring of four.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

pytestmark = pytest.mark.timeout(240)

MODES = ["tpu", "eager", "on_wait"]
SEM = pltpu.SEMAPHORE
ANY = pl.ANY


def _params(mode, **kw):
    return mosaic_rt.InterpretParams(dma_execution_mode=mode, **kw)


def _copy_start(x, params, *, index=None):
    """Kernel 1: starts x (or x[index]) -> out; returns x, out and the DMA semaphore."""

    def kernel(x_ref, aliased_x_ref, o_ref, sem):
        del aliased_x_ref
        src = x_ref if index is None else x_ref.at[index]
        pltpu.make_async_copy(src, o_ref, sem).start()

    shape = x.shape if index is None else x.shape[1:]
    return pl.pallas_call(
        kernel,
        out_shape=(
            jax.ShapeDtypeStruct(x.shape, x.dtype),
            jax.ShapeDtypeStruct(shape, x.dtype),
            pltpu.SemaphoreType.DMA(()),
        ),
        in_specs=[pl.BlockSpec(memory_space=ANY)],
        out_specs=(pl.BlockSpec(memory_space=ANY), pl.BlockSpec(memory_space=ANY), pl.BlockSpec(memory_space=SEM)),
        input_output_aliases={0: 0},
        interpret=params,
    )(x)


def _copy_done(x, out, sem, params, *, index=None):
    """Kernel 2: waits for kernel 1's DMA; returns out (aliased)."""

    def kernel(x_ref, o_ref, sem, aliased_o_ref):
        del aliased_o_ref
        src = x_ref if index is None else x_ref.at[index]
        pltpu.make_async_copy(src, o_ref, sem).wait()

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(out.shape, out.dtype),
        in_specs=[pl.BlockSpec(memory_space=ANY), pl.BlockSpec(memory_space=ANY), pl.BlockSpec(memory_space=SEM)],
        out_specs=pl.BlockSpec(memory_space=ANY),
        input_output_aliases={1: 0},
        interpret=params,
    )(x, out, sem)


def _x(shape=(8, 128), seed=0):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape, dtype=np.float32))


@pytest.mark.parametrize("mode", MODES)
def test_copy_started_in_one_kernel_and_waited_in_another(mode):
    params = _params(mode)

    @jax.jit
    def f(x):
        x, out, sem = _copy_start(x, params)
        return _copy_done(x, out, sem, params)

    x = _x()
    np.testing.assert_array_equal(f(x), x)


@pytest.mark.parametrize("mode", MODES)
def test_two_copies_in_flight_waited_in_reverse_order(mode):
    params = _params(mode)

    @jax.jit
    def f(x):
        x, out1, sem1 = _copy_start(x, params, index=1)
        x, out3, sem3 = _copy_start(x, params, index=3)
        y3 = _copy_done(x, out3, sem3, params, index=3)
        y1 = _copy_done(x, out1, sem1, params, index=1)
        return y1, y3

    x = _x((4, 8, 128), seed=1)
    y1, y3 = f(x)
    np.testing.assert_array_equal(y1, x[1])
    np.testing.assert_array_equal(y3, x[3])


@pytest.mark.parametrize("mode", MODES)
def test_copies_carried_through_a_loop(mode):
    """Each iteration's copy is waited in the next iteration (a semaphore
    in a fori_loop carry)."""
    params = _params(mode)

    @jax.jit
    def f(x):
        x, out, sem = _copy_start(x, params)

        def body(_, carry):
            x, out, sem = carry
            y = _copy_done(x, out, sem, params)
            return _copy_start(y + 1.0, params)

        x, out, sem = jax.lax.fori_loop(0, 3, body, (x, out, sem))
        return _copy_done(x, out, sem, params)

    x = _x(seed=2)
    np.testing.assert_array_equal(f(x), np.asarray(x) + np.float32(1.0) + np.float32(1.0) + np.float32(1.0))


def _signal(n, params, shape=()):
    """A kernel returning regular semaphores, each signalled n times."""

    def kernel(sems):
        for idx in np.ndindex(*shape):
            pl.semaphore_signal(sems.at[idx] if shape else sems, n)

    return pl.pallas_call(
        kernel,
        out_shape=pltpu.SemaphoreType.REGULAR(shape),
        out_specs=pl.BlockSpec(memory_space=SEM),
        interpret=params,
    )()


def _wait_then_read(sems, value, params):
    """Waits `value` on each semaphore, then returns what is left of each count."""
    shape = sems.shape

    def kernel(sems, o_ref, aliased):
        del aliased
        for k, idx in enumerate(np.ndindex(*shape)):
            sem = sems.at[idx] if shape else sems
            pl.semaphore_wait(sem, value)
            o_ref[k] = pl.semaphore_read(sem)

    n = max(int(np.prod(shape)), 1)
    return pl.pallas_call(
        kernel,
        out_shape=(jax.ShapeDtypeStruct((n,), jnp.int32), pltpu.SemaphoreType.REGULAR(shape)),
        in_specs=[pl.BlockSpec(memory_space=SEM)],
        out_specs=(pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec(memory_space=SEM)),
        input_output_aliases={0: 1},
        interpret=params,
    )(sems)


def test_regular_semaphore_counts_carry_across_kernels():
    params = _params("eager", on_semaphore_leak="raise")

    @jax.jit
    def f():
        sems = _signal(5, params, shape=(3,))
        left, sems = _wait_then_read(sems, 2, params)
        left2, sems = _wait_then_read(sems, 3, params)
        return left, left2

    left, left2 = f()
    np.testing.assert_array_equal(left, [3, 3, 3])
    np.testing.assert_array_equal(left2, [0, 0, 0])


def test_wait_for_more_than_was_carried_is_a_deadlock():
    params = _params("eager", wait_timeout=30.0)

    @jax.jit
    def f():
        sem = _signal(2, params)
        left, _ = _wait_then_read(sem, 3, params)
        return left

    with pytest.raises(mosaic_rt.DeadlockError, match=r"waits on REGULAR semaphore \d+ for 3 \(count is 2\)"):
        with mosaic_rt.native_errors():
            jax.block_until_ready(f())


def test_carried_count_left_unconsumed_is_a_leak_of_the_receiving_kernel():
    params = _params("eager", on_semaphore_leak="raise")

    def consume_one(sem):
        def kernel(sem, o_ref):
            pl.semaphore_wait(sem, 1)
            o_ref[0] = 1

        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((1,), jnp.int32),
            in_specs=[pl.BlockSpec(memory_space=SEM)],
            out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
            interpret=params,
        )(sem)

    @jax.jit
    def f():
        return consume_one(_signal(3, params))

    with pytest.raises(mosaic_rt.SemaphoreLeakError, match=r"REGULAR semaphore \d+ .* has count 2"):
        with mosaic_rt.native_errors():
            jax.block_until_ready(f())


# ---------------------------------------------------------------- remote

N = 4


def _mesh():
    if len(jax.devices()) < N:
        pytest.skip(f"needs {N} devices")
    return jax.sharding.Mesh(np.array(jax.devices()[:N]), ("x",))


def _remote_start(x, params):
    """Sends x to the right neighbour's out; returns x, out, send and recv semaphores."""

    def kernel(x_ref, aliased_x_ref, o_ref, send, recv):
        del aliased_x_ref
        me = jax.lax.axis_index("x")
        right = jax.lax.rem(me + 1, N)
        left = jax.lax.rem(me + N - 1, N)
        barrier = pltpu.get_barrier_semaphore()
        pl.semaphore_signal(barrier, device_id=left)
        pl.semaphore_wait(barrier, 1)
        pltpu.make_async_remote_copy(x_ref, o_ref, send, recv, device_id=right).start()

    return pl.pallas_call(
        kernel,
        out_shape=(
            jax.ShapeDtypeStruct(x.shape, x.dtype),
            jax.ShapeDtypeStruct(x.shape, x.dtype),
            pltpu.SemaphoreType.DMA(()),
            pltpu.SemaphoreType.DMA(()),
        ),
        in_specs=[pl.BlockSpec(memory_space=ANY)],
        out_specs=(
            pl.BlockSpec(memory_space=ANY),
            pl.BlockSpec(memory_space=ANY),
            pl.BlockSpec(memory_space=SEM),
            pl.BlockSpec(memory_space=SEM),
        ),
        input_output_aliases={0: 0},
        compiler_params=pltpu.CompilerParams(collective_id=0, has_side_effects=True),
        interpret=params,
    )(x)


def _send_done(x, send, params):
    def kernel(x_ref, send, aliased):
        del aliased
        pltpu.make_async_copy(x_ref, x_ref, send).wait()

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=ANY), pl.BlockSpec(memory_space=SEM)],
        out_specs=pl.BlockSpec(memory_space=ANY),
        input_output_aliases={0: 0},
        interpret=params,
    )(x, send)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("steps", [1, 3])
def test_remote_copy_started_in_one_kernel_and_waited_in_others(mode, steps):
    params = _params(mode)
    mesh = _mesh()

    @jax.jit
    @functools.partial(jax.shard_map, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    def f(x):
        for _ in range(steps):
            x, out, send, recv = _remote_start(x, params)
            x = _send_done(x, send, params)
            x = _copy_done(x, out, recv, params)
        return x

    x = _x((N * 8, 128), seed=3)
    expected = np.roll(np.asarray(x).reshape(N, 8, 128), steps, axis=0).reshape(N * 8, 128)
    np.testing.assert_array_equal(f(x), expected)


def test_a_dma_into_semaphore_memory_is_refused_by_name():
    # jax's test_kernel_with_output_memory_space_SEMAPHORE lowers such a
    # kernel (an int32 result in SEMAPHORE memory filled by a copy). The
    # interpreter keeps SEMAPHORE memory as semaphores, not bytes: the
    # copy is refused with a NotImplementedError naming it (it failed
    # inside XLA with "operand 6 must have rank 0").
    from core_mesh import core_mesh

    x = jnp.arange(8 * 128, dtype=jnp.int32).reshape(8, 128)
    kernel = pl.kernel(
        lambda x_ref, o_ref: pltpu.sync_copy(x_ref, o_ref),
        out_type=SEM(x.shape, x.dtype),
        mesh=core_mesh(1),
        interpret=_params("tpu"),
    )
    with pytest.raises(NotImplementedError, match="a DMA into an array in SEMAPHORE memory"):
        jax.jit(kernel)(x)
