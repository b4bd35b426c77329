"""pallas_call operands and results that live in VMEM / SMEM on the TPU:
an input constrained there (`pltpu.with_memory_space_constraint`), a result
whose `out_shape` names the space (`pltpu.VMEM(shape, dtype)`), and an
array kept there across kernels by aliasing.

What the TPU does decides (stock interpret mode rejects such operands:
"Unsupported memory space"): the values are the values; an array living in
VMEM that a kernel takes and returns aliased is one array, so what the
kernel does not write keeps its value.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

pytestmark = pytest.mark.timeout(240)

SPACES = [pytest.param(pltpu.VMEM, id="vmem"), pytest.param(pltpu.SMEM, id="smem")]


def _x(shape=(8, 128), dtype=np.float32, seed=0):
    return jnp.asarray(np.random.default_rng(seed).integers(-100, 100, shape).astype(dtype))


@pytest.mark.parametrize("space", SPACES)
def test_input_constrained_to_a_memory_space(space):
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 3

    x = _x((8, 128) if space is pltpu.VMEM else (4, 8), np.int32)
    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=space)],
        out_specs=pl.BlockSpec(memory_space=space),
        interpret=mosaic_rt.InterpretParams(),
    )
    y = jax.jit(lambda x: call(pltpu.with_memory_space_constraint(x, space)))(x)
    np.testing.assert_array_equal(y, np.asarray(x) * 3)


@pytest.mark.parametrize("space", SPACES)
def test_result_whose_out_shape_names_a_memory_space(space):
    def kernel(x_ref, o_ref):
        pltpu.sync_copy(x_ref, o_ref)

    x = _x((8, 128) if space is pltpu.VMEM else (2, 16), np.int32, seed=1)
    call = pl.pallas_call(
        kernel,
        out_shape=space(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=space),
        interpret=mosaic_rt.InterpretParams(),
    )
    np.testing.assert_array_equal(jax.jit(call)(x), x)


def test_vmem_array_taken_and_returned_aliased_is_one_array():
    """The second kernel writes one row of the VMEM-resident array and
    returns it aliased: the other rows keep the first kernel's values."""
    params = mosaic_rt.InterpretParams()

    def fill(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1.0

    def one_row(a_ref, o_ref):
        del a_ref
        o_ref[pl.ds(2, 1), :] = jnp.full((1, 128), -5.0, jnp.float32)

    @jax.jit
    def f(x):
        a = pl.pallas_call(
            fill,
            out_shape=pltpu.VMEM(x.shape, x.dtype),
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
            interpret=params,
        )(x)
        return pl.pallas_call(
            one_row,
            out_shape=pltpu.VMEM(x.shape, x.dtype),
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
            input_output_aliases={0: 0},
            interpret=params,
        )(a)

    x = _x(seed=2)
    expected = np.asarray(x) + np.float32(1.0)
    expected[2] = -5.0
    np.testing.assert_array_equal(f(x), expected)


@pytest.mark.parametrize("mode", ["tpu", "eager"])
def test_copy_into_vmem_started_in_one_kernel_and_waited_in_another(mode):
    params = mosaic_rt.InterpretParams(dma_execution_mode=mode)
    vmem = pltpu.VMEM

    def start_kernel(x_ref, aliased_x_ref, o_ref, sem):
        del aliased_x_ref
        pltpu.make_async_copy(x_ref, o_ref, sem).start()

    def done_kernel(x_ref, o_ref, sem, aliased_o_ref):
        del aliased_o_ref
        pltpu.make_async_copy(x_ref, o_ref, sem).wait()

    @jax.jit
    def f(x):
        x, out, sem = pl.pallas_call(
            start_kernel,
            out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype), vmem(x.shape, x.dtype), pltpu.SemaphoreType.DMA(())),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=(
                pl.BlockSpec(memory_space=pl.ANY),
                pl.BlockSpec(memory_space=vmem),
                pl.BlockSpec(memory_space=pltpu.SEMAPHORE),
            ),
            input_output_aliases={0: 0},
            interpret=params,
        )(x)
        return pl.pallas_call(
            done_kernel,
            out_shape=vmem(x.shape, x.dtype),
            in_specs=[
                pl.BlockSpec(memory_space=pl.ANY),
                pl.BlockSpec(memory_space=vmem),
                pl.BlockSpec(memory_space=pltpu.SEMAPHORE),
            ],
            out_specs=pl.BlockSpec(memory_space=vmem),
            input_output_aliases={1: 0},
            interpret=params,
        )(x, out, sem)

    x = _x(seed=3)
    np.testing.assert_array_equal(f(x), x)


def test_hbm_aliased_output_a_kernel_does_not_write_stays_as_stock_has_it():
    """Not resident: an input in HBM seen as a VMEM block and aliased to
    the output is copied in and out as blocks (stock's behaviour, kept bit
    for bit): the output block the kernel does not write is the block
    buffer's uninitialised content."""

    def kernel(x_ref, o_ref):
        del x_ref, o_ref

    x = _x(seed=4)

    def run(params):
        return np.asarray(
            jax.jit(
                pl.pallas_call(
                    kernel,
                    out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                    input_output_aliases={0: 0},
                    interpret=params,
                )
            )(x)
        )

    np.testing.assert_array_equal(run(mosaic_rt.InterpretParams()), run(pltpu.InterpretParams()))
