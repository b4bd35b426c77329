"""Ref views stock interpret mode cannot run: `ref.bitcast` / `ref.reshape`
(with indexers before and after them), for reads and writes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from mosaic_rt.jax_internals import bitcast_array as tpu_bitcast

pytestmark = pytest.mark.timeout(120)

X = jnp.arange(8 * 128, dtype=jnp.float32).reshape(8, 128)


def _views_kernel(x_ref, o_ref, r_ref, w_ref, b_ref):
    o_ref[...] = x_ref.bitcast(jnp.int32)[...]
    r_ref[...] = x_ref.reshape(4, 2, 128)[1]
    w_ref[...] = jnp.zeros_like(w_ref)
    w_ref.reshape(4, 2, 128)[2] = x_ref[0:2, :] + 1.0
    w_ref.at[4:8].bitcast(jnp.int32)[1, 3:7] = jnp.arange(4, dtype=jnp.int32)
    b_ref[...] = x_ref.bitcast(jnp.bfloat16)[...]


def _run(params):
    shapes = (
        jax.ShapeDtypeStruct((8, 128), jnp.int32),
        jax.ShapeDtypeStruct((2, 128), jnp.float32),
        jax.ShapeDtypeStruct((8, 128), jnp.float32),
        jax.ShapeDtypeStruct((16, 128), jnp.bfloat16),
    )
    return pl.pallas_call(_views_kernel, out_shape=shapes, interpret=params)(X)


@pytest.mark.parametrize("mode", ["eager", "on_wait"])
def test_bitcast_and_reshape_views_read_and_write(mode):
    ints, rows, written, halves = _run(mosaic_rt.InterpretParams(dma_execution_mode=mode))
    x = np.asarray(X)
    np.testing.assert_array_equal(np.asarray(ints), x.view(np.int32))
    np.testing.assert_array_equal(np.asarray(rows), x.reshape(4, 2, 128)[1])
    expected = np.zeros((8, 128), np.float32)
    expected.reshape(4, 2, 128)[2] = x[0:2] + 1
    block = expected[4:8].view(np.int32).copy()
    block[1, 3:7] = np.arange(4)
    expected[4:8] = block.view(np.float32)
    np.testing.assert_array_equal(np.asarray(written).view(np.int32), expected.view(np.int32))
    # TPU bitcast semantics (packing along the second-minor dimension).
    np.testing.assert_array_equal(np.asarray(halves), np.asarray(tpu_bitcast(X, jnp.bfloat16)))


def test_stock_cannot_run_these_views():
    with pytest.raises(Exception, match="(?s)callback|Unsupported|indices"):
        jax.block_until_ready(_run(pltpu.InterpretParams()))


def test_dma_through_a_reshaped_ref():
    # More DMA views: tests/interpret/test_dma_views.py.
    def kernel(x_hbm, o_hbm, sem):
        pltpu.async_copy(x_hbm.reshape(4, 2, 128), o_hbm.reshape(4, 2, 128), sem).wait()

    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA],
        interpret=mosaic_rt.InterpretParams(),
    )(X)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(X))


def _traced_box_kernel(x_ref, o_ref, acc_ref):
    # Reads and accumulating writes through a reshaped view at traced
    # offsets (a loop counter), as MoE kernels index their accumulators: the
    # view's indexer is one box, so XLA gets a dynamic (update) slice.
    acc_ref[...] = jnp.zeros_like(acc_ref)
    view = acc_ref.reshape(4, 4, 128)

    def body(i, carry):
        plane, rows = i // 2, pl.ds((i % 2) * 2, 2)
        view[plane, rows, :] += x_ref.reshape(4, 4, 128)[plane, rows, :] * (i + 1).astype(jnp.float32)
        view[plane, rows, :] += 1.0
        return carry

    jax.lax.fori_loop(0, 8, body, None)
    o_ref[...] = acc_ref[...]


def test_traced_box_reads_and_writes_through_a_view():
    x = jnp.arange(16 * 128, dtype=jnp.float32).reshape(16, 128)
    f = pl.pallas_call(
        _traced_box_kernel,
        out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32),
        scratch_shapes=[pltpu.VMEM((16, 128), jnp.float32)],
        interpret=mosaic_rt.InterpretParams(),
    )
    text = jax.jit(f).lower(x).as_text()
    assert "dynamic_update_slice" in text and "scatter" not in text and "gather" not in text
    out = f(x)
    want = np.zeros((4, 4, 128), np.float32)
    xv = np.asarray(x).reshape(4, 4, 128)
    for i in range(8):
        plane, rows = i // 2, slice((i % 2) * 2, (i % 2) * 2 + 2)
        want[plane, rows] += xv[plane, rows] * (i + 1)
        want[plane, rows] += 1.0
    np.testing.assert_array_equal(np.asarray(out), want.reshape(16, 128))
