"""jax.random's `threefry2x32` primitive inside a kernel runs as one native
call (`rust/programs/src/threefry.rs`) instead of XLA's 20 unrolled rounds:
stock's bits, whatever the operands' broadcasting, and no fusion for it."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from mosaic_rt import jax_internals as jx
from parity import assert_bitwise_equal, run_case

pytestmark = pytest.mark.timeout(120)

_SHAPE = (8, 128)


class _Case:
    def __init__(self, fn, *args):
        self.fn, self.args = fn, args


def _kernel_fn(key_shape):
    """Hashes the counters of x_ref under keys of `key_shape` ((1, 1) from
    SMEM scalars as jax's kernels do; else read from VMEM)."""

    def kernel(k_ref, x_ref, o0_ref, o1_ref):
        x = x_ref[...]
        if key_shape == (1, 1):
            k0 = jnp.reshape(k_ref[0, 0], (1, 1))
            k1 = jnp.reshape(k_ref[0, 1], (1, 1))
        else:
            k0, k1 = k_ref[0], k_ref[1]
        o0_ref[...], o1_ref[...] = jx.threefry2x32_p.bind(k0, k1, x, x ^ jnp.uint32(0xA5A5A5A5))

    def fn(params, keys, x):
        out = jax.ShapeDtypeStruct(_SHAPE, jnp.uint32)
        key_spec = (
            pl.BlockSpec(memory_space=pltpu.SMEM)
            if key_shape == (1, 1)
            else pl.BlockSpec((2, *key_shape), lambda: (0,) * (1 + len(key_shape)))
        )
        return pl.pallas_call(
            kernel, out_shape=(out, out), in_specs=[key_spec, pl.BlockSpec(_SHAPE, lambda: (0, 0))], interpret=params
        )(keys, x)

    return fn


_X = np.arange(8 * 128, dtype=np.uint32).reshape(_SHAPE) * np.uint32(2654435761)


@pytest.mark.parametrize("key_shape", [(1, 1), _SHAPE, (8, 1)], ids=str)
def test_threefry_is_stocks_bit_for_bit(key_shape):
    rng = np.random.default_rng(7)
    if key_shape == (1, 1):
        keys = rng.integers(0, 2**32, (1, 2), dtype=np.uint32)
    else:
        keys = rng.integers(0, 2**32, (2, *key_shape), dtype=np.uint32)
    fn = _kernel_fn(key_shape)
    case = _Case(fn, keys, _X)
    stock = run_case(case, pltpu.InterpretParams())
    ours = run_case(case, mosaic_rt.InterpretParams())
    assert not isinstance(ours, BaseException), ours
    assert_bitwise_equal(stock, ours)


def test_threefry_compiles_no_fusion_of_its_rounds():
    keys = np.array([[1, 2]], np.uint32)
    fn = _kernel_fn((1, 1))
    lowered = jax.jit(lambda k, x: fn(mosaic_rt.InterpretParams(), k, x)).lower(keys, _X)
    assert len(re.findall(r"custom_call @mosaic_rt_threefry2x32\b", lowered.as_text())) == 1
    hlo = lowered.compile().as_text()
    assert len(re.findall(r"= \S+ fusion\(", hlo)) <= 1  # at most the counters' xor


def test_known_answers_through_a_kernel():
    """Random123's known-answer vector: key (0x13198a2e, 0x03707344),
    counters (0x243f6a88, 0x85a308d3) -> (0xc4923a9c, 0x483df7a0)."""

    def kernel(o0_ref, o1_ref):
        k0 = jnp.full((1, 1), 0x13198A2E, jnp.uint32)
        k1 = jnp.full((1, 1), 0x03707344, jnp.uint32)
        x0 = jnp.full(_SHAPE, 0x243F6A88, jnp.uint32)
        x1 = jnp.full(_SHAPE, 0x85A308D3, jnp.uint32)
        o0_ref[...], o1_ref[...] = jx.threefry2x32_p.bind(k0, k1, x0, x1)

    out = jax.ShapeDtypeStruct(_SHAPE, jnp.uint32)
    y0, y1 = pl.pallas_call(kernel, out_shape=(out, out), interpret=mosaic_rt.InterpretParams())()
    assert (np.asarray(y0) == 0xC4923A9C).all() and (np.asarray(y1) == 0x483DF7A0).all()
