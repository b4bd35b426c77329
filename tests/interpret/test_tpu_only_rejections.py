"""Kernels the TPU's lowering rejects, rejected here too with its exception
type (stock runs them, so a test passing on stock would fail on a TPU):
unsigned integer operands of a matmul (the MXU reads integers as signed)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _matmul(lhs, rhs, out_dtype, interpret):
    def kernel(l_ref, r_ref, o_ref):
        o_ref[...] = jnp.dot(l_ref[...], r_ref[...], preferred_element_type=out_dtype)

    shape = (lhs.shape[0], rhs.shape[1])
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(shape, out_dtype), interpret=interpret)(lhs, rhs)


@pytest.mark.parametrize("dtype", [jnp.uint8, jnp.uint16, jnp.uint32])
def test_an_unsigned_matmul_is_rejected_as_on_a_tpu(dtype):
    lhs, rhs = jnp.ones((8, 128), dtype), jnp.ones((128, 128), dtype)
    with pytest.raises(NotImplementedError, match=r"Unsigned integer dtype uint\d+ is not supported for dot_general"):
        _matmul(lhs, rhs, dtype, mosaic_rt.InterpretParams())
    # Stock computes it: the difference is ours, on purpose.
    np.testing.assert_array_equal(np.asarray(_matmul(lhs, rhs, dtype, pltpu.InterpretParams())), 128)


def test_the_same_matmul_cast_to_signed_runs():
    rng = np.random.default_rng(0)
    lhs = jnp.asarray(rng.integers(0, 100, (8, 128)), jnp.uint8)
    rhs = jnp.asarray(rng.integers(0, 100, (128, 128)), jnp.uint8)
    got = _matmul(lhs.astype(jnp.int32), rhs.astype(jnp.int32), jnp.int32, mosaic_rt.InterpretParams())
    np.testing.assert_array_equal(np.asarray(got), np.asarray(lhs, np.int64) @ np.asarray(rhs, np.int64))
