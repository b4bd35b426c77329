"""DMAs over slices of traced size (`pl.ds(start, n)` with `n` read in the
kernel), as third-party TPU kernels use them (variable-length rows of a
ragged batch), `emit_pipeline` blocks of `pl.BoundedSlice`, and empty
selections at the end of an array.

Stock runs traced sizes (its DMAs are Python callbacks); ours reads them in
the handler. Outputs are compared bit for bit with stock, both DMA modes.
A zero-size DMA that starts at the end of an array moves nothing on a TPU;
stock agrees in on_wait mode (the wait for 0 bytes never runs it) but
raises an out-of-bounds read in eager mode; mosaic_rt follows the TPU in
both.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from parity import assert_bitwise_equal

pytestmark = pytest.mark.timeout(180)

MODES = ("eager", "on_wait")
X = jnp.arange(32 * 128, dtype=jnp.float32).reshape(32, 128)


def _rows_kernel(meta_ref, x_hbm, o_ref, buf, sem):
    """o[0:n] = x[start:start+n], rest zero: n and start from SMEM."""
    n, start = meta_ref[0], meta_ref[1]
    buf[...] = jnp.zeros_like(buf)
    copy = pltpu.make_async_copy(x_hbm.at[pl.ds(start, n)], buf.at[pl.ds(0, n)], sem)
    copy.start()
    copy.wait()
    o_ref[...] = buf[...]


def _rows(params, meta, x=X):
    return pl.pallas_call(
        _rows_kernel,
        out_shape=jax.ShapeDtypeStruct((16, 128), x.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(1,),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec((16, 128), lambda i, m: (0, 0)),
            scratch_shapes=[pltpu.VMEM((16, 128), x.dtype), pltpu.SemaphoreType.DMA],
        ),
        interpret=params,
    )(jnp.asarray(meta, jnp.int32), x)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("meta", [(5, 3), (16, 16), (1, 31), (0, 7)])
def test_rows_of_traced_count_match_stock(mode, meta):
    ours = _rows(mosaic_rt.InterpretParams(dma_execution_mode=mode), meta)
    stock = _rows(pltpu.InterpretParams(dma_execution_mode=mode), meta)
    assert_bitwise_equal(np.asarray(ours), np.asarray(stock))
    n, start = meta
    expected = np.zeros((16, 128), np.float32)
    expected[:n] = np.asarray(X)[start : start + n]
    np.testing.assert_array_equal(np.asarray(ours), expected)


def _columns_kernel(meta_ref, x_hbm, o_hbm, buf, sems):
    """A traced size in a minor dimension and a traced start in another,
    there and back: HBM -> VMEM -> HBM, the second DMA waited through a
    descriptor of the same traced size."""
    row, width = meta_ref[0], meta_ref[1]
    buf[...] = jnp.full(buf.shape, -1.0, buf.dtype)
    read = pltpu.make_async_copy(x_hbm.at[row, :, pl.ds(0, width)], buf.at[:, pl.ds(0, width)], sems.at[0])
    read.start()
    read.wait()
    write = pltpu.make_async_copy(buf, o_hbm, sems.at[1])
    write.start()
    write.wait()


def _columns(params, meta):
    x = jnp.arange(4 * 8 * 128, dtype=jnp.int32).reshape(4, 8, 128)
    return pl.pallas_call(
        _columns_kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(1,),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA((2,))],
        ),
        interpret=params,
    )(jnp.asarray(meta, jnp.int32), x.astype(jnp.float32))


@pytest.mark.parametrize("mode", MODES)
def test_traced_width_in_a_minor_dimension_matches_stock(mode):
    ours = _columns(mosaic_rt.InterpretParams(dma_execution_mode=mode), (2, 37))
    stock = _columns(pltpu.InterpretParams(dma_execution_mode=mode), (2, 37))
    assert_bitwise_equal(np.asarray(ours), np.asarray(stock))
    assert (np.asarray(ours)[:, 37:] == -1).all()


def test_a_traced_size_running_past_the_end_is_an_index_error():
    with pytest.raises(IndexError, match="Out-of-bounds read"), mosaic_rt.native_errors():
        jax.block_until_ready(_rows(mosaic_rt.InterpretParams(), (8, 28)))


def test_a_negative_traced_size_is_a_value_error():
    with pytest.raises(ValueError, match="slice size -2 of dimension 0 is negative"), mosaic_rt.native_errors():
        jax.block_until_ready(_rows(mosaic_rt.InterpretParams(), (-2, 0)))


def _tail_kernel(meta_ref, x_hbm, o_ref, buf, sem):
    """A DMA of the rows left after `start`: none when start == len."""
    start = meta_ref[0]
    n = x_hbm.shape[0] - start
    buf[...] = jnp.full(buf.shape, 7.0, buf.dtype)
    copy = pltpu.make_async_copy(x_hbm.at[pl.ds(start, n)], buf.at[pl.ds(0, n)], sem)
    copy.start()
    copy.wait()
    o_ref[...] = buf[...]


def _tail(params, start):
    return pl.pallas_call(
        _tail_kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(1,),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec((8, 128), lambda i, m: (0, 0)),
            scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA],
        ),
        interpret=params,
    )(jnp.asarray([start], jnp.int32), X[:8])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("start", [8, 5])
def test_a_dma_of_the_rows_left_runs_also_when_none_are(mode, start):
    ours = _tail(mosaic_rt.InterpretParams(dma_execution_mode=mode), start)
    if start == 8:
        np.testing.assert_array_equal(np.asarray(ours), np.full((8, 128), 7.0, np.float32))
    if start < 8 or mode == "on_wait":
        stock = _tail(pltpu.InterpretParams(dma_execution_mode=mode), start)
        assert_bitwise_equal(np.asarray(ours), np.asarray(stock))


def test_stock_eager_rejects_the_empty_dma_at_the_end():
    """Where ours follows the TPU, not stock (see the module doc)."""
    with pytest.raises(Exception, match="Out-of-bounds read"):
        jax.block_until_ready(_tail(pltpu.InterpretParams(dma_execution_mode="eager"), 8))
    pltpu.reset_tpu_interpret_mode_state()


_STARTS = np.array([0, 16, 40, 56], np.int32)
_SIZES = np.array([16, 8, 16, 5], np.int32)


def _bounded_kernel(starts_ref, sizes_ref, x_hbm, o_hbm):
    """emit_pipeline over `pl.BoundedSlice(16)` rows: block i is rows
    [starts[i], starts[i] + sizes[i]) of x, doubled in place."""

    def body(x_vmem, o_vmem):
        o_vmem[...] = x_vmem[...] * 2.0

    spec = pl.BlockSpec((pl.BoundedSlice(16), 128), lambda i: (pl.ds(starts_ref[i], sizes_ref[i]), 0))
    pltpu.emit_pipeline(body, grid=(len(_STARTS),), in_specs=[spec], out_specs=[spec])(x_hbm, o_hbm)


def _bounded(params, x):
    smem = pl.BlockSpec(memory_space=pltpu.SMEM)
    call = pl.pallas_call(
        _bounded_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[smem, smem, pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        input_output_aliases={2: 0},
        interpret=params,
    )
    # emit_pipeline asks for the chip's tiling through the abstract mesh.
    tpu = jax.sharding.AbstractMesh((), (), abstract_device=jax.sharding.AbstractDevice("TPU v5e", 1, "tpu"))
    with jax.sharding.use_abstract_mesh(tpu):
        return np.asarray(jax.jit(lambda x: call(jnp.asarray(_STARTS), jnp.asarray(_SIZES), x))(x))


@pytest.mark.parametrize("mode", MODES)
def test_bounded_slice_blocks_of_emit_pipeline_match_stock(mode):
    x = jnp.arange(64 * 128, dtype=jnp.float32).reshape(64, 128)
    ours = _bounded(mosaic_rt.InterpretParams(dma_execution_mode=mode), x)
    stock = _bounded(pltpu.InterpretParams(dma_execution_mode=mode), x)
    assert_bitwise_equal(ours, stock)
    # Every row a block names is doubled. (jax 0.12's pipeline rounds a
    # bounded block up to the 8-row tiling, doubling rows 61..63 too; jax
    # 0.10 moves exactly `size` rows: both interpreters follow the
    # installed jax's pipeline.)
    named = np.zeros(64, bool)
    for start, size in zip(_STARTS, _SIZES, strict=True):
        named[start : start + size] = True
    np.testing.assert_array_equal(ours[named], np.asarray(x)[named] * 2.0)
    rounded = np.zeros(64, bool)
    rounded[61:64] = True
    xs = np.asarray(x)
    np.testing.assert_array_equal(ours[~named & ~rounded], xs[~named & ~rounded])
    assert (ours[rounded] == xs[rounded]).all() or (ours[rounded] == xs[rounded] * 2.0).all()
