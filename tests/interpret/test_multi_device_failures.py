"""Failures inside multi-device / multi-core kernels (ours only).

A core that raises must end every other core's blocking wait, the user must
see the original error (its type and message under `mosaic_rt.native_errors()`,
quoted inside a `jax.errors.JaxRuntimeError` without it), and the next launch
must work without any reset. A wait nothing can ever satisfy must end with
`mosaic_rt.WaitTimeout` after the params' `wait_timeout`.

Every test has a pytest-timeout and every kernel a short `wait_timeout`, so a
regression fails instead of hanging.
"""

from __future__ import annotations

import dataclasses
import re
import time

import jax
import jax.numpy as jnp
import mosaic_rt  # a broken build fails this suite at collection, never skips it
import numpy as np
import pytest
from core_mesh import core_mesh
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from kernels.multi_device import CASES_BY_NAME

_F32 = jnp.float32
_TILE = (8, 128)
_MESH = pl.DeviceIdType.MESH
_VMEM = pl.BlockSpec(memory_space=pltpu.VMEM)
_ANY = pl.BlockSpec(memory_space=pl.ANY)
# Waits that a failure should end are bounded by this, so a missing wake-up
# shows up as WaitTimeout (a wrong error type), never as a hang.
# A last resort far beyond any run's length on a loaded machine: a failure
# must wake the peers itself (their timeouts would end the test otherwise).
_WAIT_TIMEOUT = 240.0
_OOB = "Out-of-bounds read"


def _params(**knobs):
    # The failures are out-of-bounds loads: stock's bounds check, not the TPU's unchecked loads.
    params = mosaic_rt.InterpretParams(wait_timeout=_WAIT_TIMEOUT, out_of_bounds_reads="raise")
    return dataclasses.replace(params, **knobs)


def _run_on_ring(call, n, *args):
    mesh = Mesh(np.array(jax.devices()[:n]), ("x",))
    mapped = jax.shard_map(call, mesh=mesh, in_specs=tuple(P("x") for _ in args), out_specs=P("x"), check_vma=False)
    placed = [jax.device_put(a, NamedSharding(mesh, P("x"))) for a in args]
    return np.asarray(jax.block_until_ready(jax.jit(mapped)(*placed)))


def _tiles(n):
    return np.arange(n * _TILE[0] * _TILE[1], dtype=np.float32).reshape(-1, _TILE[1])


def _read_rows(x_ref, start):
    """Rows start..start+7 of x_ref: out of bounds when start > 0 (8-row ref)."""
    return x_ref[pl.ds(start, _TILE[0]), :]


def _bad_start(failing_device):
    """4 on `failing_device` (rows 4..11 of 8: out of bounds), 0 elsewhere."""
    return jnp.where(lax.axis_index("x") == failing_device, 4, 0)


def _full_barrier(n):
    me = lax.axis_index("x")
    barrier = pltpu.get_barrier_semaphore()
    for hop in range(1, n):
        pl.semaphore_signal(barrier, 1, device_id=(lax.rem(me + hop, n),), device_id_type=_MESH)
    pl.semaphore_wait(barrier, n - 1)


def _oob_before_barrier(params, n=4, failing_device=1):
    # Device `failing_device` reads out of bounds before the barrier; the
    # others block in the barrier waiting for its signal.
    def kernel(x_ref, o_ref):
        o_ref[...] = _read_rows(x_ref, _bad_start(failing_device))
        _full_barrier(n)

    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(_TILE, _F32),
        in_specs=[_VMEM],
        out_specs=_VMEM,
        compiler_params=pltpu.CompilerParams(collective_id=0),
        interpret=params,
    )
    return _run_on_ring(call, n, _tiles(n))


def _oob_while_peers_wait_on_dma(params, n=4, failing_device=0):
    # Every device but `failing_device` sends its block to the right and
    # waits for the block from its left; the failing device raises before
    # starting its DMA, so its right neighbour's receive can never finish
    # (and the others are all stuck in DMA waits or the barrier).
    def kernel(x_ref, o_ref, stage, send_sem, recv_sem):
        me = lax.axis_index("x")
        _full_barrier(n)
        stage[...] = _read_rows(x_ref, _bad_start(failing_device))
        copy = pltpu.make_async_remote_copy(
            stage, o_ref, send_sem, recv_sem, device_id=(lax.rem(me + 1, n),), device_id_type=_MESH
        )
        copy.start()
        copy.wait()

    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(_TILE, _F32),
        in_specs=[_VMEM],
        out_specs=_VMEM,
        scratch_shapes=[pltpu.VMEM(_TILE, _F32), pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
        compiler_params=pltpu.CompilerParams(collective_id=0),
        interpret=params,
    )
    return _run_on_ring(call, n, _tiles(n))


