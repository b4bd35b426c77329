"""Deadlock detection: a kernel whose blocked cores can never continue fails
at once with mosaic_rt.DeadlockError naming every blocked core, instead of
waiting for `wait_timeout`; correct kernels with long waits are never
reported.

Each case runs a real kernel (pallas_call / pl.kernel under shard_map) with
a long `wait_timeout` (30 s): a DeadlockError (never a WaitTimeout) shows
the deadlock was detected, not timed out; no case bounds how long it took.
Cases the interpreter cannot express yet go through the FFI wrappers
directly (mosaic_rt.ffi).
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import mosaic_rt
import mosaic_rt.ffi as F
import numpy as np
import pytest
from core_mesh import core_mesh
from ffi_support import begin, dummy_rows, fresh_uid, run_on_devices, with_token
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from mosaic_rt import _native

pytestmark = [pytest.mark.timeout(120), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

_TIMEOUT = 30.0
_F32 = jnp.float32
_MESH_ID = pl.DeviceIdType.MESH


def _params(**kw):
    return mosaic_rt.InterpretParams(wait_timeout=_TIMEOUT, **kw)


def _mesh(n):
    return Mesh(np.array(jax.devices()[:n]), ("x",))


def _sharded(body, n, x):
    mesh = _mesh(n)
    fn = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    return fn(jax.device_put(x, NamedSharding(mesh, P("x"))))


def _expect_deadlock(run, *needles):
    # A DeadlockError, not the WaitTimeout a missed deadlock ends in after
    # _TIMEOUT: detected, however long compiling and running took.
    with pytest.raises(mosaic_rt.DeadlockError) as info:
        with mosaic_rt.native_errors():
            jax.block_until_ready(run())
    text = str(info.value)
    assert text.startswith("deadlock: "), text
    for needle in needles:
        assert needle in text, f"{needle!r} not in:\n{text}"
    return text


def _sds(shape):
    return jax.ShapeDtypeStruct(shape, _F32)


def _any():
    return pl.BlockSpec(memory_space=pl.ANY)


# ------------------------------------------------------------- deadlocks


def test_self_wait_with_nothing_to_signal_it():
    def kernel(x_ref, o_ref, sem):
        pl.semaphore_wait(sem, 1)
        o_ref[...] = x_ref[...]

    x = jnp.ones((8, 128), _F32)
    call = pl.pallas_call(
        kernel, out_shape=_sds(x.shape), scratch_shapes=[pltpu.SemaphoreType.REGULAR], interpret=_params()
    )
    _expect_deadlock(lambda: call(x), "device 0, core 0: waits on REGULAR semaphore", "for 1 (count is 0)")


def test_two_devices_each_waiting_for_the_other():
    n = 2

    def kernel(x_ref, o_ref, sem):
        me = lax.axis_index("x")
        pl.semaphore_wait(sem, 1)  # the bug: wait before signalling
        pl.semaphore_signal(sem, 1, device_id=(1 - me,), device_id_type=_MESH_ID)
        o_ref[...] = x_ref[...]

    def body(b):
        return pl.pallas_call(
            kernel, out_shape=_sds(b.shape), scratch_shapes=[pltpu.SemaphoreType.REGULAR], interpret=_params()
        )(b)

    x = jnp.ones((n * 8, 128), _F32)
    text = _expect_deadlock(
        lambda: _sharded(body, n, x), "device 0, core 0: waits on REGULAR", "device 1, core 0: waits on REGULAR"
    )
    assert "2 device(s) x 1 core(s)" in text


def test_ping_pong_bug_reports_the_cycle_of_who_signalled_whom():
    # Round 0 works (each signals, then waits); in round 1 both wait first.
    n = 2

    def kernel(x_ref, o_ref, sem):
        me = lax.axis_index("x")
        pl.semaphore_signal(sem, 1, device_id=(1 - me,), device_id_type=_MESH_ID)
        pl.semaphore_wait(sem, 1)
        pl.semaphore_wait(sem, 1)
        o_ref[...] = x_ref[...]

    def body(b):
        return pl.pallas_call(
            kernel, out_shape=_sds(b.shape), scratch_shapes=[pltpu.SemaphoreType.REGULAR], interpret=_params()
        )(b)

    x = jnp.ones((n * 8, 128), _F32)
    _expect_deadlock(
        lambda: _sharded(body, n, x),
        "cycle (each waits for the next",
        "device 0, core 0 -> device 1, core 0 -> device 0, core 0",
    )


@pytest.mark.parametrize("mode", ["eager", "on_wait"])
def test_dma_wait_whose_dma_was_never_started(mode):
    def kernel(x_hbm, o_ref, buf, sem):
        pltpu.make_async_copy(x_hbm, buf, sem).wait()  # never started
        o_ref[...] = buf[...]

    x = jnp.ones((8, 128), _F32)
    call = pl.pallas_call(
        kernel,
        out_shape=_sds(x.shape),
        in_specs=[_any()],
        scratch_shapes=[pltpu.VMEM((8, 128), _F32), pltpu.SemaphoreType.DMA],
        interpret=_params(dma_execution_mode=mode),
    )
    _expect_deadlock(
        lambda: call(x), "waits on DMA semaphore", "waiting for 4096 bytes on DMA semaphore", "no DMA was started on it"
    )


def test_dma_wait_for_more_bytes_than_the_started_dmas_deliver():
    def kernel(x_hbm, o_ref, buf, sem):
        pltpu.make_async_copy(x_hbm.at[pl.ds(0, 8)], buf.at[pl.ds(0, 8)], sem).start()
        pltpu.make_async_copy(x_hbm, buf, sem).wait()  # 8 KiB awaited, 4 KiB started
        o_ref[...] = buf[...]

    x = jnp.ones((16, 128), _F32)
    call = pl.pallas_call(
        kernel,
        out_shape=_sds(x.shape),
        in_specs=[_any()],
        scratch_shapes=[pltpu.VMEM((16, 128), _F32), pltpu.SemaphoreType.DMA],
        interpret=_params(dma_execution_mode="eager"),
    )
    _expect_deadlock(
        lambda: call(x),
        "waiting for 8192 bytes on DMA semaphore",
        "the 1 DMA(s) started on it have all delivered, 4096 bytes in all (last",
        "(count is 4096)",
    )


def test_barrier_one_device_never_reaches():
    n = 2

    def kernel(x_ref, o_ref):
        me = lax.axis_index("x")

        @pl.when(me == 0)
        def _():  # only device 0 takes part in the barrier
            barrier = pltpu.get_barrier_semaphore()
            pl.semaphore_signal(barrier, 1, device_id=(1,), device_id_type=_MESH_ID)
            pl.semaphore_wait(barrier, 1)

        o_ref[...] = x_ref[...]

    def body(b):
        return pl.pallas_call(
            kernel, out_shape=_sds(b.shape), interpret=_params(), compiler_params=pltpu.CompilerParams(collective_id=0)
        )(b)

    x = jnp.ones((n * 8, 128), _F32)
    _expect_deadlock(
        lambda: _sharded(body, n, x),
        "device 0, core 0: waits on BARRIER semaphore",
        "device 1, core 0: finished",
        "semaphore 0 has count 1 on device 1, core 0 while device 0, core 0 waits",
    )


def test_kernel_under_cond_taken_by_one_device_only():
    # Device 1 never reaches the kernel: it never joins the launch, and
    # device 0 waits in the kernel's start barrier. Only the idle heuristic
    # can see this (device 1's program ends without calling mosaic_rt).
    n = 2

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1

    def body(b):
        call = pl.pallas_call(kernel, out_shape=_sds(b.shape), interpret=_params())
        return lax.cond(lax.axis_index("x") == 0, call, lambda v: v, b)

    x = jnp.ones((n * 8, 128), _F32)
    text = _expect_deadlock(
        lambda: _sharded(body, n, x),
        "device 0, core 0: waits in the device barrier",
        "device 1: never joined this launch",
    )
    assert "the process used no CPU time" in text


def test_device_whose_program_ended_early():
    n = 2

    def kernel(x_ref, o_ref, sem):
        me = lax.axis_index("x")

        @pl.when(me == 0)
        def _():
            pl.semaphore_wait(sem, 1)  # device 1 never signals: it just ends

        o_ref[...] = x_ref[...]

    def body(b):
        return pl.pallas_call(
            kernel, out_shape=_sds(b.shape), scratch_shapes=[pltpu.SemaphoreType.REGULAR], interpret=_params()
        )(b)

    x = jnp.ones((n * 8, 128), _F32)
    _expect_deadlock(
        lambda: _sharded(body, n, x),
        "device 0, core 0: waits on REGULAR",
        "device 1, core 0: finished (its program left the launch)",
    )


def test_signal_sent_to_the_wrong_core():
    # Core 1 means to wake core 0 but signals itself; core 0 waits forever.
    n, cores = 1, 2

    @pl.kernel(out_type=_sds((cores * 8, 128)), mesh=core_mesh(cores), interpret=_params())
    def run(x_hbm, o_hbm):
        c = lax.axis_index("core")

        def body(sem):
            @pl.when(c == 1)
            def _():
                pl.semaphore_signal(sem, 1, core_index=1)  # should be core_index=0

            @pl.when(c == 0)
            def _():
                pl.semaphore_wait(sem, 1)

            pltpu.sync_copy(x_hbm.at[pl.ds(c * 8, 8)], o_hbm.at[pl.ds(c * 8, 8)])

        pl.run_scoped(body, pltpu.SemaphoreType.REGULAR)

    x = jnp.ones((cores * 8, 128), _F32)
    del n
    _expect_deadlock(
        lambda: run(x),
        "device 0, core 0: waits on REGULAR",
        "has count 1 on device 0, core 1 while device 0, core 0 waits on it: was it "
        "signalled on the wrong core or device?",
    )


def test_a_deadlock_leaves_the_next_kernel_runnable():
    def bad(x_ref, o_ref, sem):
        pl.semaphore_wait(sem, 1)
        o_ref[...] = x_ref[...]

    def good(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2

    x = jnp.ones((8, 128), _F32)
    call = pl.pallas_call(
        bad, out_shape=_sds(x.shape), scratch_shapes=[pltpu.SemaphoreType.REGULAR], interpret=_params()
    )
    _expect_deadlock(lambda: call(x))
    out = pl.pallas_call(good, out_shape=_sds(x.shape), interpret=_params())(x)
    np.testing.assert_array_equal(np.asarray(out), 2 * np.ones((8, 128), np.float32))


# ------------------------------------------------ correct kernels, long waits


def _slow(v, steps):
    # Real compute that takes a while (no mosaic_rt op inside).
    w = jnp.full((256, 256), 1e-3, _F32)
    return lax.fori_loop(0, steps, lambda i, a: jnp.tanh(a @ w + 1.0), v)


def test_a_slow_device_doing_real_compute_is_not_a_deadlock():
    n = 2
    steps = 8000  # well over the idle window on a shared 2-CPU box

    def kernel(x_ref, o_ref, sem):
        me = lax.axis_index("x")

        @pl.when(me == 1)
        def _():
            o_ref[...] = _slow(x_ref[...], steps)[:8]
            pl.semaphore_signal(sem, 1, device_id=(0,), device_id_type=_MESH_ID)

        @pl.when(me == 0)
        def _():
            pl.semaphore_wait(sem, 1)
            o_ref[...] = x_ref[...][:8]

    def body(b):
        return pl.pallas_call(
            kernel, out_shape=_sds((8, 256)), scratch_shapes=[pltpu.SemaphoreType.REGULAR], interpret=_params()
        )(b)

    x = jnp.ones((n * 256, 256), _F32)
    start = time.monotonic()
    with mosaic_rt.native_errors():
        out = np.asarray(_sharded(body, n, x))
    took = time.monotonic() - start
    assert out.shape == (16, 256)
    assert took > 1.0, f"the slow device took only {took:.2f}s: make it slower"


@pytest.mark.parametrize("mode", ["eager", "on_wait", "tpu"])
def test_a_large_remote_dma_is_not_a_deadlock(mode):
    n = 2
    rows = 8192  # 8192 x 256 f32 = 8 MiB per device

    def kernel(x_hbm, o_hbm, send, recv):
        me = lax.axis_index("x")
        copy = pltpu.make_async_remote_copy(x_hbm, o_hbm, send, recv, device_id=(1 - me,), device_id_type=_MESH_ID)
        copy.start()
        copy.wait()

    def body(b):
        return pl.pallas_call(
            kernel,
            out_shape=_sds(b.shape),
            in_specs=[_any()],
            out_specs=_any(),
            scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
            interpret=_params(dma_execution_mode=mode),
        )(b)

    x = jnp.arange(n * rows * 256, dtype=_F32).reshape(n * rows, 256)
    with mosaic_rt.native_errors():
        out = np.asarray(_sharded(body, n, x))
    xn = np.asarray(x)
    np.testing.assert_array_equal(out, np.concatenate([xn[rows:], xn[:rows]]))


def test_a_host_callback_that_sleeps_inside_the_kernel_is_not_a_deadlock():
    n = 2

    def nap(_):
        time.sleep(1.5)

    def kernel(x_ref, o_ref, sem):
        me = lax.axis_index("x")

        @pl.when(me == 1)
        def _():
            jax.debug.callback(nap, me)
            pl.semaphore_signal(sem, 1, device_id=(0,), device_id_type=_MESH_ID)

        @pl.when(me == 0)
        def _():
            pl.semaphore_wait(sem, 1)

        o_ref[...] = x_ref[...]

    def body(b):
        return pl.pallas_call(
            kernel, out_shape=_sds(b.shape), scratch_shapes=[pltpu.SemaphoreType.REGULAR], interpret=_params()
        )(b)

    x = jnp.ones((n * 8, 128), _F32)
    with mosaic_rt.native_errors():
        np.asarray(_sharded(body, n, x))


# ------------------------------------------- through the FFI wrappers directly


def _sleeping_callback(seconds, mark):
    """An io_callback body that marks its core as inside a host callback
    (as the interpreter will) around a sleep."""

    def cb(handle, device):
        h = int(np.asarray(handle)[0]) | (int(np.asarray(handle)[1]) << 32)
        d = int(device)
        if mark:
            _native.callback_state(h, d, 0, True)
        try:
            time.sleep(seconds)
        finally:
            if mark:
                _native.callback_state(h, d, 0, False)
        return np.int32(0)

    return cb


def test_ffi_marked_host_callback_that_sleeps_is_not_a_deadlock():
    n = 2
    uid = fresh_uid()
    site = _native.intern_site("test_deadlock.py:1:1 (sleepy)")
    cb = _sleeping_callback(1.5, mark=True)

    def body(d, _):
        with begin(d, n, uid=uid) as k:
            k.token, sem = F.allocate_semaphores(k.token, k.handle, d, 0)

            def slow(tok):
                r = jax.experimental.io_callback(cb, jax.ShapeDtypeStruct((), jnp.int32), k.handle, d, ordered=False)
                tok = tok + r * 0
                return F.semaphore_signal(tok, k.handle, d, 0, sem, 1, target_device=0)

            def wait(tok):
                return F.semaphore_wait(tok, k.handle, d, 0, sem, 1, site=site)

            k.token = lax.cond(d == 1, slow, wait, k.token)
        return with_token(jnp.zeros((1, 1), jnp.int32), k.token)

    with mosaic_rt.native_errors():
        out = run_on_devices(n, body, dummy_rows(n))
    assert out.shape == (2, 1)


def test_ffi_unmarked_host_callback_that_sleeps_is_reported_after_the_idle_window():
    # The trade-off of the idle heuristic, pinned: a core stuck outside
    # mosaic_rt without saying so (an unmarked sleeping callback) while the
    # process is idle counts as stuck.
    n = 2
    uid = fresh_uid()
    cb = _sleeping_callback(3.0, mark=False)

    def body(d, _):
        with begin(d, n, uid=uid) as k:
            k.token, sem = F.allocate_semaphores(k.token, k.handle, d, 0)

            def slow(tok):
                r = jax.experimental.io_callback(cb, jax.ShapeDtypeStruct((), jnp.int32), k.handle, d, ordered=False)
                return F.semaphore_signal(tok + r * 0, k.handle, d, 0, sem, 1, target_device=0)

            k.token = lax.cond(d == 1, slow, lambda t: F.semaphore_wait(t, k.handle, d, 0, sem, 1), k.token)
        return with_token(jnp.zeros((1, 1), jnp.int32), k.token)

    text = _expect_deadlock(lambda: run_on_devices(n, body, dummy_rows(n)), "device 1, core 0: not in a mosaic_rt wait")
    assert "the process used no CPU time" in text


def test_ffi_deadlock_names_the_wait_site_and_can_be_turned_off():
    uid = fresh_uid()
    site = _native.intern_site("kernel.py:12:4 (my_kernel)")

    def body(d, _, **cfg):
        with begin(d, 1, uid=uid, **cfg) as k:
            k.token, sem = F.allocate_semaphores(k.token, k.handle, d, 0, site=site)
            k.token = F.semaphore_wait(k.token, k.handle, d, 0, sem, 3, site=site)
        return with_token(jnp.zeros((1, 1), jnp.int32), k.token)

    _expect_deadlock(
        lambda: run_on_devices(1, body, dummy_rows(1)),
        "device 0, core 0: waits on REGULAR semaphore 2000 for 3 (count is 0) at kernel.py:12:4 (my_kernel)",
    )
    uid = fresh_uid()
    with pytest.raises(mosaic_rt.WaitTimeout) as info:
        with mosaic_rt.native_errors():
            run_on_devices(1, lambda d, x: body(d, x, detect_deadlocks=False, wait_timeout=0.3), dummy_rows(1))
    assert "waited 0.3s" in str(info.value), str(info.value)  # its own timeout, not 30 s


def test_ffi_core_end_makes_a_finished_core_known_at_once():
    # Two cores of one device: core 1 ends (core_end) without signalling;
    # core 0's wait is reported at once (no idle window needed).
    uid = fresh_uid()

    def core_prog(k, sem, core):
        def run(tok):
            return F.core_end(tok, k.handle, 0, core)

        if core == 0:
            return lambda tok: F.semaphore_wait(tok, k.handle, 0, 0, sem, 1)
        return run

    # Both "cores" run on one device thread here, core 1 first: it ends,
    # then core 0 waits -> every core is blocked or finished.
    def body(d, _):
        with begin(d, 1, uid=uid, num_cores=2) as k:
            k.token, sem = F.allocate_semaphores(k.token, k.handle, d, None)
            k.token = core_prog(k, sem, 1)(k.token)
            k.token = core_prog(k, sem, 0)(k.token)
        return with_token(jnp.zeros((1, 1), jnp.int32), k.token)

    text = _expect_deadlock(lambda: run_on_devices(1, body, dummy_rows(1)), "device 0, core 1: finished")
    assert "no CPU time" not in text


def test_fail_launch_from_a_callback_reraises_the_original_exception():
    n = 2
    uid = fresh_uid()
    boom = ZeroDivisionError("boom in a user callback")

    def cb(handle, device):
        h = int(np.asarray(handle)[0]) | (int(np.asarray(handle)[1]) << 32)
        assert F.fail_launch(h, int(device), 0, boom)
        return np.int32(0)

    def body(d, _):
        with begin(d, n, uid=uid) as k:
            k.token, sem = F.allocate_semaphores(k.token, k.handle, d, 0)

            def fail(tok):
                r = jax.experimental.io_callback(cb, jax.ShapeDtypeStruct((), jnp.int32), k.handle, d, ordered=False)
                return F.semaphore_wait(tok + r * 0, k.handle, d, 0, sem, 1)

            k.token = lax.cond(d == 1, fail, lambda t: F.semaphore_wait(t, k.handle, d, 0, sem, 1), k.token)
        return with_token(jnp.zeros((1, 1), jnp.int32), k.token)

    with pytest.raises(ZeroDivisionError) as info:
        with mosaic_rt.native_errors():
            run_on_devices(n, body, dummy_rows(n))
    assert info.value is boom
