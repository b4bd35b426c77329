"""`pl.Buffered` pipeline modes in `pltpu.emit_pipeline`: one, two or
three buffers per operand, with and without lookahead, over a reduction
axis too. The buffer count changes when a block's copy starts, never
which bits land: the results equal numpy's and stock's."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


@pytest.fixture(autouse=True, scope="module")
def _tpu():
    # emit_pipeline sizes its buffers from the chip's TPU info.
    with mosaic_rt.simulate_tpu("v5e", disable=("devices",)):
        yield


def _buffered(count, lookahead):
    if lookahead:
        return pl.Buffered(count, use_lookahead=True)
    return pl.Buffered(count)


def _run(kernel, x, out_shape, params):
    call = pl.pallas_call(
        kernel,
        out_shape=out_shape,
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        interpret=params,
    )
    return np.asarray(jax.jit(call)(x))


_MODES = [(1, False), (2, False), (3, False), (3, True)]


@pytest.mark.parametrize(("count", "lookahead"), _MODES)
def test_elementwise_pipeline_with_n_buffers(count, lookahead):
    def kernel(x_hbm, o_hbm):
        def body(x_ref, o_ref):
            o_ref[...] = x_ref[...] * 3.0 - pl.program_id(0).astype(jnp.float32)

        in_spec = pl.BlockSpec((8, 128), lambda i: (i, 0), pipeline_mode=_buffered(count, lookahead))
        pltpu.emit_pipeline(body, grid=(6,), in_specs=[in_spec], out_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))])(
            x_hbm, o_hbm
        )

    # Small integers: exact in f32 whether XLA fuses the multiply-add or not.
    x = jnp.asarray(np.random.default_rng(count).integers(-64, 64, size=(48, 128)).astype(np.float32))
    got = _run(kernel, x, jax.ShapeDtypeStruct(x.shape, x.dtype), mosaic_rt.InterpretParams())
    want = np.asarray(x) * np.float32(3.0) - np.repeat(np.arange(6, dtype=np.float32), 8)[:, None]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("count", "lookahead"), _MODES)
def test_reduction_pipeline_with_n_buffers_matches_stock(count, lookahead):
    # Row sums over 4 column blocks: the output block is revisited along the
    # reduction axis while the input's buffers rotate.
    def kernel(x_hbm, o_hbm):
        def body(x_ref, o_ref):
            @pl.when(pl.program_id(1) == 0)
            def _():
                o_ref[...] = jnp.zeros_like(o_ref)

            o_ref[...] += x_ref[...]

        in_spec = pl.BlockSpec((8, 128), lambda i, j: (i, j), pipeline_mode=_buffered(count, lookahead))
        out_spec = pl.BlockSpec((8, 128), lambda i, j: (i, 0))
        pltpu.emit_pipeline(body, grid=(2, 4), in_specs=[in_spec], out_specs=[out_spec])(x_hbm, o_hbm)

    x = jnp.asarray(np.random.default_rng(7).integers(-8, 8, size=(16, 512)).astype(np.float32))
    out_shape = jax.ShapeDtypeStruct((16, 128), jnp.float32)
    ours = _run(kernel, x, out_shape, mosaic_rt.InterpretParams())
    stock = _run(kernel, x, out_shape, pltpu.InterpretParams())
    np.testing.assert_array_equal(ours, np.asarray(x).reshape(16, 4, 128).sum(axis=1))
    np.testing.assert_array_equal(ours, stock)