def _oob_inside_core_map(params, n=2, cores=2):
    # Core 1 of every device reads out of bounds; core 0 waits for a signal
    # from core 1 that never comes.
    mesh = core_mesh(cores)

    def per_device(b):
        @pl.kernel(
            out_type=jax.ShapeDtypeStruct((cores, *_TILE), _F32),
            mesh=mesh,
            scratch_types=[pltpu.VMEM((1, 128), _F32)],
            interpret=params,
        )
        def run(x_hbm, o_hbm, row):
            c = lax.axis_index("core")

            def body(sem):
                # Row 8 of an 8-row block exists only on core 0's side.
                pltpu.sync_copy(x_hbm.at[0, pl.ds(c * 8, 1)], row)
                pl.semaphore_signal(sem, 1, core_index=1 - c)
                pl.semaphore_wait(sem, 1)
                pltpu.sync_copy(row, o_hbm.at[c, pl.ds(0, 1)])

            pl.run_scoped(body, pltpu.SemaphoreType.REGULAR)

        return run(b.reshape(cores, *_TILE)).reshape(-1, _TILE[1])

    return _run_on_ring(per_device, n, _tiles(n * cores))


def _assert_next_launch_works():
    # No reset_tpu_interpret_mode_state() or anything like it: a failed
    # launch must leave nothing behind.
    for name in ("right_permute", "barrier_only"):
        case = CASES_BY_NAME[name]
        out = case.fn(_params(), *case.args)
        np.testing.assert_array_equal(np.asarray(out), case.reference(*case.args))


_FAILING_KERNELS = {
    "oob_before_barrier": _oob_before_barrier,
    "oob_while_peers_wait_on_dma": _oob_while_peers_wait_on_dma,
    "oob_inside_core_map": _oob_inside_core_map,
}


def _run_failing(name, params):
    try:
        return _FAILING_KERNELS[name](params)
    except NotImplementedError as exc:
        if name == "oob_inside_core_map" and "several cores per device" in str(exc):
            pytest.skip(str(exc))
        raise


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", sorted(_FAILING_KERNELS))
def test_failure_ends_every_wait_with_the_original_error(name):
    start = time.monotonic()
    with pytest.raises(IndexError, match=_OOB) as info:
        with mosaic_rt.native_errors():
            _run_failing(name, _params())
    elapsed = time.monotonic() - start
    # The peers were woken by the failure, not by their (minutes long) wait
    # timeout: a bound no slow machine reaches.
    assert elapsed < _WAIT_TIMEOUT, f"took {elapsed:.1f}s: the peers ran into their timeout"
    assert not isinstance(info.value, mosaic_rt.KernelAborted)
    _assert_next_launch_works()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", sorted(_FAILING_KERNELS))
def test_failure_without_native_errors_is_a_jax_runtime_error(name):
    with pytest.raises(jax.errors.JaxRuntimeError) as info:
        _run_failing(name, _params())
    text = str(info.value)
    assert "IndexError" in text and _OOB in text, text
    _assert_next_launch_works()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("dma_mode", ["eager", "on_wait"])
def test_failures_in_both_dma_modes(dma_mode):
    with pytest.raises(IndexError, match=_OOB) as info:
        with mosaic_rt.native_errors():
            _oob_while_peers_wait_on_dma(_params(dma_execution_mode=dma_mode))
    # Where in the kernel: the failing op's source line, as a note (the
    # message stays stock's).
    assert "test_multi_device_failures.py:" in info.value.site, info.value.site
    assert f"raised by the kernel op at {info.value.site}" in info.value.__notes__
    _assert_next_launch_works()


@pytest.mark.timeout(600)
def test_unsatisfiable_wait_ends_with_wait_timeout():
    timeout = 2.0
    n = 2

    def kernel(o_ref, sem):
        # Nobody ever signals `sem`.
        pl.semaphore_wait(sem, 1)
        o_ref[0] = 1

    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((1,), jnp.int32),
        out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
        scratch_shapes=[pltpu.SemaphoreType.REGULAR],
        # Deadlock detection off: the timeout is the last resort it leaves.
        interpret=_params(wait_timeout=timeout, detect_deadlocks=False),
    )
    start = time.monotonic()
    with pytest.raises(mosaic_rt.WaitTimeout) as info:
        with mosaic_rt.native_errors():
            _run_on_ring(call, n)
    elapsed = time.monotonic() - start
    assert elapsed >= timeout * 0.9, f"gave up after {elapsed:.2f}s, before the timeout"
    message = str(info.value)
    assert "semaphore" in message and "wait" in message, message
    assert re.search(r"waited 2(\.0)?s", message), message
    assert info.value.device in range(n), info.value.device
    _assert_next_launch_works()


def test_unsatisfiable_wait_is_a_deadlock_reported_at_once():
    n = 2

    def kernel(o_ref, sem):
        # Nobody ever signals `sem`.
        pl.semaphore_wait(sem, 1)
        o_ref[0] = 1

    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((1,), jnp.int32),
        out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
        scratch_shapes=[pltpu.SemaphoreType.REGULAR],
        interpret=_params(wait_timeout=60.0),
    )
    # A timeout would raise WaitTimeout, not DeadlockError: the type says
    # detection found it.
    with pytest.raises(mosaic_rt.DeadlockError) as info:
        with mosaic_rt.native_errors():
            _run_on_ring(call, n)
    message = str(info.value)
    for device in range(n):
        assert re.search(
            rf"device {device}, core 0: waits on REGULAR semaphore \d+ for 1"
            r" \(count is 0\) at .*test_multi_device_failures.py:\d+",
            message,
        ), message
    _assert_next_launch_works()
