"""DMA waits that follow a DMA start or wait in the kernel run inside that
op's native call (`then_wait`): a remote copy's ``.start(); .wait()`` is one
custom call instead of three. Same results as stock, same errors and sites.
"""

from __future__ import annotations

import inspect
import re

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from lowered_text import native_ops
from mosaic_rt.bench import collectives
from parity import assert_bitwise_equal

pytestmark = [pytest.mark.timeout(180), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

_F32 = jnp.float32


def _calls(fn, args, target):
    """Native ops ``target`` in the lowered program (batched or not)."""
    return native_ops(fn.lower(*args).as_text())[target]


def test_a_ring_all_gather_emits_no_standalone_dma_wait():
    """Each ring step's start, send wait and receive wait are one call."""
    program, args = collectives.all_gather(8, 8)
    ours = program(mosaic_rt.InterpretParams())
    starts = _calls(ours, args, "dma_start")
    assert starts == 8
    assert _calls(ours, args, "dma_wait") == 0
    text = ours.lower(*args).as_text()
    assert len(re.findall(r"then_wait_bytes = ", text)) == starts


def _ring_kernel(n, x_ref, o_ref, buf, send_sem, recv_sem, local_sem):
    me = jax.lax.axis_index("x")
    right = jax.lax.rem(me + 1, n)
    # Both neighbours are inside the kernel (their buffers exist) first.
    barrier = pltpu.get_barrier_semaphore()
    for peer in (right, jax.lax.rem(me + n - 1, n)):
        pl.semaphore_signal(barrier, 1, device_id=(peer,), device_id_type=pl.DeviceIdType.MESH)
    pl.semaphore_wait(barrier, 2)
    copy = pltpu.make_async_remote_copy(
        src_ref=x_ref,
        dst_ref=buf,
        send_sem=send_sem,
        recv_sem=recv_sem,
        device_id=(right,),
        device_id_type=pl.DeviceIdType.MESH,
    )
    copy.start()
    copy.wait_send()
    copy.wait_recv()
    # A local copy waited on its own, then a start whose next equation is
    # compute (nothing merged there).
    local = pltpu.make_async_copy(buf, o_ref, local_sem)
    local.start()
    local.wait()
    o_ref[...] = o_ref[...] * 2.0 + 1.0


def _run_ring(params, n=4):
    mesh = Mesh(np.array(jax.devices()[:n]), ("x",))
    x = np.arange(n * 8 * 128, dtype=np.float32).reshape(n * 8, 128)
    call = pl.pallas_call(
        lambda *refs: _ring_kernel(n, *refs),
        out_shape=jax.ShapeDtypeStruct((8, 128), _F32),
        scratch_shapes=[
            pltpu.VMEM((8, 128), _F32),
            pltpu.SemaphoreType.DMA,
            pltpu.SemaphoreType.DMA,
            pltpu.SemaphoreType.DMA,
        ],
        compiler_params=pltpu.CompilerParams(collective_id=0),
        interpret=params,
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    return np.asarray(jax.block_until_ready(fn(jax.device_put(x, NamedSharding(mesh, P("x"))))))


@pytest.mark.parametrize("mode", ["on_wait", "eager"])
@pytest.mark.parametrize("races", [False, True])
def test_merged_waits_match_stock_bit_for_bit(mode, races):
    stock = _run_ring(pltpu.InterpretParams(dma_execution_mode=mode, detect_races=races))
    ours = _run_ring(mosaic_rt.InterpretParams(dma_execution_mode=mode, detect_races=races))
    assert_bitwise_equal(stock, ours)
    x = np.arange(4 * 8 * 128, dtype=np.float32).reshape(4, 8, 128)
    np.testing.assert_array_equal(ours.reshape(4, 8, 128), np.roll(x, 1, axis=0) * 2 + 1)


def test_a_trailing_wait_that_can_never_end_is_reported_at_its_own_line():
    def kernel(x_hbm, o_ref, buf, sem, other):
        copy = pltpu.make_async_copy(x_hbm, buf, sem)
        copy.start()
        copy.wait()
        pltpu.make_async_copy(x_hbm, buf, other).wait()  # never started: the follower
        o_ref[...] = buf[...]

    lines, first = inspect.getsourcelines(kernel)
    follower = first + next(k for k, ln in enumerate(lines) if "the follower" in ln)
    x = jnp.ones((8, 128), _F32)
    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, _F32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        scratch_shapes=[pltpu.VMEM((8, 128), _F32), pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
        interpret=mosaic_rt.InterpretParams(wait_timeout=30.0),
    )
    assert _calls(jax.jit(call), (x,), "dma_wait") == 0  # both waits rode on the start
    # A DeadlockError (a missed deadlock would end in a WaitTimeout after 30 s).
    with pytest.raises(mosaic_rt.DeadlockError) as info:
        with mosaic_rt.native_errors():
            jax.block_until_ready(call(x))
    text = str(info.value)
    assert f"test_dma_wait_merge.py:{follower}:" in text, text
    assert "no DMA was started on it" in text, text


def test_a_wait_of_traced_size_is_not_merged_and_still_matches_stock():
    def kernel(n_ref, x_hbm, o_ref, buf, sem, sem2):
        n = n_ref[0]
        first = pltpu.make_async_copy(x_hbm.at[pl.ds(0, 8)], buf.at[pl.ds(0, 8)], sem)
        second = pltpu.make_async_copy(x_hbm.at[pl.ds(8, 8)], buf.at[pl.ds(8, 8)], sem2)
        first.start()
        second.start()
        # Its size is known at run time only (n == 8): it ends the run of
        # waits that may ride on `second.start()`, and starts none itself.
        pltpu.make_async_copy(x_hbm.at[pl.ds(0, n)], buf.at[pl.ds(0, n)], sem).wait()
        second.wait()
        o_ref[...] = buf[...] + 1.0

    x = jnp.arange(16 * 128, dtype=_F32).reshape(16, 128)

    def call(params):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, _F32),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1,
                in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
                scratch_shapes=[pltpu.VMEM((16, 128), _F32), pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
            ),
            interpret=params,
        )

    args = (jnp.array([8], jnp.int32), x)
    ours = jax.jit(call(mosaic_rt.InterpretParams()))
    assert _calls(ours, args, "dma_wait") == 1  # second.wait(), on its own
    assert _calls(ours, args, "semaphore_wait") == 1  # the traced-size wait
    stock = np.asarray(jax.block_until_ready(call(pltpu.InterpretParams())(*args)))
    assert_bitwise_equal(stock, np.asarray(jax.block_until_ready(ours(*args))))
    np.testing.assert_array_equal(stock, np.asarray(x) + 1.0)
