"""TPU primitives and ref views that newer jax releases added, on every
supported release where they exist: they run (compared with stock where
stock can run them, else with a numpy/lax reference), or fail with a clear
NotImplementedError naming the primitive."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

pytestmark = pytest.mark.timeout(120)

OURS = mosaic_rt.InterpretParams()
X = jnp.arange(8 * 128, dtype=jnp.float32).reshape(8, 128)


def _needs(name):
    return pytest.mark.skipif(not hasattr(pltpu, name), reason=f"pltpu.{name} is not in jax {jax.__version__}")


@_needs("conv")
def test_conv_runs_with_an_accumulator():
    rng = np.random.RandomState(0)
    lhs = jnp.asarray(rng.randn(1, 8, 8, 4), jnp.float32)
    rhs = jnp.asarray(rng.randn(3, 3, 4, 8), jnp.float32)
    acc = jnp.full((1, 8, 8, 8), 0.5, jnp.float32)

    def kernel(l_ref, r_ref, a_ref, o_ref):
        o_ref[...] = pltpu.conv(
            l_ref[...], r_ref[...], a_ref[...], dimension_numbers=("NHWC", "HWIO", "NHWC"), padding="SAME"
        )

    out = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(acc.shape, jnp.float32), interpret=OURS)(lhs, rhs, acc)
    ref = lax.conv_general_dilated(lhs, rhs, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")) + 0.5
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), rtol=1e-6, atol=1e-5)


@_needs("matmul_pop_fifo")
def test_mxu_fifo_ops_name_the_primitive():
    def kernel(x_ref, o_ref):
        o_ref[...] = pltpu.matmul_pop_fifo((8, 128), jnp.float32, 0)

    with pytest.raises(NotImplementedError, match="matmul_pop_fifo"):
        pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32), interpret=OURS)(X)


@_needs("trace_value")
def test_trace_value_is_a_no_op():
    def kernel(x_ref, o_ref):
        v = x_ref[...]
        pltpu.trace_value("first", v[0, 0])
        o_ref[...] = v + 1

    out = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(X.shape, X.dtype), interpret=OURS)(X)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(X) + 1)


@_needs("has_memory_space")
@pytest.mark.parametrize("space", ["HBM", "VMEM"])
def test_has_memory_space_sees_any_refs_in_hbm(space):
    memory_space = getattr(pltpu, space)

    def kernel(x_ref, o_ref):
        o_ref[...] = jnp.full(o_ref.shape, pltpu.has_memory_space(x_ref, memory_space).astype(jnp.float32))

    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(X.shape, X.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        interpret=OURS,
    )(X)
    assert bool(np.asarray(out).all()) == (space == "HBM")


def test_transposed_ref_view_reads_and_writes():
    y = jnp.arange(128 * 8, dtype=jnp.float32).reshape(128, 8)

    def kernel(x_ref, y_ref, o_ref, t_ref):
        o_ref[...] = y_ref.T[...] + x_ref[...]  # read through a transpose
        t_ref.T[...] = x_ref[...] * 2.0  # write through one

    out, t = pl.pallas_call(
        kernel,
        out_shape=(jax.ShapeDtypeStruct(X.shape, X.dtype), jax.ShapeDtypeStruct(y.shape, y.dtype)),
        interpret=OURS,
    )(X, y)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(y).T + np.asarray(X))
    np.testing.assert_array_equal(np.asarray(t), (np.asarray(X) * 2.0).T)
