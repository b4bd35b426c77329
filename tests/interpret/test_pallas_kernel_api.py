"""`pl.kernel` (which replaces the deprecated `pl.core_map`) and the public
`jax.pallas` namespace of jax 0.12.1 run on mosaic_rt like `pallas_call`,
bit for bit with stock, on every jax that has them."""

from __future__ import annotations

import importlib

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from core_mesh import core_mesh
from jax.experimental.pallas import tpu as pltpu

# `jax.pallas` (0.12.1+) and `jax.experimental.pallas` (every release).
NAMESPACES = [name for name in ("jax.experimental.pallas", "jax.pallas") if importlib.util.find_spec(name)]


def _two_core_swap(pl, params):
    # Each of two TensorCores copies its half of x through a DMA, then the
    # halves come out swapped: a core_map-style kernel with a DMA semaphore.
    x = jnp.arange(2 * 8 * 128, dtype=jnp.float32).reshape(16, 128)

    @pl.kernel(
        out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
        mesh=core_mesh(2),
        interpret=params,
        scratch_types=[pltpu.SemaphoreType.DMA(())],
    )
    def swap(x_hbm, o_hbm, sem):
        core = jax.lax.axis_index("core")
        src = pl.ds(pl.multiple_of(core * 8, 8), 8)
        dst = pl.ds(pl.multiple_of((1 - core) * 8, 8), 8)
        pltpu.async_copy(x_hbm.at[src], o_hbm.at[dst], sem).wait()

    return np.asarray(jax.block_until_ready(swap(x))), np.asarray(x)


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_pl_kernel_over_two_cores_matches_stock(namespace):
    pl = importlib.import_module(namespace)
    ours, x = _two_core_swap(pl, mosaic_rt.InterpretParams())
    stock, _ = _two_core_swap(pl, pltpu.InterpretParams())
    np.testing.assert_array_equal(ours, np.concatenate([x[8:], x[:8]]))
    np.testing.assert_array_equal(ours, stock)


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_pallas_call_through_either_namespace(namespace):
    pl = importlib.import_module(namespace)

    def add_one(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1.0

    x = jnp.arange(16 * 128, dtype=jnp.float32).reshape(16, 128)
    f = pl.pallas_call(
        add_one,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(2,),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
        interpret=mosaic_rt.InterpretParams(),
    )
    np.testing.assert_array_equal(np.asarray(f(x)), np.asarray(x) + 1)


def test_force_interpret_mode_takes_pl_kernel():
    from jax.experimental import pallas as pl

    with mosaic_rt.force_interpret_mode(mosaic_rt.InterpretParams()):
        ours, x = _two_core_swap(pl, False)
    np.testing.assert_array_equal(ours, np.concatenate([x[8:], x[:8]]))
