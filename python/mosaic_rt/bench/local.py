"""Single-device benchmark kernels: DMA pipeline, BlockSpec add, matmul, semaphores.

Each builder returns `(fn, args)` where `fn(interpret)` is a jitted program
taking `args`. Inputs hold small integers so every result is exact in float32.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

_LANES = 128


def _small_ints(shape, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(-8, 8, size=shape).astype(np.float32)


# -- double-buffered DMA pipeline ------------------------------------------------


def _pipeline_kernel(chunks, x_hbm, o_hbm, in_buf, out_buf, in_sems, out_sems):
    def fetch(i, slot):
        return pltpu.make_async_copy(x_hbm.at[i], in_buf.at[slot], in_sems.at[slot])

    def store(i, slot):
        return pltpu.make_async_copy(out_buf.at[slot], o_hbm.at[i], out_sems.at[slot])

    fetch(0, 0).start()

    def step(i, carry):
        slot = i % 2
        fetch(i, slot).wait()

        @pl.when(i + 1 < chunks)
        def _():
            fetch(i + 1, 1 - slot).start()

        # The store that used this output slot two chunks ago must be done first.
        @pl.when(i >= 2)
        def _():
            store(i - 2, slot).wait()

        out_buf[slot] = in_buf[slot] * 2.0 + 1.0
        store(i, slot).start()
        return carry

    lax.fori_loop(0, chunks, step, 0)
    for back in (2, 1):  # drain the last two stores
        if chunks >= back:
            store(chunks - back, (chunks - back) % 2).wait()


def dma_pipeline(chunks: int, rows: int = 8):
    """HBM -> VMEM -> compute -> HBM over `chunks` chunks, two buffers each way (2 DMAs/chunk)."""
    x = jnp.asarray(_small_ints((chunks, rows, _LANES), seed=1))

    def fn(interpret):
        return jax.jit(
            pl.pallas_call(
                functools.partial(_pipeline_kernel, chunks),
                out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                out_specs=pl.BlockSpec(memory_space=pl.ANY),
                scratch_shapes=[
                    pltpu.VMEM((2, rows, _LANES), jnp.float32),
                    pltpu.VMEM((2, rows, _LANES), jnp.float32),
                    pltpu.SemaphoreType.DMA((2,)),
                    pltpu.SemaphoreType.DMA((2,)),
                ],
                interpret=interpret,
            )
        )

    return fn, (x,)


# -- BlockSpec elementwise add ----------------------------------------------------


def _add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def blockspec_add(grid: int, rows: int = 8):
    """(grid*rows, 128) f32 add, one (rows, 128) block per grid step."""
    x = jnp.asarray(_small_ints((grid * rows, _LANES), seed=2))
    y = jnp.asarray(_small_ints((grid * rows, _LANES), seed=3))
    spec = pl.BlockSpec((rows, _LANES), lambda i: (i, 0))

    def fn(interpret):
        return jax.jit(
            pl.pallas_call(
                _add_kernel,
                out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                grid=(grid,),
                in_specs=[spec, spec],
                out_specs=spec,
                interpret=interpret,
            )
        )

    return fn, (x, y)


# -- blocked matmul -----------------------------------------------------------------


def _matmul_kernel(a_ref, b_ref, o_ref, acc_ref):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(2) - 1)
    def _():
        o_ref[...] = acc_ref[...]


def blocked_matmul(blocks: int, tile: int = 128):
    """(blocks*tile)^2 matmul on a (blocks, blocks, blocks) grid of tile^3 products."""
    size = blocks * tile
    a = jnp.asarray(_small_ints((size, size), seed=4))
    b = jnp.asarray(_small_ints((size, size), seed=5))

    def fn(interpret):
        return jax.jit(
            pl.pallas_call(
                _matmul_kernel,
                out_shape=jax.ShapeDtypeStruct((size, size), jnp.float32),
                grid=(blocks, blocks, blocks),
                in_specs=[
                    pl.BlockSpec((tile, tile), lambda i, j, k: (i, k)),
                    pl.BlockSpec((tile, tile), lambda i, j, k: (k, j)),
                ],
                out_specs=pl.BlockSpec((tile, tile), lambda i, j, k: (i, j)),
                scratch_shapes=[pltpu.VMEM((tile, tile), jnp.float32)],
                compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
                interpret=interpret,
            )
        )

    return fn, (a, b)


# -- many semaphore operations --------------------------------------------------------


def _semaphore_loop_kernel(iters, x_ref, o_ref, sem):
    def body(i, total):
        pl.semaphore_signal(sem, 2)
        pl.semaphore_wait(sem, 1)
        pl.semaphore_wait(sem, 1)
        return total + 1

    total = lax.fori_loop(0, iters, body, jnp.int32(0))
    o_ref[...] = x_ref[...] + total.astype(o_ref.dtype)


def semaphore_loop(iters: int, rows: int = 8):
    """One core: `iters` rounds of signal(2), wait(1), wait(1) on a REGULAR semaphore."""
    x = jnp.asarray(_small_ints((rows, _LANES), seed=6))

    def fn(interpret):
        return jax.jit(
            pl.pallas_call(
                functools.partial(_semaphore_loop_kernel, iters),
                out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                scratch_shapes=[pltpu.SemaphoreType.REGULAR],
                interpret=interpret,
            )
        )

    return fn, (x,)
