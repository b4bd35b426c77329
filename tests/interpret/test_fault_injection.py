"""Fault injection: a device (or core) fails at a random point of a ring
kernel while its peers are blocked in semaphore waits, DMA waits or a
barrier. Every device must end promptly with the root cause (IndexError
from an out-of-bounds read), never by its wait timeout, and the next launch
must compute the right answer with no reset.

The fault point (device, round, phase) is an operand, so each scenario
compiles once and every seed measures execution only. The default run tries
a few seeds per scenario; `-m slow` runs 20.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

N = 4  # devices
ROUNDS = 4
TILE = (8, 128)
# A missed wake-up shows as a run of WAIT_TIMEOUT; a failed launch once
# compiled ends in milliseconds. PROMPT sits far from both, so only the
# missed wake-up fails it, never a slow or loaded machine.
WAIT_TIMEOUT = 300.0
PROMPT = 60.0
PHASES = ("before_signal", "before_dma", "before_barrier")
SMEM = pl.BlockSpec(memory_space=pltpu.SMEM)
VMEM = pl.BlockSpec(memory_space=pltpu.VMEM)


def _ring_kernel(fault_ref, x_ref, o_ref, stage, send, recv, sem):
    """Each round: a full barrier, signal the right neighbour and wait for
    the left one, send a block to the right by DMA; a fault may strike
    before each of the three."""
    me = lax.axis_index("x")
    right = lax.rem(me + 1, N)
    barrier = pltpu.get_barrier_semaphore()

    def maybe_fail(r, phase):
        # An out-of-bounds read on the faulty device at its chosen point.
        hit = (fault_ref[0] == me) & (fault_ref[1] == r) & (fault_ref[2] == phase)
        start = jnp.where(hit | (fault_ref[3] == me) & (fault_ref[1] == r), 4, 0)
        stage[...] += x_ref[pl.ds(start, TILE[0]), :] * 0.0

    stage[...] = x_ref[...]

    def round_(r, carry):
        # The barrier first: every device is inside the kernel (its buffers
        # exist) before anyone writes into a neighbour's memory.
        maybe_fail(r, 2)
        for hop in range(1, N):
            pl.semaphore_signal(barrier, 1, device_id=(lax.rem(me + hop, N),))
        pl.semaphore_wait(barrier, N - 1)
        maybe_fail(r, 0)
        pl.semaphore_signal(sem, 1, device_id=(right,))
        pl.semaphore_wait(sem, 1)
        maybe_fail(r, 1)
        copy = pltpu.make_async_remote_copy(stage, o_ref, send, recv, device_id=(right,))
        copy.start()
        copy.wait()
        stage[...] = o_ref[...] + 1.0
        return carry

    lax.fori_loop(0, ROUNDS, round_, 0)


def _ring(params):
    call = pl.pallas_call(
        _ring_kernel,
        out_shape=jax.ShapeDtypeStruct(TILE, jnp.float32),
        in_specs=[SMEM, VMEM],
        out_specs=VMEM,
        scratch_shapes=[
            pltpu.VMEM(TILE, jnp.float32),
            pltpu.SemaphoreType.DMA,
            pltpu.SemaphoreType.DMA,
            pltpu.SemaphoreType.REGULAR,
        ],
        compiler_params=pltpu.CompilerParams(collective_id=0),
        interpret=params,
    )
    mesh = Mesh(np.array(jax.devices()[:N]), ("x",))
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(P(), P("x")), out_specs=P("x"), check_vma=False))
    x = jax.device_put(np.zeros((N * TILE[0], TILE[1]), np.float32), NamedSharding(mesh, P("x")))
    return lambda fault: np.asarray(jax.block_until_ready(fn(jnp.asarray(fault, jnp.int32), x)))


@pytest.fixture(scope="module")
def ring():
    run = _ring(mosaic_rt.InterpretParams(wait_timeout=WAIT_TIMEOUT, out_of_bounds_reads="raise"))
    run([-1, -1, -1, -1])  # compile outside the timed runs
    return run


def _expected():
    # No fault: each round moves the block one device right, then adds 1;
    # the output holds what arrived in the last round.
    return np.full((N * TILE[0], TILE[1]), float(ROUNDS - 1), np.float32)


def _check_fault(ring, fault):
    start = time.monotonic()
    with pytest.raises(IndexError, match="Out-of-bounds read"):
        with mosaic_rt.native_errors():
            ring(fault)
    elapsed = time.monotonic() - start
    assert elapsed < PROMPT, f"fault {fault}: peers ended after {elapsed:.1f}s"
    np.testing.assert_array_equal(ring([-1, -1, -1, -1]), _expected())


def _faults(seed):
    rng = np.random.default_rng(seed)
    device, round_, phase = rng.integers(N), rng.integers(ROUNDS), rng.integers(len(PHASES))
    second = -1 if rng.random() < 0.5 else (device + 1 + rng.integers(N - 1)) % N
    return [int(device), int(round_), int(phase), int(second)]


def test_no_fault_is_correct(ring):
    np.testing.assert_array_equal(ring([-1, -1, -1, -1]), _expected())


@pytest.mark.timeout(600)
@pytest.mark.parametrize("seed", range(4))
def test_random_fault_ends_every_device_promptly(ring, seed):
    _check_fault(ring, _faults(seed))


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("seed", range(4, 24))
def test_random_fault_ends_every_device_promptly_many_seeds(ring, seed):
    _check_fault(ring, _faults(seed))


@pytest.mark.timeout(600)
@pytest.mark.parametrize("phase", range(len(PHASES)))
def test_fault_on_every_device_at_once(ring, phase):
    # All devices fail in the same round (device N-1 via the "second" slot
    # is not needed: the first slot names one, the others by a full sweep).
    for device in range(N):
        _check_fault(ring, [device, 1, phase, (device + 2) % N])


# ------------------------------------------------------------ several cores

CORES = 4


def _cores_kernel(fault_ref, x_ref, o_ref, sem):
    # Grid over the cores ("parallel"): each core signals the next core of
    # the device and waits for the previous one, ROUNDS times.
    c = pl.program_id(0)

    def round_(r, carry):
        hit = (fault_ref[0] == c) & (fault_ref[1] == r)
        start = jnp.where(hit, 4, 0)
        carry = carry + x_ref[pl.ds(start, TILE[0]), :] * 0.0
        pl.semaphore_signal(sem, 1, core_index=lax.rem(c + 1, CORES))
        pl.semaphore_wait(sem, 1)
        return carry + 1.0

    o_ref[...] = lax.fori_loop(0, ROUNDS, round_, jnp.zeros(TILE, jnp.float32))


@pytest.fixture(scope="module")
def cores():
    call = pl.pallas_call(
        _cores_kernel,
        out_shape=jax.ShapeDtypeStruct((CORES * TILE[0], TILE[1]), jnp.float32),
        grid=(CORES,),
        in_specs=[SMEM, pl.BlockSpec(TILE, lambda i: (0, 0))],
        out_specs=pl.BlockSpec(TILE, lambda i: (i, 0)),
        scratch_shapes=[pltpu.SemaphoreType.REGULAR],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
        interpret=mosaic_rt.InterpretParams(
            num_cores_or_threads=CORES, wait_timeout=WAIT_TIMEOUT, out_of_bounds_reads="raise"
        ),
    )
    fn = jax.jit(call)
    x = jnp.zeros(TILE, jnp.float32)

    def run(fault):
        return np.asarray(jax.block_until_ready(fn(jnp.asarray(fault, jnp.int32), x)))

    run([-1, -1])  # the core programs compile at their first run: not timed
    return run


@pytest.mark.timeout(600)
@pytest.mark.parametrize("seed", range(4))
def test_random_core_fault_ends_every_core_promptly(cores, seed):
    rng = np.random.default_rng(100 + seed)
    fault = [int(rng.integers(CORES)), int(rng.integers(ROUNDS))]
    start = time.monotonic()
    with pytest.raises(IndexError, match="Out-of-bounds read"):
        with mosaic_rt.native_errors():
            cores(fault)
    assert time.monotonic() - start < PROMPT
    np.testing.assert_array_equal(cores([-1, -1]), np.full((CORES * TILE[0], TILE[1]), float(ROUNDS)))


# --------------------------------------------------- a user host callback


class UserCallbackError(RuntimeError):
    pass


def _callback_ring():
    def check(me, round_, fault):
        if int(me) == int(fault[0]) and int(round_) == int(fault[1]):
            raise UserCallbackError(f"user callback failed on device {int(me)}")

    def kernel(fault_ref, x_ref, o_ref, sem):
        me = lax.axis_index("x")
        barrier = pltpu.get_barrier_semaphore()

        def round_(r, carry):
            # The callback may raise on one device while the others wait in
            # the barrier for its signal.
            jax.debug.callback(check, me, r, jnp.stack([fault_ref[0], fault_ref[1]]))
            for hop in range(1, N):
                pl.semaphore_signal(barrier, 1, device_id=(lax.rem(me + hop, N),))
            pl.semaphore_wait(barrier, N - 1)
            return carry + 1.0

        o_ref[...] = x_ref[...] + lax.fori_loop(0, ROUNDS, round_, 0.0)

    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(TILE, jnp.float32),
        in_specs=[SMEM, VMEM],
        out_specs=VMEM,
        scratch_shapes=[pltpu.SemaphoreType.REGULAR],
        compiler_params=pltpu.CompilerParams(collective_id=0),
        interpret=mosaic_rt.InterpretParams(wait_timeout=WAIT_TIMEOUT, out_of_bounds_reads="raise"),
    )
    mesh = Mesh(np.array(jax.devices()[:N]), ("x",))
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(P(), P("x")), out_specs=P("x"), check_vma=False))
    x = jax.device_put(np.zeros((N * TILE[0], TILE[1]), np.float32), NamedSharding(mesh, P("x")))

    def run(fault):
        return np.asarray(jax.block_until_ready(fn(jnp.asarray(fault, jnp.int32), x)))

    run([-1, -1])
    return run


@pytest.fixture(scope="module")
def callback_ring():
    return _callback_ring()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("seed", range(3))
def test_a_failing_user_callback_ends_every_device_with_its_exception(callback_ring, seed):
    rng = np.random.default_rng(200 + seed)
    fault = [int(rng.integers(N)), int(rng.integers(ROUNDS))]
    start = time.monotonic()
    with pytest.raises(UserCallbackError, match=f"user callback failed on device {fault[0]}"):
        with mosaic_rt.native_errors():
            callback_ring(fault)
    assert time.monotonic() - start < PROMPT
    np.testing.assert_array_equal(callback_ring([-1, -1]), np.full((N * TILE[0], TILE[1]), float(ROUNDS)))
