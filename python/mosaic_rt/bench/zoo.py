"""A suite-like workload: many distinct small Pallas TPU kernels, each run once.

A kernel author's day is a test suite: dozens of kernels, each traced,
compiled and run once or a few times. `kernels(salt)` lists 44 distinct
small kernels over every family the interpreters support (BlockSpec grids,
scalar prefetch, scratch VMEM/SMEM, aliasing, local DMAs, semaphores,
remote DMAs, barriers, races on, several cores per device via core_map and
parallel grids). `salt` changes every shape, so a later pass (or the other
interpreter) never meets a kernel it has compiled before.

Each entry's `build()` returns `(program, args, expected)`: `program(params)`
is a fresh jitted callable (new closures every time, so no jax cache can be
shared between builds), `args` the inputs and `expected` the numpy result.
Inputs hold small integers, so float32 results are exact.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from mosaic_rt.bench import collectives, local

_F32 = jnp.float32
_LANES = 128


@dataclasses.dataclass(frozen=True)
class ZooKernel:
    name: str
    family: str  # what it exercises (for the per-family breakdown)
    devices: int
    build: Callable  # () -> (program(params), args, expected)
    knobs: tuple = ()  # extra InterpretParams fields, both interpreters

    def params(self):
        """(stock params, our params) with this kernel's knobs."""
        from mosaic_rt.bench.measure import interpret_params

        stock, ours = interpret_params(dict(self.knobs).get("detect_races", False))
        extra = {k: v for k, v in self.knobs if k != "detect_races"}
        if extra:
            stock = dataclasses.replace(stock, **extra)
            ours = dataclasses.replace(ours, **extra)
        return stock, ours


def _ints(shape, seed):
    return np.random.default_rng(seed).integers(-8, 8, size=shape).astype(np.float32)


def _sds(shape):
    return jax.ShapeDtypeStruct(shape, _F32)


# -- BlockSpec grids -------------------------------------------------------------


def _add(grid, rows):
    x, y = _ints((grid * rows, _LANES), 1), _ints((grid * rows, _LANES), 2)

    def program(params):
        spec = pl.BlockSpec((rows, _LANES), lambda i: (i, 0))
        return jax.jit(
            pl.pallas_call(
                lambda a, b, o: o.__setitem__(..., a[...] + b[...]),
                out_shape=_sds(x.shape),
                grid=(grid,),
                in_specs=[spec, spec],
                out_specs=spec,
                interpret=params,
            )
        )

    return program, (x, y), x + y


def _add_2d(gi, gj, rows):
    x = _ints((gi * rows, gj * _LANES), 3)

    def program(params):
        spec = pl.BlockSpec((rows, _LANES), lambda i, j: (i, j))
        return jax.jit(
            pl.pallas_call(
                lambda a, o: o.__setitem__(..., a[...] * 2.0 - 1.0),
                out_shape=_sds(x.shape),
                grid=(gi, gj),
                in_specs=[spec],
                out_specs=spec,
                interpret=params,
            )
        )

    return program, (x,), x * 2 - 1


def _row_sum(grid, rows):
    """Output block revisited over an 'arbitrary' axis: a running sum."""
    x = _ints((rows, grid * _LANES), 4)

    def kernel(x_ref, o_ref):
        @pl.when(pl.program_id(0) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)

        o_ref[...] += x_ref[...]

    def program(params):
        return jax.jit(
            pl.pallas_call(
                kernel,
                out_shape=_sds((rows, _LANES)),
                grid=(grid,),
                in_specs=[pl.BlockSpec((rows, _LANES), lambda i: (0, i))],
                out_specs=pl.BlockSpec((rows, _LANES), lambda i: (0, 0)),
                compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
                interpret=params,
            )
        )

    return program, (x,), x.reshape(rows, grid, _LANES).sum(axis=1)


def _matmul(blocks, tile):
    fn, (a, b) = local.blocked_matmul(blocks, tile)
    a, b = np.asarray(a), np.asarray(b)
    return fn, (a, b), a @ b


def _prefetch_gather(n, rows):
    idx = (np.arange(n, dtype=np.int32) * 3 + 1) % n
    x = _ints((n, rows, _LANES), 5)

    def kernel(idx_ref, x_ref, o_ref):
        o_ref[...] = x_ref[...] + idx_ref[pl.program_id(0)].astype(_F32)

    def program(params):
        spec = pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(n,),
            in_specs=[pl.BlockSpec((None, rows, _LANES), lambda i, idx: (idx[i], 0, 0))],
            out_specs=pl.BlockSpec((None, rows, _LANES), lambda i, idx: (i, 0, 0)),
        )
        return jax.jit(pl.pallas_call(kernel, out_shape=_sds(x.shape), grid_spec=spec, interpret=params))

    return program, (idx, x), x[idx] + idx[:, None, None].astype(np.float32)


