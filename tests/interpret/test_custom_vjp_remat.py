"""Kernels inside `jax.custom_vjp` (a forward and a backward `pallas_call`),
differentiated with `jax.grad` and rematerialized with `jax.checkpoint` /
`jax.remat`, as attention kernels are in training code.

Without remat the gradients are stock's bit for bit. Under remat stock's
interpreter raises (its kernels are `io_callback`s, and jax's partial
evaluation of `checkpoint` refuses their effects), while a TPU runs the
kernels again in the backward pass; ours are ordinary XLA plus FFI calls
without effects, so remat works, and it recomputes the same kernels, so the
gradients are the ones without remat, bit for bit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

_ROWS, _COLS, _BLOCK = 32, 128, 8


def _spec():
    return pl.BlockSpec((_BLOCK, _COLS), lambda i: (i, 0))


def _forward_kernel(x_ref, w_ref, o_ref):
    o_ref[...] = jnp.tanh(x_ref[...]) * w_ref[...]


def _backward_kernel(x_ref, w_ref, g_ref, dx_ref, dw_ref):
    t = jnp.tanh(x_ref[...])
    dx_ref[...] = g_ref[...] * w_ref[...] * (1.0 - t * t)
    dw_ref[...] = g_ref[...] * t


def _layer(params):
    """`tanh(x) * w` as a custom_vjp whose both passes are kernels."""
    grid = (_ROWS // _BLOCK,)
    out = jax.ShapeDtypeStruct((_ROWS, _COLS), jnp.float32)

    def forward(x, w):
        return pl.pallas_call(
            _forward_kernel, out_shape=out, grid=grid, in_specs=[_spec()] * 2, out_specs=_spec(), interpret=params
        )(x, w)

    def backward(x, w, g):
        return pl.pallas_call(
            _backward_kernel,
            out_shape=(out, out),
            grid=grid,
            in_specs=[_spec()] * 3,
            out_specs=(_spec(), _spec()),
            interpret=params,
        )(x, w, g)

    @jax.custom_vjp
    def layer(x, w):
        return forward(x, w)

    layer.defvjp(lambda x, w: (forward(x, w), (x, w)), lambda res, g: backward(*res, g))
    return layer


def _loss(params, remat: bool):
    layer = _layer(params)

    def first(x, w):
        return layer(x, w) * 2.0

    def second(y, w):
        return jnp.sin(layer(y, w))

    if remat:
        first = jax.checkpoint(first, policy=jax.checkpoint_policies.nothing_saveable)
        second = jax.remat(second)
    return lambda x, w: jnp.sum(second(first(x, w), w))


def _value_and_grads(params, remat: bool):
    x = jax.random.normal(jax.random.key(0), (_ROWS, _COLS), jnp.float32)
    w = jax.random.normal(jax.random.key(1), (_ROWS, _COLS), jnp.float32)
    value, grads = jax.jit(jax.value_and_grad(_loss(params, remat), argnums=(0, 1)))(x, w)
    return [np.asarray(a) for a in (value, *grads)]


def _reference():
    """The same loss in plain jnp (jax's own derivative of tanh)."""
    x = jax.random.normal(jax.random.key(0), (_ROWS, _COLS), jnp.float32)
    w = jax.random.normal(jax.random.key(1), (_ROWS, _COLS), jnp.float32)

    def loss(x, w):
        return jnp.sum(jnp.sin(jnp.tanh(jnp.tanh(x) * w * 2.0) * w))

    value, grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))(x, w)
    return [np.asarray(a) for a in (value, *grads)]


def test_gradients_through_kernels_are_stocks():
    stock = _value_and_grads(pltpu.InterpretParams(), remat=False)
    ours = _value_and_grads(mosaic_rt.InterpretParams(), remat=False)
    for s, o in zip(stock, ours, strict=True):
        np.testing.assert_array_equal(o, s)


@pytest.mark.parametrize("dma_execution_mode", ["eager", "on_wait"])
def test_remat_recomputes_the_kernels(dma_execution_mode):
    params = mosaic_rt.InterpretParams(dma_execution_mode=dma_execution_mode)
    with_remat = _value_and_grads(params, remat=True)
    without = _value_and_grads(params, remat=False)
    for r, o in zip(with_remat, without, strict=True):
        np.testing.assert_array_equal(r, o)
    # And they are the loss's gradients (jnp's own derivative, to rounding).
    for r, ref in zip(with_remat, _reference(), strict=True):
        np.testing.assert_allclose(r, ref, rtol=2e-5, atol=2e-5)
