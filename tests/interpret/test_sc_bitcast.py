"""SparseCore's `plsc.bitcast` in a kernel: the minor dimension's bytes read
at another element width (tpu-inference's ragged gather-reduce divides
indices as uint32 and reads them back as int32 this way). jax to 0.11 gives
it no CPU lowering (stock fails to lower it); 0.12 binds `pltpu.bitcast(dim=-1)`,
which has one. The oracle is numpy's `.view`, the same little-endian
reading of memory."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu_sc as plsc

pytestmark = pytest.mark.timeout(120)

RNG = np.random.default_rng(11)


def _bitcast_kernel(dtype, mode):
    def kernel(x_ref, o_ref):
        o_ref[...] = plsc.bitcast(x_ref[...], dtype)

    def run(x):
        minor = x.shape[-1] * x.dtype.itemsize // jnp.dtype(dtype).itemsize
        out = jax.ShapeDtypeStruct((*x.shape[:-1], minor), dtype)
        params = mosaic_rt.InterpretParams(dma_execution_mode=mode)
        return pl.pallas_call(kernel, out_shape=out, interpret=params)(x)

    return run


@pytest.mark.parametrize("mode", ["eager", "on_wait"])
@pytest.mark.parametrize(
    ("src", "dst"),
    [
        (np.uint32, np.int32),  # same width
        (np.int32, np.int8),  # narrower: each word splits, lowest byte first
        (np.float32, jnp.bfloat16),
        (np.uint8, np.int32),  # wider: four bytes join into one word
        (np.int16, np.float32),
    ],
)
def test_bitcast_reads_the_minor_bytes_at_the_new_width(mode, src, dst):
    raw = RNG.integers(0, 256, (8, 512), dtype=np.uint8)
    x = raw.view(src)
    out = _bitcast_kernel(dst, mode)(jnp.asarray(x))
    want = x.view(np.dtype(dst))
    assert out.shape == want.shape and out.dtype == want.dtype
    np.testing.assert_array_equal(np.asarray(out).view(np.uint8), want.view(np.uint8))


def test_uint32_division_read_back_as_int32():
    """The client's pattern: indices divided as unsigned, read as signed."""

    def kernel(x_ref, o_ref):
        o_ref[...] = plsc.bitcast(plsc.bitcast(x_ref[...], jnp.uint32) // jnp.uint32(8), jnp.int32)

    x = jnp.asarray(RNG.integers(0, 1 << 20, (8, 128)), jnp.int32)
    out = pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct(x.shape, jnp.int32), interpret=mosaic_rt.InterpretParams()
    )(x)
    np.testing.assert_array_equal(out, np.asarray(x) // 8)