def _smem_counter(grid, rows):
    """An SMEM scratch scalar carried across grid steps."""
    x = _ints((grid * rows, _LANES), 6)

    def kernel(x_ref, o_ref, count):
        @pl.when(pl.program_id(0) == 0)
        def _():
            count[0] = 0

        count[0] += 1
        o_ref[...] = x_ref[...] + count[0].astype(_F32)

    def program(params):
        spec = pl.BlockSpec((rows, _LANES), lambda i: (i, 0))
        return jax.jit(
            pl.pallas_call(
                kernel,
                out_shape=_sds(x.shape),
                grid=(grid,),
                in_specs=[spec],
                out_specs=spec,
                scratch_shapes=[pltpu.SMEM((1,), jnp.int32)],
                compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
                interpret=params,
            )
        )

    steps = np.repeat(np.arange(1, grid + 1, dtype=np.float32), rows)[:, None]
    return program, (x,), x + steps


def _io_alias(grid, rows):
    x = _ints((grid * rows, _LANES), 7)

    def program(params):
        spec = pl.BlockSpec((rows, _LANES), lambda i: (i, 0))
        return jax.jit(
            pl.pallas_call(
                lambda a, o: o.__setitem__(..., a[...] + 3.0),
                out_shape=_sds(x.shape),
                grid=(grid,),
                in_specs=[spec],
                out_specs=spec,
                input_output_aliases={0: 0},
                interpret=params,
            )
        )

    return program, (x,), x + 3


# -- local DMAs and semaphores ------------------------------------------------------


def _pipeline(chunks, rows):
    fn, (x,) = local.dma_pipeline(chunks, rows)
    x = np.asarray(x)
    return fn, (x,), x * 2 + 1


def _roundtrip(rows):
    """HBM -> VMEM, compute, VMEM -> HBM with one DMA semaphore."""
    x = _ints((rows, _LANES), 8)

    def kernel(x_hbm, o_hbm, buf, sem):
        pltpu.async_copy(x_hbm, buf, sem).wait()
        buf[...] = buf[...] - 3.0
        pltpu.async_copy(buf, o_hbm, sem).wait()

    def program(params):
        return jax.jit(
            pl.pallas_call(
                kernel,
                out_shape=_sds(x.shape),
                in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                out_specs=pl.BlockSpec(memory_space=pl.ANY),
                scratch_shapes=[pltpu.VMEM(x.shape, _F32), pltpu.SemaphoreType.DMA],
                interpret=params,
            )
        )

    return program, (x,), x - 3


def _semaphores(iters, rows):
    fn, (x,) = local.semaphore_loop(iters, rows)
    x = np.asarray(x)
    return fn, (x,), x + iters


# -- several cores per device ------------------------------------------------------


def _core_mesh(cores):
    if hasattr(pltpu, "TensorCoreMesh"):  # public from jax 0.11; 0.12 deprecates create_*
        return pltpu.TensorCoreMesh(axis_name="core", num_cores=cores)
    return pltpu.create_tensorcore_mesh("core", num_cores=cores)


def _core_swap(rows):
    """core_map over 2 TensorCores: each copies its block, signals the other
    core, then copies the other core's block (a core_index handshake)."""
    cores = 2
    x = _ints((cores * rows, _LANES), 9)

    def program(params):
        @functools.partial(
            pl.kernel,
            out_type=_sds((2 * cores, rows, _LANES)),
            mesh=_core_mesh(cores),
            interpret=params,
            scratch_types=[pltpu.SemaphoreType.REGULAR, pltpu.SemaphoreType.DMA(())],
        )
        def run(x_hbm, o_hbm, sem, copy_sem):
            c = lax.axis_index("core")
            pltpu.async_copy(x_hbm.at[c], o_hbm.at[cores + c], copy_sem).wait()
            pl.semaphore_signal(sem, 1, core_index=1 - c)
            pl.semaphore_wait(sem, 1)
            pltpu.async_copy(o_hbm.at[cores + 1 - c], o_hbm.at[c], copy_sem).wait()

        return jax.jit(lambda x: run(x.reshape(cores, rows, _LANES)).reshape(-1, _LANES))

    halves = x.reshape(cores, rows, _LANES)
    return program, (x,), np.concatenate([halves[1], halves[0], halves[0], halves[1]])


def _parallel_grid(grid, rows):
    """A 'parallel' grid split between the cores (num_cores_or_threads=2)."""
    x = _ints((grid * rows, _LANES), 10)

    def program(params):
        spec = pl.BlockSpec((rows, _LANES), lambda i: (i, 0))
        return jax.jit(
            pl.pallas_call(
                lambda a, o: o.__setitem__(..., a[...] * 3.0),
                out_shape=_sds(x.shape),
                grid=(grid,),
                in_specs=[spec],
                out_specs=spec,
                compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
                interpret=params,
            )
        )

    return program, (x,), x * 3


# -- several devices ------------------------------------------------------------------


def _collective(builder, expect, n, rows):
    fn, (x,) = builder(n, rows)
    return fn, (x,), expect(np.asarray(x), n, rows)


