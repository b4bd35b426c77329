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
JAX_VERSION = tuple(int(p) for p in jax.__version__.split(".")[:2])
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


def _capture_scalar(pl, params, x, i):
    # The kernel closes over `i`, a traced scalar of the jitted function:
    # jax passes it as an operand the kernel reads as a value, not through
    # a ref (mpmd_map on jax 0.12). It was passed its buffer's id here, so
    # `x_ref.at[i]` read row 101 (jax's tpu_pallas_state_test
    # test_capture_scalar).
    @jax.jit
    def f(x, i):
        @pl.kernel(out_type=jax.ShapeDtypeStruct((1, *x.shape[1:]), x.dtype), mesh=core_mesh(1), interpret=params)
        def kernel(x_ref, o_ref):
            pltpu.sync_copy(x_ref.at[i], o_ref.at[jax.lax.axis_index("core")])

        return kernel(x)

    return np.asarray(f(x, i))


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_pl_kernel_reads_a_captured_scalar_as_its_value(namespace):
    pl = importlib.import_module(namespace)
    x = jnp.arange(4 * 8 * 128, dtype=jnp.int32).reshape(4, 8, 128)
    for i in range(4):
        ours = _capture_scalar(pl, mosaic_rt.InterpretParams(), x, i)
        np.testing.assert_array_equal(ours[0], np.asarray(x[i]))
    if JAX_VERSION >= (0, 11):
        np.testing.assert_array_equal(ours, _capture_scalar(pl, pltpu.InterpretParams(), x, 3))
    else:
        # jax 0.10.2's stock reads the captured scalar's buffer id too.
        with pytest.raises(Exception, match="Out-of-bounds read"):
            _capture_scalar(pl, pltpu.InterpretParams(), x, 3)
