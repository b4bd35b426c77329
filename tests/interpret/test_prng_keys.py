"""Typed PRNG keys (``key<fry>``, Pallas' ``key<pl>``) as kernel operands,
results and scratch: they live in memory as their key data (as the TPU's
lowering keeps them), so loads, stores and DMAs move key data and the
kernel sees typed keys.

Stock interpret mode cannot run these (it fills key buffers with NaN).
Oracles: jax.random outside the kernel for jax's own impls (bit for bit),
and for Pallas keys the key data itself and the properties the TPU's PRNG
gives (the same key, the same bits; a folded key, other bits).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax import random as jr
from jax._src.pallas.mosaic import random as plrandom
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

pytestmark = pytest.mark.timeout(240)

PARAMS = mosaic_rt.InterpretParams()
SMEM = pltpu.SMEM


def _call(kernel, out_shape, *, in_specs, out_specs=None):
    specs = {} if out_specs is None else {"out_specs": out_specs}
    return pl.pallas_call(kernel, out_shape=out_shape, in_specs=in_specs, interpret=PARAMS, **specs)


def test_threefry_key_used_in_a_kernel_gives_jax_randoms_bits():
    key = jr.key(7, impl="threefry2x32")

    def kernel(key_ref, o_ref):
        o_ref[...] = jr.bits(key_ref[...], shape=o_ref.shape, dtype=jnp.uint32)

    out = _call(kernel, jax.ShapeDtypeStruct((8, 128), jnp.uint32), in_specs=[pl.BlockSpec(memory_space=SMEM)])(key)
    np.testing.assert_array_equal(out, jr.bits(key, (8, 128), jnp.uint32))


def test_key_result_written_by_a_kernel_is_the_folded_key():
    key = jr.key(3, impl="threefry2x32")

    def kernel(key_ref, o_ref):
        o_ref[...] = jr.fold_in(key_ref[...], 11)

    out = jax.jit(
        _call(
            kernel,
            jax.ShapeDtypeStruct((), key.dtype),
            in_specs=[pl.BlockSpec(memory_space=SMEM)],
            out_specs=pl.BlockSpec(memory_space=SMEM),
        )
    )(key)
    np.testing.assert_array_equal(jr.key_data(out), jr.key_data(jr.fold_in(key, 11)))


@pytest.mark.parametrize("impl", ["threefry2x32", "pallas"])
def test_key_copied_by_dma_keeps_its_key_data(impl):
    key = jr.key(5, impl="threefry2x32")
    if impl == "pallas":
        key = pltpu.to_pallas_key(jr.key(5, impl="rbg"))

    def kernel(x_ref, o_ref):
        pltpu.sync_copy(x_ref, o_ref)

    out = jax.jit(
        _call(
            kernel,
            jax.ShapeDtypeStruct((), key.dtype),
            in_specs=[pl.BlockSpec(memory_space=SMEM)],
            out_specs=pl.BlockSpec(memory_space=SMEM),
        )
    )(key)
    np.testing.assert_array_equal(jr.key_data(out), jr.key_data(key))


def test_pallas_key_words_in_the_kernel_are_its_key_data():
    key = pltpu.to_pallas_key(jr.key(0, impl="rbg"))
    data = jr.key_data(key)

    def kernel(key_ref, o_ref):
        w0, w1 = plrandom.unwrap_pallas_seed(key_ref[...])
        o_ref[0, 0] = w0
        o_ref[0, 1] = w1

    out = _call(
        kernel,
        jax.ShapeDtypeStruct.like(data),
        in_specs=[pl.BlockSpec(memory_space=SMEM)],
        out_specs=pl.BlockSpec(memory_space=SMEM),
    )(key)
    np.testing.assert_array_equal(out, data)


def _uniform_pair(key, fold):
    """Two draws of the kernel's PRNG: from the key, then from the key with
    `fold` folded in (or the key again)."""

    def kernel(key_ref, o_ref):
        k = key_ref[0, 0]  # a (1, 1) array of keys, one used
        o_ref[0] = jr.uniform(k, shape=o_ref.shape[1:])
        o_ref[1] = jr.uniform(jr.fold_in(k, jnp.uint32(fold)) if fold is not None else k, shape=o_ref.shape[1:])

    return np.asarray(
        _call(kernel, jax.ShapeDtypeStruct((2, 8, 128), jnp.float32), in_specs=[pl.BlockSpec(memory_space=SMEM)])(
            jnp.reshape(key, (1, 1))
        )
    )


def test_pallas_key_draws_repeat_for_a_key_and_differ_after_fold_in():
    key = pltpu.to_pallas_key(jr.key(1, impl="rbg"))
    same = _uniform_pair(key, None)
    np.testing.assert_array_equal(same[0], same[1])
    assert ((same >= 0.0) & (same < 1.0)).all()
    folded = _uniform_pair(key, 2)
    np.testing.assert_array_equal(folded[0], same[0])
    assert (folded[0] != folded[1]).mean() > 0.99


def test_key_in_hbm_copied_to_smem_scratch_then_used():
    key = jr.key(9, impl="threefry2x32")

    def kernel(key_hbm, o_ref):
        @functools.partial(pl.run_scoped, key_smem=SMEM((), key_hbm.dtype))
        def _(key_smem):
            pltpu.sync_copy(key_hbm, key_smem)
            o_ref[...] = jr.bits(key_smem[...], shape=o_ref.shape, dtype=jnp.uint32)

    out = _call(kernel, jax.ShapeDtypeStruct((8, 128), jnp.uint32), in_specs=[pl.BlockSpec(memory_space=pl.ANY)])(key)
    np.testing.assert_array_equal(out, jr.bits(key, (8, 128), jnp.uint32))


def test_stateful_pallas_sampler_after_seeding_with_a_key():
    key = pltpu.to_pallas_key(jr.key(4, impl="rbg"))

    def kernel(key_ref, o_ref):
        pltpu.prng_seed(key_ref[...])
        o_ref[0] = pltpu.stateful_uniform(shape=o_ref.shape[1:])
        pltpu.prng_seed(key_ref[...])
        o_ref[1] = pltpu.stateful_uniform(shape=o_ref.shape[1:])

    out = np.asarray(
        _call(kernel, jax.ShapeDtypeStruct((2, 8, 128), jnp.float32), in_specs=[pl.BlockSpec(memory_space=SMEM)])(key)
    )
    np.testing.assert_array_equal(out[0], out[1])
    assert len(np.unique(out[0])) > 1000