def _roll_blocks(x, n, rows):
    return np.concatenate(np.roll(np.array(np.split(x, n)), 1, axis=0))


def _gathered(x, n, rows):
    return np.concatenate([x] * n)


def _scattered(x, n, rows):
    return x.reshape(n, n, rows, -1).sum(axis=0).reshape(n * rows, -1)


def _ping_pong(rounds, rows):
    fn, (x,) = collectives.ping_pong(rounds, rows)
    return fn, (x,), np.asarray(x) + rounds


def _barrier_copy(n, rows):
    """Barrier handshake with both ring neighbours, then a local DMA."""
    mesh = collectives._mesh(n)
    x_np = collectives._block_input(n, rows)
    x = collectives._sharded(x_np, mesh)

    def kernel(x_hbm, o_hbm, sem):
        me = lax.axis_index("x")
        collectives._neighbour_handshake(n, me)
        pltpu.async_copy(x_hbm, o_hbm, sem).wait()

    def program(params):
        call = pl.pallas_call(
            kernel,
            out_shape=_sds((rows, _LANES)),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.SemaphoreType.DMA],
            compiler_params=pltpu.CompilerParams(collective_id=0),
            interpret=params,
        )
        return collectives._shard_map(call, mesh)

    return program, (x,), x_np


def kernels(salt: int = 0) -> list[ZooKernel]:
    """44 distinct kernels; `salt` shifts every shape (distinct per salt)."""
    s = int(salt)
    r8 = 8 * (1 + s)  # rows for 8-aligned blocks
    rs = 1 + s % 8  # rows for the 8-device collectives (<= 64 KiB buffers)
    races = (("detect_races", True),)
    two_cores = (("num_cores_or_threads", 2),)
    z: list[ZooKernel] = []

    def add(name, family, devices, make, *args, knobs=()):
        z.append(ZooKernel(f"{name}", family, devices, functools.partial(make, *args), knobs))

    for g in (1, 2, 4, 8):
        add(f"add grid={g}", "grid", 1, _add, g, r8)
    for gi, gj in ((2, 2), (2, 4)):
        add(f"add2d grid={gi}x{gj}", "grid", 1, _add_2d, gi, gj, r8)
    for g in (2, 4):
        add(f"row-sum grid={g}", "grid", 1, _row_sum, g, r8)
    for b in (1, 2):
        add(f"matmul blocks={b}", "scratch", 1, _matmul, b, 64 + 8 * s)
    for n in (4, 8):
        add(f"prefetch-gather n={n}", "grid", 1, _prefetch_gather, n, r8)
    for g in (3, 6):
        add(f"smem-counter grid={g}", "scratch", 1, _smem_counter, g, r8)
    for g in (2, 4):
        add(f"io-alias grid={g}", "grid", 1, _io_alias, g, r8)
    for c in (2, 4, 8):
        add(f"dma-pipeline chunks={c}", "local dma", 1, _pipeline, c, r8)
    for size, rows in (("small", r8), ("large", 2 * r8)):
        add(f"dma-roundtrip {size}", "local dma", 1, _roundtrip, rows)
    for it in (4, 32):
        add(f"semaphores iters={it}", "semaphores", 1, _semaphores, it + s, r8)
    add("add grid=4 races", "races", 1, _add, 4, r8, knobs=races)
    add("dma-pipeline chunks=4 races", "races", 1, _pipeline, 4, r8, knobs=races)
    add("matmul blocks=1 races", "races", 1, _matmul, 1, 64 + 8 * s, knobs=races)
    add("semaphores iters=8 races", "races", 1, _semaphores, 8 + s, r8, knobs=races)
    for size, rows in (("small", r8), ("large", 2 * r8)):
        add(f"core_map 2 cores {size}", "cores", 1, _core_swap, rows)
    for g in (2, 4):
        add(f"parallel grid={g} 2 cores", "cores", 1, _parallel_grid, g, r8, knobs=two_cores)
    for n in (2, 4, 8):
        add(f"right-permute {n}dev", "remote dma", n, _collective, collectives.right_permute, _roll_blocks, n, rs)
    for n in (4, 8):
        add(f"all-gather {n}dev", "remote dma", n, _collective, collectives.all_gather, _gathered, n, rs)
    for n in (4, 8):
        add(f"reduce-scatter {n}dev", "remote dma", n, _collective, collectives.reduce_scatter, _scattered, n, rs)
    for rounds in (2, 8):
        add(f"ping-pong rounds={rounds}", "semaphores", 2, _ping_pong, rounds + s, r8)
    for n in (2, 8):
        add(f"barrier {n}dev", "barrier", n, _barrier_copy, n, rs)
    add(
        "right-permute 4dev races", "races", 4, _collective, collectives.right_permute, _roll_blocks, 4, rs, knobs=races
    )
    add("all-gather 4dev races", "races", 4, _collective, collectives.all_gather, _gathered, 4, rs, knobs=races)
    return z
