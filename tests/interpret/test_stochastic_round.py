"""`pltpu.stochastic_round` (no CPU lowering, no stock rule): every result is
one of the two neighbours of x in the target type, chosen by the kernel's
random bits with probability by distance; exact values, NaN and the TPU
lowering's input checks as on a TPU."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

if not hasattr(pltpu, "stochastic_round"):  # pragma: no cover - every supported jax has it
    pytest.skip("this jax has no pltpu.stochastic_round", allow_module_level=True)

FLOATS = [jnp.bfloat16, jnp.float8_e5m2, jnp.float8_e4m3fn, jnp.float8_e4m3b11fnuz]
SHAPE = (8, 128)


def _round(x, bits, target):
    def kernel(x_ref, b_ref, o_ref):
        o_ref[...] = pltpu.stochastic_round(x_ref[...], b_ref[...], target_dtype=target)

    call = pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct(x.shape, target), interpret=mosaic_rt.InterpretParams()
    )
    return jax.jit(call)(x, bits)


def _bits(seed, shape=SHAPE):
    return jax.random.bits(jax.random.key(seed), shape, dtype=jnp.uint32)


def _neighbours(x, target):
    finfo = jnp.finfo(target)
    cast = x.astype(target)
    as_f32 = cast.astype(jnp.float32)
    lower = jnp.where(as_f32 > x, jnp.nextafter(cast, finfo.min), cast)
    upper = jnp.where(as_f32 < x, jnp.nextafter(cast, finfo.max), cast)
    return lower, upper


@pytest.mark.parametrize("target", FLOATS, ids=lambda t: jnp.dtype(t).name)
def test_every_result_is_a_neighbour_of_x(target):
    x = jax.random.normal(jax.random.key(1), SHAPE, dtype=jnp.float32) * 3.0
    out = _round(x, _bits(2), target)
    lower, upper = _neighbours(x, target)
    as_bits = lambda a: np.asarray(a).view(f"uint{jnp.dtype(target).itemsize * 8}")  # noqa: E731
    ok = (as_bits(out) == as_bits(lower)) | (as_bits(out) == as_bits(upper))
    assert ok.all(), np.asarray(x)[~ok][:5]
    # Both neighbours occur: the bits choose.
    assert (as_bits(out) != as_bits(lower)).any() and (as_bits(out) != as_bits(upper)).any()


@pytest.mark.parametrize("target", FLOATS, ids=lambda t: jnp.dtype(t).name)
def test_representable_values_and_nan_stay(target):
    grid = np.array(jnp.linspace(-2.0, 2.0, 8 * 128).astype(target).astype(jnp.float32)).reshape(SHAPE)
    grid[0, :4] = [np.nan, 0.0, -0.0, 1.0]
    out = np.asarray(_round(jnp.asarray(grid), _bits(3), target)).astype(np.float32)
    np.testing.assert_array_equal(out, grid)  # NaN compares equal to NaN here
    has_negative_zero = np.signbit(np.asarray(-0.0, np.float32).astype(target))  # not the fnuz types
    assert np.signbit(out[0, 2]) == has_negative_zero


def test_rounding_is_unbiased():
    # x a third of the way from 1 to bf16's next value: about a third of
    # the results round up, whatever the bits.
    ulp = float(jnp.nextafter(jnp.bfloat16(1.0), jnp.bfloat16(2.0))) - 1.0
    x = jnp.full((64, 128), 1.0 + ulp / 3, jnp.float32)
    out = np.asarray(_round(x, _bits(4, x.shape), jnp.bfloat16)).astype(np.float32)
    up = (out > 1.0).mean()
    assert set(np.unique(out)) <= {1.0, 1.0 + ulp}
    assert abs(up - 1 / 3) < 0.02, up
    # The same bits give the same results (the kernel is deterministic).
    np.testing.assert_array_equal(out, np.asarray(_round(x, _bits(4, x.shape), jnp.bfloat16)).astype(np.float32))


def test_non_f32_input_is_rejected_as_by_the_tpu_lowering():
    x = jnp.ones(SHAPE, jnp.bfloat16)
    with pytest.raises(ValueError, match="Only float32 input is supported"):
        _round(x, _bits(5), jnp.float8_e5m2)
