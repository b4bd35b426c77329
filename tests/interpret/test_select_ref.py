"""`pl.select_ref(i, *refs)`: a DMA operand chosen among refs at run time.

The TPU lowering takes it for DMA sources, destinations and semaphores
(jax's tpu_pallas_distributed_test uses it for a collective permute); stock
interpret mode raises NotImplementedError on every jax we support, and our
launch analysis crashed on it with a bare AssertionError. Candidates may be
views indexed alike (their starts are selected too); views that differ
otherwise are a clear NotImplementedError.
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
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

K = 4
ROWS = 8
_VMEM = pl.BlockSpec(memory_space=pltpu.VMEM)
MODES = ["tpu", "eager", "on_wait"]


def _local_kernel(*refs):
    *xs, o_ref, sems, buf = refs
    buf[...] = jnp.concatenate([xs[0][...] * 10, xs[1][...] * 100])

    def body(i, carry):
        # Refs chosen by the loop index, semaphores by its parity.
        whole = pltpu.make_async_copy(
            pl.select_ref(i, *xs), o_ref.at[pl.ds(ROWS * i, ROWS)], pl.select_ref(i % 2, sems.at[0], sems.at[1])
        )
        whole.start()
        whole.wait()
        # Views of one buffer, chosen by parity: their starts are selected.
        half = pltpu.make_async_copy(
            pl.select_ref(i % 2, buf.at[pl.ds(0, ROWS)], buf.at[pl.ds(ROWS, ROWS)]),
            o_ref.at[pl.ds(ROWS * (K + i), ROWS)],
            sems.at[i % 2],
        )
        half.start()
        half.wait()
        return carry

    lax.fori_loop(0, K, body, 0)


def _local(params, xs):
    return pl.pallas_call(
        _local_kernel,
        out_shape=jax.ShapeDtypeStruct((2 * K * ROWS, 128), jnp.float32),
        in_specs=[_VMEM] * K,
        out_specs=_VMEM,
        scratch_shapes=[pltpu.SemaphoreType.DMA((2,)), pltpu.VMEM((2 * ROWS, 128), jnp.float32)],
        interpret=params,
    )(*xs)


@pytest.mark.parametrize("mode", MODES)
def test_a_dma_through_refs_chosen_at_run_time(mode):
    x = np.arange(K * ROWS * 128, dtype=np.float32).reshape(K * ROWS, 128)
    xs = [jnp.asarray(x[ROWS * k : ROWS * (k + 1)]) for k in range(K)]
    halves = [x[:ROWS] * 10 if k % 2 == 0 else x[ROWS : 2 * ROWS] * 100 for k in range(K)]
    got = _local(mosaic_rt.InterpretParams(dma_execution_mode=mode), xs)
    np.testing.assert_array_equal(np.asarray(got), np.concatenate([x, *halves]))


def test_stock_rejects_what_the_tpu_lowering_takes():
    x = jnp.zeros((K * ROWS, 128), jnp.float32)
    with pytest.raises(NotImplementedError, match="SelectTransform"):
        _local(pltpu.InterpretParams(), [x[ROWS * k : ROWS * (k + 1)] for k in range(K)])


def test_a_remote_permute_through_chosen_refs():
    n = 2
    mesh = Mesh(np.array(jax.devices()[:n]), ("x",))

    def kernel(*refs):
        *xs, y_ref = refs

        def body(ready, send, recv):
            other = 1 - lax.axis_index("x")
            pl.semaphore_signal(ready, device_id=other)
            pl.semaphore_wait(ready)

            def step(i, carry):
                copy = pltpu.make_async_remote_copy(
                    pl.select_ref(i, *xs),
                    y_ref.at[pl.ds(ROWS * i, ROWS)],
                    pl.select_ref(i % 2, send.at[0], send.at[1]),
                    pl.select_ref(i % 2, recv.at[0], recv.at[1]),
                    device_id=other,
                )
                copy.start()
                copy.wait()
                return carry

            lax.fori_loop(0, K, step, 0)

        pl.run_scoped(body, pltpu.SemaphoreType.REGULAR, pltpu.SemaphoreType.DMA((2,)), pltpu.SemaphoreType.DMA((2,)))

    def body(x):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((K * ROWS, 128), x.dtype),
            in_specs=[_VMEM] * K,
            out_specs=_VMEM,
            interpret=mosaic_rt.InterpretParams(wait_timeout=60.0),
        )(*jnp.split(x, K))

    x = np.arange(n * K * ROWS * 128, dtype=np.int32).reshape(n * K * ROWS, 128)
    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    got = f(jax.device_put(x, NamedSharding(mesh, P("x"))))
    np.testing.assert_array_equal(np.asarray(got), np.concatenate([x[K * ROWS :], x[: K * ROWS]]))


def test_views_that_differ_beyond_their_starts_are_refused_clearly():
    def kernel(x_ref, o_ref, sem):
        i = pl.program_id(0)
        src = pl.select_ref(i, x_ref.at[pl.ds(0, 4, stride=2)], x_ref.at[pl.ds(0, 4)])
        pltpu.make_async_copy(src, o_ref, sem).start()
        pltpu.make_async_copy(src, o_ref, sem).wait()

    with pytest.raises(NotImplementedError, match="pl.select_ref over refs viewed differently"):
        pl.pallas_call(
            kernel,
            grid=(1,),
            out_shape=jax.ShapeDtypeStruct((4, 128), jnp.float32),
            in_specs=[_VMEM],
            out_specs=_VMEM,
            scratch_shapes=[pltpu.SemaphoreType.DMA(())],
            interpret=mosaic_rt.InterpretParams(),
        )(jnp.zeros((8, 128), jnp.float32))


def test_views_with_traced_starts_are_selected():
    # Candidates x.at[pl.ds(8 * i, 8)] / x.at[pl.ds(8 * (3 - i), 8)]: their
    # starts are traced values, selected without comparing them.
    def kernel(x_ref, o_ref, sem):
        def body(i, carry):
            src = pl.select_ref(i % 2, x_ref.at[pl.ds(i * ROWS, ROWS)], x_ref.at[pl.ds((3 - i) * ROWS, ROWS)])
            copy = pltpu.make_async_copy(src, o_ref.at[pl.ds(i * ROWS, ROWS)], sem)
            copy.start()
            copy.wait()
            return carry

        lax.fori_loop(0, 4, body, 0)

    x = np.arange(4 * ROWS * 128, dtype=np.float32).reshape(4 * ROWS, 128)
    got = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[_VMEM],
        out_specs=_VMEM,
        scratch_shapes=[pltpu.SemaphoreType.DMA(())],
        interpret=mosaic_rt.InterpretParams(),
    )(x)
    blocks = x.reshape(4, ROWS, 128)
    np.testing.assert_array_equal(np.asarray(got), np.concatenate([blocks[0], blocks[2], blocks[2], blocks[0]]))


_HBM = pl.BlockSpec(memory_space=pltpu.HBM)


@pytest.mark.parametrize("which", [0, 1])
def test_a_whole_ref_and_a_view_of_all_of_another_are_selected(which):
    # x.at[0:8] of an (8, 128) x against an untransformed y (the index read
    # from SMEM): the whole ref is the view of all of it (jax's
    # test_select_ref_smem_index; refused as differently viewed before).
    def kernel(idx_ref, x_hbm, y_hbm, o_hbm):
        def body(sem):
            pltpu.async_copy(pl.select_ref(idx_ref[0], x_hbm.at[0:ROWS], y_hbm), o_hbm, sem).wait()

        pl.run_scoped(body, pltpu.SemaphoreType.DMA)

    x = np.arange(ROWS * 128, dtype=np.float32).reshape(ROWS, 128)
    y = -x - 1
    got = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), _HBM, _HBM],
        out_specs=_HBM,
        interpret=mosaic_rt.InterpretParams(),
    )(np.asarray([which], np.int32), x, y)
    np.testing.assert_array_equal(np.asarray(got), [x, y][which])


def test_nested_selects_with_a_view_on_top():
    # An outer select among inner selects (each picking a half of its ref's
    # columns), reshaped on top, in a loop (jax's test_select_ref_nested;
    # failed with TracerArrayConversionError before).
    def kernel(*refs):
        *xs, o_hbm = refs

        def body(sem):
            @pl.loop(0, K)
            def _(i):
                halves = [pl.select_ref(k % 2, r.at[:, :128], r.at[:, 128:]) for k, r in enumerate(xs)]
                src = pl.select_ref(i, *halves).reshape(ROWS, 128)
                pltpu.async_copy(src, o_hbm.at[pl.ds(ROWS * i, ROWS)], sem.at[0]).wait()

        pl.run_scoped(body, pltpu.SemaphoreType.DMA(1))

    x = np.arange(K * ROWS * 256, dtype=np.int32).reshape(K * ROWS, 256)
    xs = np.split(x, K)
    got = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((K * ROWS, 128), jnp.int32),
        in_specs=[_HBM] * K,
        out_specs=_HBM,
        interpret=mosaic_rt.InterpretParams(),
    )(*xs)
    want = np.concatenate([xk[:, :128] if k % 2 == 0 else xk[:, 128:] for k, xk in enumerate(xs)])
    np.testing.assert_array_equal(np.asarray(got), want)
