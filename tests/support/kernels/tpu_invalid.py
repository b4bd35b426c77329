"""Kernels that interpret correctly but cannot run on a TPU, each with its fix.

Every `Invalid` holds a broken kernel and the fixed one, the same inputs and
a numpy reference both must match when interpreted. ``rejects`` says, per
TPU generation, which fragment of the real compiler's message rejects the
broken kernel (measured with libtpu 0.0.42.1 / jax 0.10.2 and libtpu 0.0.50.1
/ jax 0.12.0.1: the same on both); a generation missing from it compiles the
broken kernel. ``fixed_rejects`` lists the generations the fixed kernel still
does not fit (e.g. v4's 16 MiB of VMEM).

Measured limits behind the entries: VMEM per core v4 16 MiB, v5e / v6e
128 MiB, v5p / v7x 64 MiB; the default scoped VMEM limit for BlockSpec
buffers 16 MiB on v4 / v5e / v5p, 32 MiB on v6e / v7x (scratch is checked
against the physical capacity, not this limit); SMEM 1 MiB; DMA / barrier
semaphore space ("sflag") 2 KiB, 16 KiB on v7x.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

GENERATIONS = ("v4", "v5e", "v5p", "v6e", "v7x")
MiB = 2**20
_F32 = jnp.float32

# Stage of the check that rejects: the Pallas TPU lowering (Python) or the
# Mosaic / XLA:TPU compiler.
LOWERING, COMPILER = "lowering", "compile"


@dataclasses.dataclass(frozen=True)
class Invalid:
    """A kernel a TPU rejects and its fix.

    ``broken(params)`` / ``fixed(params)`` build the program (a callable
    taking ``args``) with ``interpret=params``; ``kernel`` is the name of
    the broken kernel's body (what `TpuCompileError.kernel` says).
    """

    name: str
    why: str
    broken: Callable
    fixed: Callable
    args: tuple
    reference: Callable
    kernel: str
    stage: str
    rejects: dict
    fixed_rejects: dict = dataclasses.field(default_factory=dict)


def _ints(shape, dtype=np.float32, seed=0, lo=-8, hi=8):
    return np.random.default_rng(seed).integers(lo, hi, size=shape).astype(dtype)


def _everywhere(fragment):
    return {g: fragment for g in GENERATIONS}


# -- (a) blocks that break the (8, 128) tiling rule --------------------------------


def _add_one(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


def _blocked_add_one(block, shape):
    def build(params):
        return pl.pallas_call(
            _add_one,
            out_shape=jax.ShapeDtypeStruct(shape, _F32),
            grid=(shape[0] // block[0], shape[1] // block[1]),
            in_specs=[pl.BlockSpec(block, lambda i, j: (i, j))],
            out_specs=pl.BlockSpec(block, lambda i, j: (i, j)),
            interpret=params,
        )

    return build


_TILING = "divisible by 8 and 128 respectively"

TILING_SUBLANES = Invalid(
    "tiling_sublanes",
    "(4, 128) f32 blocks: second-to-last block dim not a multiple of 8",
    _blocked_add_one((4, 128), (16, 128)),
    _blocked_add_one((8, 128), (16, 128)),
    (_ints((16, 128), seed=1),),
    lambda x: x + 1,
    "_add_one",
    LOWERING,
    _everywhere(_TILING),
)

TILING_LANES = Invalid(
    "tiling_lanes",
    "(8, 64) f32 blocks: last block dim not a multiple of 128",
    _blocked_add_one((8, 64), (8, 256)),
    _blocked_add_one((8, 128), (8, 256)),
    (_ints((8, 256), seed=2),),
    lambda x: x + 1,
    "_add_one",
    LOWERING,
    _everywhere(_TILING),
)


# -- (b) VMEM: fits one generation, not another ------------------------------------


def _scale(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0 + 1.0


def _scale_in_blocks(rows, grid):
    def build(params):
        block = pl.BlockSpec((rows // grid, 128), lambda i: (i, 0))
        return pl.pallas_call(
            _scale,
            out_shape=jax.ShapeDtypeStruct((rows, 128), _F32),
            grid=(grid,),
            in_specs=[block],
            out_specs=block,
            interpret=params,
        )

    return build


# One step over a 16 MiB array: a 16 MiB input and a 16 MiB output buffer,
# over the 16 MiB default scoped limit of v5e / v5p, within v6e / v7x's 32 MiB.
_BIG_ROWS = 16 * MiB // 512
VMEM_BLOCKS = Invalid(
    "vmem_blocks_over_scoped_limit",
    "32 MiB of BlockSpec buffers in one grid step: over the default scoped VMEM"
    " limit of v5e / v5p (16 MiB), within v6e / v7x's (32 MiB); fixed: 8 grid steps",
    _scale_in_blocks(_BIG_ROWS, 1),
    _scale_in_blocks(_BIG_ROWS, 8),
    (_ints((_BIG_ROWS, 128), seed=3),),
    lambda x: x * 2 + 1,
    "_scale",
    COMPILER,
    {
        "v4": "Ran out of memory in memory space vmem. Used 32.00M of 16.00M vmem",
        "v5e": "Scoped allocation with size 32.00M and limit 16.00M exceeded scoped vmem limit",
        "v5p": "Scoped allocation with size 32.00M and limit 16.00M exceeded scoped vmem limit",
    },
)


def _workspace(mib):
    """x * 2 staged through the last rows of a ``mib`` MiB VMEM workspace
    (vmem_limit_bytes raised to 100 MiB, as a kernel with a big working set
    does)."""
    rows = mib * MiB // 512

    def kernel(x_ref, o_ref, work_ref):
        work_ref[pl.ds(rows - 8, 8), :] = x_ref[...]
        o_ref[...] = work_ref[pl.ds(rows - 8, 8), :] * 2.0

    def build(params):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((8, 128), _F32),
            scratch_shapes=[pltpu.VMEM((rows, 128), _F32)],
            compiler_params=pltpu.CompilerParams(vmem_limit_bytes=100 * MiB),
            interpret=params,
        )

    return build


VMEM_SCRATCH = Invalid(
    "vmem_scratch_over_capacity",
    "80 MiB of VMEM scratch: within v5e / v6e's 128 MiB, over v5p / v7x's 64 MiB"
    " (and v4's 16 MiB); fixed: a 40 MiB workspace, which still does not fit v4",
    _workspace(80),
    _workspace(40),
    (_ints((8, 128), seed=4),),
    lambda x: x * 2,
    "kernel",
    COMPILER,
    {
        "v4": "would exceed memory (size=16777216)",
        "v5p": "would exceed memory (size=67108864)",
        "v7x": "would exceed memory (size=67108864)",
    },
    fixed_rejects={"v4": "would exceed memory (size=16777216)"},
)


# -- (c) a dynamic lane slice whose start the compiler cannot prove aligned ---------


def _lane_window(aligned):
    def kernel(start_ref, x_ref, o_ref):
        start = start_ref[0]
        if aligned:  # the caller promises a multiple of 128: say so
            start = pl.multiple_of(start, 128)
        o_ref[...] = x_ref[:, pl.ds(start, 128)]

    def build(params):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((8, 128), _F32),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1,
                grid=(1,),
                in_specs=[pl.BlockSpec((8, 512), lambda i, s: (0, 0))],
                out_specs=pl.BlockSpec((8, 128), lambda i, s: (0, 0)),
            ),
            interpret=params,
        )

    return build


LANE_SLICE = Invalid(
    "lane_unaligned_dynamic_slice",
    "x_ref[:, pl.ds(start, 128)] with a runtime start: Mosaic cannot prove it a"
    " multiple of 128 (even when it is at run time); fixed: pl.multiple_of(start, 128)",
    _lane_window(False),
    _lane_window(True),
    (np.array([256], np.int32), _ints((8, 512), seed=5)),
    lambda s, x: x[:, int(s[0]) : int(s[0]) + 128],
    "kernel",
    COMPILER,
    _everywhere("cannot statically prove that index in dimension 1 is a multiple of 128"),
)


# -- (d) a reshape Mosaic has no layout for ----------------------------------------


def _pairs_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...].reshape(4, 192) * 2.0


def _pairs_broken(params):
    return pl.pallas_call(_pairs_kernel, out_shape=jax.ShapeDtypeStruct((4, 192), _F32), interpret=params)


def _pairs_fixed(params):
    # The reshape moves to the caller, where XLA does it for free.
    call = pl.pallas_call(_scale_by_two, out_shape=jax.ShapeDtypeStruct((4, 192), _F32), interpret=params)
    return lambda x: call(x.reshape(4, 192))


def _scale_by_two(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0


RESHAPE = Invalid(
    "unsupported_reshape",
    "(8, 96) -> (4, 192) inside the kernel: no vector layout for that shape cast; fixed: reshape outside the kernel",
    _pairs_broken,
    _pairs_fixed,
    (_ints((8, 96), seed=6),),
    lambda x: x.reshape(4, 192) * 2,
    "_pairs_kernel",
    COMPILER,
    _everywhere("unsupported shape cast"),
)


# -- (e) dtypes the hardware lacks --------------------------------------------------


def _int8_add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def _int8_add_widened(x_ref, y_ref, o_ref):
    wide = x_ref[...].astype(jnp.int32) + y_ref[...].astype(jnp.int32)
    o_ref[...] = wide.astype(jnp.int8)


def _int8_add(kernel):
    def build(params):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((32, 128), jnp.int8), interpret=params)

    return build


INT8_VECTOR = Invalid(
    "int8_vector_arithmetic",
    "an int8 add: no TPU generation's vector unit has int8 arithmetic; fixed: widen to int32 in the kernel",
    _int8_add(_int8_add_kernel),
    _int8_add(_int8_add_widened),
    (_ints((32, 128), np.int8, seed=7), _ints((32, 128), np.int8, seed=8)),
    lambda x, y: x + y,
    "_int8_add_kernel",
    COMPILER,
    _everywhere("Only vector<i16> and vector<i32> are supported, but got 'i8'"),
)


def _int8_matmul_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.int32)


def _bf16_matmul_kernel(x_ref, y_ref, o_ref):
    # int8 values are exact in bfloat16 and these sums exact in float32.
    acc = jnp.dot(x_ref[...].astype(jnp.bfloat16), y_ref[...].astype(jnp.bfloat16), preferred_element_type=_F32)
    o_ref[...] = acc.astype(jnp.int32)


def _matmul(kernel):
    def build(params):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((128, 128), jnp.int32), interpret=params)

    return build


INT8_MATMUL = Invalid(
    "int8_matmul_without_int8_mxu",
    "an int8 x int8 -> int32 matmul: v4's MXU has no int8 (v5e and later do);"
    " fixed: bfloat16 operands, float32 accumulation",
    _matmul(_int8_matmul_kernel),
    _matmul(_bf16_matmul_kernel),
    (_ints((128, 128), np.int8, seed=9), _ints((128, 128), np.int8, seed=10)),
    lambda x, y: x.astype(np.int32) @ y.astype(np.int32),
    "_int8_matmul_kernel",
    COMPILER,
    {"v4": "Unsupported matmul RHS type on target: vector<128x128xi8>"},
)


# -- (f) SMEM and semaphores --------------------------------------------------------


def _smem_table(entries):
    def kernel(x_ref, o_ref, table_ref):
        table_ref[entries - 1] = 5
        o_ref[...] = x_ref[...] + table_ref[entries - 1].astype(_F32)

    def build(params):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((8, 128), _F32),
            scratch_shapes=[pltpu.SMEM((entries,), jnp.int32)],
            interpret=params,
        )

    return build


SMEM = Invalid(
    "smem_overflow",
    "an int32[300000] SMEM table (1.2 MB) over the 1 MiB of SMEM; fixed: int32[200000]",
    _smem_table(300_000),
    _smem_table(200_000),
    (_ints((8, 128), seed=11),),
    lambda x: x + 5,
    "kernel",
    COMPILER,
    _everywhere("Allocation (size=1200128) would exceed memory (size=1048576)"),
)


def _chunked_copy(num_sems, rows=8192):
    """An HBM -> HBM copy in ``num_sems`` chunks, each DMA on its own semaphore."""
    chunk = rows // num_sems

    def kernel(x_hbm, o_hbm, sems):
        def copy(i):
            at = pl.ds(pl.multiple_of(i * chunk, chunk), chunk)
            return pltpu.make_async_copy(x_hbm.at[at], o_hbm.at[at], sems.at[i])

        def start(i, carry):
            copy(i).start()
            return carry

        def wait(i, carry):
            copy(i).wait()
            return carry

        lax.fori_loop(0, num_sems, start, 0)
        lax.fori_loop(0, num_sems, wait, 0)

    def build(params):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((rows, 128), _F32),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.SemaphoreType.DMA((num_sems,))],
            interpret=params,
        )

    return build


_SFLAG = "Allocation (size=4096) would exceed memory (size=2048)"
SEMAPHORES = Invalid(
    "too_many_dma_semaphores",
    "1024 DMA semaphores (4 KiB): over the 2 KiB semaphore space of v4 .. v6e,"
    " within v7x's 16 KiB; fixed: 8 chunks, 8 semaphores",
    _chunked_copy(1024),
    _chunked_copy(8),
    (_ints((8192, 128), seed=12),),
    lambda x: x,
    "kernel",
    COMPILER,
    {g: _SFLAG for g in ("v4", "v5e", "v5p", "v6e")},
)


CORPUS: list[Invalid] = [
    TILING_SUBLANES,
    TILING_LANES,
    VMEM_BLOCKS,
    VMEM_SCRATCH,
    LANE_SLICE,
    RESHAPE,
    INT8_VECTOR,
    INT8_MATMUL,
    SMEM,
    SEMAPHORES,
]
BY_NAME = {c.name: c for c in CORPUS}
assert len(BY_NAME) == len(CORPUS)
assert all(set(c.rejects) <= set(GENERATIONS) for c in CORPUS)
