"""When a DMA moves its bytes: ``dma_execution_mode="tpu"`` (the default)
against the explicit extremes ``"eager"`` and ``"on_wait"``.

Under "tpu" a copy within a core runs at its start (kernels that reuse a
buffer an earlier copy still reads keep its old bytes going out), and a
copy to another core reads its source at its start and lands at the
destination core's next synchronisation point (a neighbour's copy never
lands between the destination's own stores). Kernels without races give
the same bits in every mode and match stock; racing ones get the TPU's
order, and the race detector still names both lines.
"""

from __future__ import annotations

import re
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

N = 4
ROWS = 8
_ANY = pl.BlockSpec(memory_space=pl.ANY)
_VMEM = pl.BlockSpec(memory_space=pltpu.VMEM)


def _ours(**kw):
    return mosaic_rt.InterpretParams(wait_timeout=60.0, **kw)


def _mesh(n=N):
    return Mesh(np.array(jax.devices()[:n]), ("x",))


_COLUMNS = P(None, "x")


def _sharded(body, x, *, n=N, spec=_COLUMNS):
    mesh = _mesh(n)
    x = jax.device_put(x, NamedSharding(mesh, spec))
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False))(x)


def _x(n=N, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(-8, 8, size=(ROWS, 128 * n)).astype(np.float32)


def _run(fn, params, x):
    with mosaic_rt.native_errors():
        return np.asarray(jax.block_until_ready(fn(params, x)))


# ------------------------------------------- a copy to another device


def _zero_then_receive(shift, n=N):
    """Each device zeroes its output block, then sends its input to the
    output block of device (me + shift) % n and waits: a ppermute that
    races by Pallas's rules (nothing orders the neighbour's copy after the
    zeroing), which a TPU runs right -- the copy crosses the interconnect
    while the destination zeroes."""

    def kernel(x_ref, o_ref, send, recv):
        o_ref[...] = jnp.zeros_like(o_ref)
        peer = lax.rem(lax.axis_index("x") + shift + n, n)
        copy = pltpu.make_async_remote_copy(x_ref, o_ref, send, recv, device_id=(peer,))
        copy.start()
        copy.wait()

    def fn(params, x):
        call = pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((ROWS, 128), jnp.float32),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=0, in_specs=[_ANY], scratch_shapes=[pltpu.SemaphoreType.DMA] * 2
            ),
            interpret=params,
        )
        return _sharded(call, x, n=n)

    return fn


def _rolled(x, shift, n=N):
    return np.roll(x.reshape(ROWS, n, 128), shift, axis=1).reshape(ROWS, n * 128)


@pytest.mark.parametrize("shift", [1, -1])
def test_a_neighbours_copy_lands_after_the_destination_zeroed_its_block(shift):
    fn, x = _zero_then_receive(shift), _x()
    want = _rolled(x, shift)
    for _ in range(3):  # a different thread schedule each call
        np.testing.assert_array_equal(_run(fn, _ours(), x), want)
    # The other explicit extreme agrees, and so does stock's default.
    np.testing.assert_array_equal(_run(fn, _ours(dma_execution_mode="on_wait"), x), want)
    np.testing.assert_array_equal(np.asarray(fn(pltpu.InterpretParams(), x)), want)


def test_the_race_detector_names_the_zeroing_and_the_copy():
    fn = _zero_then_receive(1)
    _run(fn, _ours(detect_races=True, on_race="warn"), _x())
    assert mosaic_rt.races.races_found
    report = mosaic_rt.races.reports()[0]
    here, where = re.escape(__file__), re.escape("(_zero_then_receive.<locals>.kernel)")
    # The copy's write, by the line that started it, and the zeroing store.
    block = r"write of vmem buffer \d+ of device (\d), core 0\[0:8, 0:128\] by"
    dma = rf"{block} DMA #\d+ \(started by device \d, core 0 at {here}:(\d+):\d+ {where}\)"
    store = rf"{block} device (\d), core 0 at {here}:(\d+):\d+ {where}"
    m, k = re.search(dma, report), re.search(store, report)
    assert m and k, report
    assert m.group(1) == k.group(1) == k.group(2), report  # the destination's own store
    assert int(m.group(2)) > int(k.group(3)), report  # the copy starts after the zeroing line


