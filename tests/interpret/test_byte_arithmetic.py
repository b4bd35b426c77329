"""8-bit integer arithmetic wraps, as on a TPU, also where it feeds a min /
max reduction: XLA:CPU saturates 8-bit add / sub / mul / neg it fuses into
such a reduction (plain `jax.jit` and stock interpret mode give -128 / 127
there), and the interpreter computes them wide. Found by the fuzzer (case
elementwise:308001568, `jnp.min(y + (x | y), axis=1)` over int8 rows)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax.experimental import pallas as pl

OPS = {
    "add": lambda x, y: x + y,
    "sub": lambda x, y: y - x,
    "mul": lambda x, y: x * y,
    "neg": lambda x, y: -x,
}


def _inputs(dtype):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(0)
    x = rng.integers(info.min, int(info.max) + 1, size=(32, 128)).astype(dtype)
    y = rng.integers(info.min, int(info.max) + 1, size=(32, 1)).astype(dtype)
    return x, y


@pytest.mark.parametrize("reduce", ["min", "max"])
@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_wraps_into_a_reduction(dtype, op, reduce):
    x, y = _inputs(dtype)

    def kernel(x_ref, y_ref, o_ref):
        v = OPS[op](x_ref[...], y_ref[...])
        o_ref[...] = getattr(jnp, reduce)(v, axis=1, keepdims=True)

    call = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((32, 1), dtype), interpret=mosaic_rt.InterpretParams())
    with np.errstate(over="ignore"):
        want = getattr(np, reduce)(OPS[op](x, y).astype(dtype), axis=1, keepdims=True)
    np.testing.assert_array_equal(np.asarray(call(x, y)), want)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16])
def test_elementwise_results_and_types_unchanged(dtype):
    # The wide computation gives the narrow op's own type and values.
    x, y = _inputs(dtype)

    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = (x_ref[...] * y_ref[...] - x_ref[...]) + (-y_ref[...])

    call = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, dtype), interpret=mosaic_rt.InterpretParams())
    got = np.asarray(call(x, y))
    assert got.dtype == dtype
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(got, (x * y - x) + (-y))
