"""Every mismatch the fuzzer (tests/support/fuzzing, scripts/fuzz.py) found,
as a test of its own: the shrunk kernel, stock vs mosaic_rt bit for bit
(or, where stock is wrong, mosaic_rt vs the kernel's meaning)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from parity import assert_bitwise_equal

pytestmark = pytest.mark.timeout(120)


def _both(kernel, out_shape, *args, **knobs):
    """(stock's outputs, ours) of one pallas_call, as numpy."""
    outs = []
    for params in (pltpu.InterpretParams(**knobs), mosaic_rt.InterpretParams(**knobs)):
        out = pl.pallas_call(kernel, out_shape=out_shape, interpret=params)(*args)
        outs.append(jax.tree.map(np.asarray, out))
    return outs


def _assert_same(kernel, out_shape, *args, **knobs):
    stock, ours = _both(kernel, out_shape, *args, **knobs)
    assert_bitwise_equal(stock, ours)
    return ours


# Issue 56: a one-element block's loaded value, still a pending `batch`
# member's result (`batching.Lazy`), went into a vector program through a
# reshape to rank 0 (TypeError: reshape requires ndarray ... Lazy). A
# one-element operand of any shape is now the program's scalar as it is.
@pytest.mark.parametrize("dtype", [jnp.int32, jnp.uint32, jnp.int8, jnp.float32, jnp.uint16])
def test_one_element_block_computes_natively(dtype):
    def kernel(x_ref, y_ref, o_ref):
        a, b = x_ref[...], y_ref[...]
        o_ref[...] = a * b + 3

    x = jnp.full((1, 1), 5, dtype)
    y = jnp.full((1, 1), 7, dtype)
    out = _assert_same(kernel, jax.ShapeDtypeStruct((1, 1), dtype), x, y)
    assert out.tolist() == [[38]]


def test_one_element_rank1_sum():
    # The fuzzer's shrunk case: a (1,) uint16 operand summed (a convert to
    # uint32 of the loaded value, then a reduction).
    def kernel(x_ref, o_ref):
        o_ref[...] = jnp.sum(x_ref[...], axis=0, keepdims=True)

    x = np.asarray([65535], np.uint16)
    out = _assert_same(kernel, jax.ShapeDtypeStruct((1,), jnp.uint32), x)
    assert out.tolist() == [65535]


# Issue 56: `broadcasted_iota((1, 1, 1)) == 0` broadcast to (1, 1, 128) in a
# vector program of 128 elements: the one-element iota counted along the
# program's 128 elements and came back at that shape (cannot reshape (1, 1,
# 128) into (1, 1, 1)). A one-element iota is the constant 0.
def test_one_element_iota_broadcast_in_a_select():
    def kernel(x_ref, o_ref):
        m = lax.broadcasted_iota(jnp.int32, (1, 1, 1), 1) == 0
        o_ref[...] = jnp.where(jnp.broadcast_to(m, (1, 1, 128)), x_ref[...], 0.0)

    x = jnp.arange(128, dtype=jnp.float32).reshape(1, 1, 128)
    out = _assert_same(kernel, jax.ShapeDtypeStruct((1, 1, 128), jnp.float32), x)
    np.testing.assert_array_equal(out, np.asarray(x))


def test_one_element_iota_of_every_dimension_is_zero():
    def kernel(x_ref, o_ref):
        acc = x_ref[...]
        for d in range(3):
            acc = acc + jnp.broadcast_to(lax.broadcasted_iota(jnp.int32, (1, 1, 1), d), (2, 8, 128))
        o_ref[...] = acc

    x = jnp.arange(2 * 8 * 128, dtype=jnp.int32).reshape(2, 8, 128)
    out = _assert_same(kernel, jax.ShapeDtypeStruct((2, 8, 128), jnp.int32), x)
    np.testing.assert_array_equal(out, np.asarray(x))


# The fuzzer (transforms): a kernel with dimension_semantics under jax.vmap
# failed in both interpreters (safe_zip: the user's semantics zipped with
# the whole grid, vmapped dimension included). The TPU lowering gives every
# vmapped grid dimension "parallel" and the user's semantics to the user's
# grid; mosaic_rt now does the same (stock still fails).
@pytest.mark.parametrize("semantics", [("arbitrary",), ("parallel",)])
def test_vmap_of_a_kernel_with_dimension_semantics(semantics):
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2 + pl.program_id(0).astype(jnp.float32)

    def call(params, **kw):
        spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32),
            grid=(2,),
            in_specs=[spec],
            out_specs=spec,
            interpret=params,
            **kw,
        )

    xs = jnp.arange(3 * 16 * 128, dtype=jnp.float32).reshape(3, 16, 128)
    with_semantics = {"compiler_params": pltpu.CompilerParams(dimension_semantics=semantics)}
    ours = jax.jit(jax.vmap(call(mosaic_rt.InterpretParams(), **with_semantics)))(xs)
    # Without semantics both interpreters run it: the same bits.
    stock = jax.jit(jax.vmap(call(pltpu.InterpretParams())))(xs)
    assert_bitwise_equal(np.asarray(stock), np.asarray(ours))
    rows = np.repeat(np.arange(2, dtype=np.float32), 8)[None, :, None]
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(xs) * 2 + rows)
    # Nested: two vmapped dimensions before the user's one.
    ours2 = jax.jit(jax.vmap(jax.vmap(call(mosaic_rt.InterpretParams(), **with_semantics))))(xs[None])
    np.testing.assert_array_equal(np.asarray(ours2)[0], np.asarray(ours))