def test_copies_to_different_rows_of_the_destination():
    # Even devices send to row 1 of the next device's output, odd ones to
    # row 0; the row nobody sends to stays zero.
    def kernel(x_ref, o_ref, send, recv):
        o_ref[...] = jnp.zeros_like(o_ref)
        me = lax.axis_index("x")
        peer = lax.rem(me + 1, N)

        def send_to(row):
            copy = pltpu.make_async_remote_copy(x_ref, o_ref.at[row], send, recv, device_id=(peer,))
            copy.start()
            copy.wait()

        pl.when(lax.rem(me, 2) == 0)(lambda: send_to(1))
        pl.when(lax.rem(me, 2) == 1)(lambda: send_to(0))

    def fn(params, x):
        call = pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((2, ROWS, 128), jnp.float32),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=0,
                in_specs=[_VMEM],
                out_specs=_VMEM,
                scratch_shapes=[pltpu.SemaphoreType.DMA] * 2,
            ),
            interpret=params,
        )
        return _sharded(call, x)

    x = _x()
    got = _run(fn, _ours(), x)
    # Device d's output block is got[:, d * ROWS:(d + 1) * ROWS]; it holds
    # device d - 1's input in the row that device's parity picks.
    blocks = x.reshape(ROWS, N, 128)
    want = np.zeros((2, N, ROWS, 128), np.float32)
    for d in range(N):
        want[1 - (d - 1) % 2, d] = blocks[:, (d - 1) % N]
    np.testing.assert_array_equal(got, want.reshape(2, N * ROWS, 128))
    np.testing.assert_array_equal(got, np.asarray(fn(pltpu.InterpretParams(), x)))


# ---------------------- a sender running ahead of a late destination


def _handshake_ring(delay_device):
    """jax's barrier-semaphore ring: each device signals its right
    neighbour's barrier and ready semaphores, waits for its left
    neighbour's, then copies its VMEM input into the right neighbour's VMEM
    output. Nothing waits for the right neighbour itself, so a sender may
    run ahead of a neighbour that has not started the kernel (here
    `delay_device`, held back before it). A TPU delivers the copy; so must
    we, once the destination has its buffers."""

    def kernel(x_ref, y_ref):
        def body(ready, send, recv):
            right = lax.rem(lax.axis_index("x") + 1, N)
            barrier = pltpu.get_barrier_semaphore()
            pl.semaphore_signal(barrier, device_id=(right,))
            pl.semaphore_wait(barrier)
            pl.semaphore_signal(ready, device_id=(right,))
            pl.semaphore_wait(ready)
            pltpu.async_remote_copy(x_ref, y_ref, send, recv, device_id=(right,)).wait()

        pl.run_scoped(body, pltpu.SemaphoreType.REGULAR, pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA)

    def hold_back(x, me):
        if int(me) == delay_device:
            time.sleep(0.3)
        return x

    def fn(params, x):
        def body(x):
            x = jax.pure_callback(hold_back, jax.ShapeDtypeStruct(x.shape, x.dtype), x, lax.axis_index("x"))
            return pl.pallas_call(
                kernel,
                in_specs=[_VMEM],
                out_specs=_VMEM,
                out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                compiler_params=pltpu.CompilerParams(collective_id=0),
                interpret=params,
            )(x)

        return _sharded(body, x, spec=P("x"))

    return fn


@pytest.mark.parametrize("mode", ["tpu", "eager", "on_wait"])
def test_a_copy_to_a_destination_not_in_the_kernel_yet_lands_once_it_is(mode):
    # Under "eager" too: a copy runs at its start when its destination
    # exists; one to a device holding no buffers yet (a TPU's VMEM is there
    # all along) lands at that core's next synchronisation point rather
    # than failing with "no such buffer" (stock's eager mode fails; ours
    # did, in 22 of 30 runs of jax's barrier-semaphore test on a loaded
    # machine). The held-back device makes the sender run ahead every time.
    x = np.arange(N * ROWS * 128, dtype=np.float32).reshape(N * ROWS, 128)
    want = np.roll(x, ROWS, axis=0)
    got = _run(_handshake_ring(delay_device=0), _ours(dma_execution_mode=mode), x)
    np.testing.assert_array_equal(got, want)


# -------------------------------------------------- copies within a core


def _write_back_then_prefetch(x_ref, o_ref, buf, sems):
    """tpu-inference's GDN pattern: a store copy writes `buf` back to
    o[0], and before it is waited for, a prefetch copy loads x[1] into the
    same `buf`. A TPU issues the copies in order, so o[0] gets buf's old
    value; deferring each copy to its wait (on_wait) would not."""
    buf[...] = x_ref[0] + 100.0
    store = pltpu.make_async_copy(buf, o_ref.at[0], sems.at[0])
    store.start()
    prefetch = pltpu.make_async_copy(x_ref.at[1], buf, sems.at[1])
    prefetch.start()
    prefetch.wait()
    store.wait()
    o_ref[1] = buf[...] + 1.0


def _gdn_like(params, x):
    return pl.pallas_call(
        _write_back_then_prefetch,
        out_shape=jax.ShapeDtypeStruct((2, ROWS, 128), jnp.float32),
        in_specs=[_VMEM],
        out_specs=_VMEM,
        scratch_shapes=[pltpu.VMEM((ROWS, 128), jnp.float32), pltpu.SemaphoreType.DMA((2,))],
        interpret=params,
    )(x)


def test_a_copy_within_a_core_sends_its_source_before_a_later_copy_overwrites_it():
    x = np.stack([np.full((ROWS, 128), 1.0, np.float32), np.full((ROWS, 128), 2.0, np.float32)])
    got = _run(_gdn_like, _ours(), x)
    np.testing.assert_array_equal(got[0], x[0] + 100.0)
    np.testing.assert_array_equal(got[1], x[1] + 1.0)
    np.testing.assert_array_equal(got, _run(_gdn_like, _ours(dma_execution_mode="eager"), x))
    np.testing.assert_array_equal(got, np.asarray(_gdn_like(pltpu.InterpretParams(dma_execution_mode="eager"), x)))
    # The other extreme shows the kernel relies on the order.
    late = _run(_gdn_like, _ours(dma_execution_mode="on_wait"), x)
    np.testing.assert_array_equal(late[0], x[1])


def test_the_race_detector_names_both_copies_of_the_reused_buffer():
    x = np.zeros((2, ROWS, 128), np.float32)
    _run(_gdn_like, _ours(detect_races=True, on_race="warn"), x)
    assert mosaic_rt.races.races_found
    report = mosaic_rt.races.reports()[0]
    assert report.count("_write_back_then_prefetch") == 2, report
    assert report.count("by DMA #") == 2, report


# ------------------------------------- polling a count lands copies too


def test_a_semaphore_read_is_a_synchronisation_point():
    # The destination polls its receive semaphore's count instead of
    # waiting: each read lands what is on its way, so the loop ends.
    n = 2
    nbytes = ROWS * 128 * 4

    def kernel(x_ref, o_ref, send, recv):
        peer = lax.rem(lax.axis_index("x") + 1, n)
        copy = pltpu.make_async_remote_copy(x_ref, o_ref, send, recv, device_id=(peer,))
        copy.start()
        lax.while_loop(lambda c: pl.semaphore_read(recv) < nbytes, lambda c: c + 1, 0)
        copy.wait()

    def fn(params, x):
        call = pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((ROWS, 128), jnp.float32),
            in_specs=[_VMEM],
            out_specs=_VMEM,
            scratch_shapes=[pltpu.SemaphoreType.DMA] * 2,
            interpret=params,
        )
        return _sharded(call, x, n=n)

    x = _x(n)
    for mode in ("tpu", "eager"):
        np.testing.assert_array_equal(_run(fn, _ours(dma_execution_mode=mode), x), _rolled(x, 1, n))


def test_a_copy_never_waited_for_lands_by_kernel_end_and_leaks_its_count():
    # Nobody waits on the receive semaphore: the copy still lands (before
    # the device leaves), and the leak report counts its bytes.
    n = 2

    def kernel(x_ref, o_ref, send, recv):
        peer = lax.rem(lax.axis_index("x") + 1, n)
        copy = pltpu.make_async_remote_copy(x_ref, o_ref, send, recv, device_id=(peer,))
        copy.start()
        copy.wait_send()

    def fn(params, x):
        call = pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((ROWS, 128), jnp.float32),
            in_specs=[_VMEM],
            out_specs=_ANY,
            scratch_shapes=[pltpu.SemaphoreType.DMA] * 2,
            interpret=params,
        )
        return _sharded(call, x, n=n)

    with pytest.warns(mosaic_rt.SemaphoreLeakWarning, match=r"DMA semaphore \d+.* has count 4096"):
        _run(fn, _ours(python_warnings=True), _x(n))


def test_the_default_is_tpu_and_every_mode_is_accepted():
    assert mosaic_rt.InterpretParams().dma_execution_mode == "tpu"
    for mode in ("tpu", "eager", "on_wait"):
        assert mosaic_rt.InterpretParams(dma_execution_mode=mode).dma_execution_mode == mode
    rt = mosaic_rt.Runtime(2, 1, dma_execution_mode="tpu")
    assert rt.dma_execution_mode == "tpu"


def test_the_runtime_driven_from_python_lands_a_copy_at_the_destinations_wait():
    rt = mosaic_rt.Runtime(2, 1, dma_execution_mode="tpu")
    src = rt.allocate_buffer(0, 0, "vmem", np.arange(4, dtype=np.float32))
    dst = rt.allocate_buffer(1, 0, "vmem", np.zeros(4, np.float32))
    send = rt.allocate_semaphores(0, None, "dma", 2)
    rt.allocate_semaphores(1, None, "dma", 2)
    rt.dma_start(0, 0, ("vmem", src), ("vmem", dst), send + 1, src_sem=send, dst_device=1)
    np.testing.assert_array_equal(rt.buffer_content(1, 0, "vmem", dst), np.zeros(4, np.float32))
    rt.dma_wait(1, 0, send + 1, 16)
    np.testing.assert_array_equal(rt.buffer_content(1, 0, "vmem", dst), np.arange(4, dtype=np.float32))
